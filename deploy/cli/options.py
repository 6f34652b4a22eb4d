"""Typer options derived from a dataclass: one declaration of a knob (its field, type and help
text) gives its command-line flag, so the CLI cannot drift from the job API or the operator screen.

`with_options(Knobs)` adds one `--flag-name` option per field of `Knobs` (help from the field's
`metadata["help"]`, extra names from `metadata["aliases"]`) to a command and hands the command a
`Knobs` instance in its `knobs` argument. Typer reads the wrapper's `__signature__`.
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any, Optional

import typer


def _option(field: dataclasses.Field, hint: Any) -> inspect.Parameter:
    """`--field-name` (and its aliases), typed as the field without its None."""
    names = ("--" + field.name.replace("_", "-"), *field.metadata.get("aliases", ()))
    base = next(h for h in typing.get_args(hint) or (hint,) if h is not type(None))
    return inspect.Parameter(field.name, inspect.Parameter.KEYWORD_ONLY, annotation=Optional[base],
                             default=typer.Option(None, *names, help=field.metadata.get("help", "")))


def with_options(knobs: type) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Decorate a command `fn(..., knobs: Knobs)`: its `knobs` parameter becomes one flag per field."""
    knob_fields = dataclasses.fields(knobs)
    knob_hints = typing.get_type_hints(knobs)

    def decorate(fn: Callable[..., Any]) -> Callable[..., Any]:
        signature = inspect.signature(fn)
        kept = [p for name, p in signature.parameters.items() if name != "knobs"]
        params = [*kept, *(_option(f, knob_hints[f.name]) for f in knob_fields)]

        @functools.wraps(fn)
        def command(*args: Any, **kwargs: Any) -> Any:
            values = {f.name: kwargs.pop(f.name, None) for f in knob_fields}
            return fn(*args, knobs=knobs(**values), **kwargs)

        del command.__wrapped__  # Typer must read the new signature, not fn's
        command.__signature__ = signature.replace(parameters=params)
        hints = typing.get_type_hints(fn)
        command.__annotations__ = {**{p.name: hints.get(p.name, p.annotation) for p in kept},
                                   **{p.name: p.annotation for p in params[len(kept):]}}
        return command

    return decorate
