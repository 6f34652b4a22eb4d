"""How steering attributes reach a model.

Two renderings (DESIGN.md, "Steering"):
- `steerlm`: the model was trained with attribute-conditioned SFT. The SteerLM string goes into
  the chat template's `attributes` kwarg, which puts it on the `<|attributes|>` line after the
  assistant header of the generation prompt (transformers: `apply_chat_template(...,
  attributes=s)`; vLLM: `chat_template_kwargs={"attributes": s}`). Earlier assistant turns keep
  the `attributes` key they were generated with, exactly as they look in training data.
- `instruct`: a general chat model that never saw SteerLM strings. The values become plain
  instructions (the words of `LEVEL_WORDS`, shared with the UI preview) appended to the system
  message, or a new system message when there is none. No template kwarg, no extra keys.

Pure functions on message dicts; no model or backend code here.
"""

from __future__ import annotations

from feedback.attributes import LEVEL_WORDS, Attributes

STEERING_MODES = ("steerlm", "instruct")

# The order and wording of the instruct rendering: the two attributes people steer most come first.
_INSTRUCT_LINES = (
    ("verbosity", "Length"),
    ("complexity", "Language"),
    ("helpfulness", "Helpfulness"),
    ("correctness", "Accuracy"),
    ("coherence", "Clarity"),
)


def check_mode(mode: str) -> str:
    if mode not in STEERING_MODES:
        raise ValueError(f"unknown steering mode {mode!r}; use one of {', '.join(STEERING_MODES)}")
    return mode


def instructions(attributes: Attributes) -> str:
    """The attributes as plain instructions for a general instruct model."""
    lines = [
        f"- {label}: {LEVEL_WORDS[name][getattr(attributes, name)]} ({name} {getattr(attributes, name)}/4)."
        for name, label in _INSTRUCT_LINES
    ]
    return "Write your answer to match these settings:\n" + "\n".join(lines)


def preview(attributes: Attributes) -> str:
    """One line saying what the verbosity and complexity levels mean ("brief · plain language")."""
    return f"{LEVEL_WORDS['verbosity'][attributes.verbosity]} · {LEVEL_WORDS['complexity'][attributes.complexity]}"


def render(
    messages: list[dict], attributes: Attributes | None, mode: str
) -> tuple[list[dict], str | None]:
    """Return (messages to send, value of the template kwarg `attributes` or None).

    Never mutates the input. With `attributes=None` nothing is steered (the model's default)."""
    check_mode(mode)
    if mode == "steerlm":
        out = [dict(m) for m in messages]
        return out, attributes.steerlm() if attributes is not None else None
    out = [{k: v for k, v in m.items() if k != "attributes"} for m in messages]
    if attributes is None:
        return out, None
    text = instructions(attributes)
    if out and out[0].get("role") == "system":
        existing = (out[0].get("content") or "").rstrip()
        out[0]["content"] = f"{existing}\n\n{text}" if existing else text
    else:
        out.insert(0, {"role": "system", "content": text})
    return out, None
