"""HelpSteer / SteerLM attributes: the steering values stored with every answer.

Five integers 0-4 (Wang et al., HelpSteer). The SteerLM string is the canonical, ordered
`name:value` list that attribute-conditioned SFT trains on and that the chat template places
after the assistant header. It lives here, beside the data model, because it is stored with
every answer and written into every training set; `chat` only decides how a backend sees it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, fields

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
