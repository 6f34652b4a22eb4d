"""HelpSteer / SteerLM attributes: the steering values stored with every answer.

Five integers 0-4 (Wang et al., HelpSteer). The SteerLM string is the canonical, ordered
`name:value` list that attribute-conditioned SFT trains on and that the chat template places
after the assistant header. It lives here, beside the data model, because it is stored with
every answer and written into every training set; `chat` only decides how a backend sees it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields
from enum import StrEnum

NAMES = ("helpfulness", "correctness", "coherence", "complexity", "verbosity")
MIN_VALUE, MAX_VALUE = 0, 4


class InvalidAttributes(ValueError):
    """An attribute value outside 0-4, an unknown name, or an unparsable SteerLM string."""


@dataclass(frozen=True)
class Attributes:
    helpfulness: int = 4
    correctness: int = 4
    coherence: int = 4
    complexity: int = 2
    verbosity: int = 2

    def __post_init__(self) -> None:
        for f in fields(self):
            value = getattr(self, f.name)
            # bool is an int subclass; "True" as a verbosity is a caller bug, not a 1.
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidAttributes(
                    f"attribute {f.name!r} must be an integer {MIN_VALUE}-{MAX_VALUE}, got {value!r}"
                )
            if not MIN_VALUE <= value <= MAX_VALUE:
                raise InvalidAttributes(
                    f"attribute {f.name!r} must be between {MIN_VALUE} and {MAX_VALUE}, got {value}"
                )

    def steerlm(self) -> str:
        """`helpfulness:4,correctness:4,coherence:4,complexity:2,verbosity:1`"""
        return ",".join(f"{name}:{getattr(self, name)}" for name in NAMES)

    def as_dict(self) -> dict[str, int]:
        return asdict(self)

    def replace(self, **changes: int) -> "Attributes":
        return Attributes(**{**self.as_dict(), **changes})

    @classmethod
    def from_dict(cls, values: dict) -> "Attributes":
        unknown = set(values) - set(NAMES)
        if unknown:
            raise InvalidAttributes(
                f"unknown attribute(s) {sorted(unknown)}; known: {', '.join(NAMES)}"
            )
        coerced = {}
        for name, value in values.items():
            if value is None:
                continue
            if isinstance(value, str):
                if not value.strip().lstrip("-").isdigit():
                    raise InvalidAttributes(f"attribute {name!r} must be an integer 0-4, got {value!r}")
                value = int(value)
            coerced[name] = value
        return cls(**coerced)

    @classmethod
    def parse(cls, text: str) -> "Attributes":
        """Inverse of `steerlm()`; missing names keep their defaults."""
        values: dict[str, str] = {}
        for part in filter(None, (p.strip() for p in text.split(","))):
            name, sep, value = part.partition(":")
            if not sep:
                raise InvalidAttributes(f"bad SteerLM item {part!r}; expected name:value")
            values[name.strip()] = value.strip()
        return cls.from_dict(values)


# Short, human descriptions of each level, used by the UI preview and by the `instruct`
# rendering (plain instructions for general chat models).
LEVEL_WORDS = {
    "verbosity": ("one or two sentences", "brief", "a short paragraph", "detailed", "thorough, step by step"),
    "complexity": ("very simple words", "plain language", "everyday adult language", "precise and nuanced", "expert-level and technical"),
    "helpfulness": ("minimal", "somewhat helpful", "helpful", "very helpful", "as helpful as possible"),
    "correctness": ("loose", "mostly accurate", "accurate", "carefully accurate", "rigorously accurate"),
    "coherence": ("loose", "fairly clear", "clear", "very clear", "perfectly clear and well organised"),
}


# --------------------------------------------------------------------------- as instructions


class SteeringMode(StrEnum):
    """How a model is shown the attributes (`chat.steering.render`; the trainer renders the same way):
    `steerlm`, the SteerLM string as the chat template's `attributes` kwarg (models trained with
    attribute-conditioned SFT); `instruct`, plain instructions after the last user message (general
    chat models). A str, so it compares, serialises and stores as its value. `SteeringMode(text)` is
    the one validation; an unknown name raises ValueError naming the modes."""

    STEERLM = "steerlm"
    INSTRUCT = "instruct"

    @classmethod
    def _missing_(cls, value: object) -> "SteeringMode":
        raise ValueError(f"unknown steering mode {value!r}; use one of {', '.join(m.value for m in cls)}")


# How the `instruct` steering mode says the attributes to a general chat model (the measurements
# behind the wording and the place: docs/models.md, "Steering"). Here because both the chat and the
# trainer render with it: a training prompt must read as the prompt the answer was generated for.

# A word budget for verbosity (the 135M default model ignores "brief" but roughly keeps to a
# number), a reading level for complexity.
VERBOSITY_INSTRUCTIONS = (
    "Answer in one or two sentences, no more than 30 words.",
    "Answer briefly, in about 60 words.",
    "Answer in a short paragraph of about 100 words.",
    "Give a detailed answer of about 180 words.",
    "Give a thorough, step by step answer of about 250 words, with numbered steps.",
)
COMPLEXITY_INSTRUCTIONS = (
    "Use very simple words and short sentences that a child could read.",
    "Use plain language and simple words.",
    "Use everyday adult language.",
    "Use precise and nuanced language, with longer sentences.",
    "Write in an expert-level and technical way, with specialist terms and complex sentences.",
)
# Mentioned only when below the default (4).
_QUALITY_LABELS = (("helpfulness", "Helpfulness"), ("correctness", "Accuracy"), ("coherence", "Clarity"))


def instructions(attributes: Attributes) -> str:
    """The attributes as plain instructions for a general instruct model (one line)."""
    parts = [VERBOSITY_INSTRUCTIONS[attributes.verbosity], COMPLEXITY_INSTRUCTIONS[attributes.complexity]]
    parts += [f"{label}: {LEVEL_WORDS[name][getattr(attributes, name)]}."
              for name, label in _QUALITY_LABELS if getattr(attributes, name) < 4]
    return " ".join(parts)


def with_instructions(messages: list[dict], attributes: Attributes | None) -> list[dict]:
    """A copy of `messages` without per-message `attributes` keys, with the attributes' instructions
    appended to the last user message (else to the system message, else in a new one). None: no
    instructions. Never mutates the input."""
    out = [{k: v for k, v in m.items() if k != "attributes"} for m in messages]
    if attributes is None:
        return out
    text = instructions(attributes)
    last = out[-1] if out else None
    if last is not None and last.get("role") == "user" and isinstance(last.get("content"), str):
        content = last["content"].rstrip()
        last["content"] = f"{content}\n\n{text}" if content else text
    else:
        add_to_system(out, text)
    return out


def add_to_system(messages: list[dict], text: str, *, first: bool = False) -> None:
    """Put `text` in the conversation's system message (after what it says, or before when
    `first`), making one at the start when there is none. Changes `messages` in place."""
    if messages and messages[0].get("role") == "system":
        existing = messages[0].get("content") or ""
        existing = existing.strip() if first else existing.rstrip()
        parts = [text, existing] if first else [existing, text]
        messages[0]["content"] = "\n\n".join(p for p in parts if p)
    else:
        messages.insert(0, {"role": "system", "content": text})
