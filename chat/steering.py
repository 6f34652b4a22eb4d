"""How steering attributes reach a model.

Two renderings (docs/design.md, "Steering"):
- `steerlm`: the model was trained with attribute-conditioned SFT. The SteerLM string goes into
  the chat template's `attributes` kwarg, which puts it on the `<|attributes|>` line after the
  assistant header of the generation prompt (transformers: `apply_chat_template(...,
  attributes=s)`; vLLM: `chat_template_kwargs={"attributes": s}`). Earlier assistant turns keep
  the `attributes` key they were generated with, exactly as they look in training data.
- `instruct`: a general chat model that never saw SteerLM strings. The values become plain
  sentences (a word budget, a reading level; the other three only below their default 4)
  appended to the *last user message*, as sent (stored messages and an operator's system
  message are untouched). After the request it governs, a small model follows
  it where it ignores a system message (measured in docs/models.md, "Steering"); it is per answer,
  and it survives trimming that keeps a prompt's end. A conversation that does not end with a
  user message gets it in the system message instead.
The wording and placement live in `store.attributes` (`with_instructions`), because the
trainer must render a training prompt as the model saw it, and `trainer` cannot import `chat`.

Pure functions on message dicts; no model or backend code here.
"""

from __future__ import annotations

from store.attributes import LEVEL_WORDS, Attributes, SteeringMode, with_instructions


def check_mode(mode: SteeringMode | str) -> SteeringMode:
    """The mode as the type; a plain name ("steerlm") is parsed, an unknown one raises ValueError."""
    return SteeringMode(mode)


def preview(attributes: Attributes) -> str:
    """One line saying what the verbosity and complexity levels mean ("brief · plain language")."""
    return f"{LEVEL_WORDS['verbosity'][attributes.verbosity]} · {LEVEL_WORDS['complexity'][attributes.complexity]}"


def render(
    messages: list[dict], attributes: Attributes | None, mode: SteeringMode
) -> tuple[list[dict], str | None]:
    """Return (messages to send, value of the template kwarg `attributes` or None).

    Never mutates the input. With `attributes=None` nothing is steered (the model's default).
    A plain mode name is parsed as `check_mode` does, so a misspelt one fails here, not silently."""
    if check_mode(mode) is SteeringMode.STEERLM:
        out = [dict(m) for m in messages]
        return out, attributes.steerlm() if attributes is not None else None
    return with_instructions(messages, attributes), None
