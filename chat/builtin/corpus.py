"""The shipped advice corpus: loading it and turning it into tokenizer and SFT text.

`corpus.jsonl` (next to this file) is committed text: one question-answer pair per line with
its topic and HelpSteer labels. It is generated from the hand-written fragments in
`corpus_source.py` by `python -m tools.data.corpus_source`, and the build hashes the .jsonl
itself, so editing the fragments and regenerating changes the recipe hash and triggers a
rebuild.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

CORPUS_PATH = Path(__file__).with_name("corpus.jsonl")

# Used only while the corpus file is missing (e.g. a checkout in the middle of regeneration),
# so the tiny model can still be made.
_FALLBACK = (
    "Try to go to bed at the same time every night and keep screens out of the bedroom. "
    "Write down what you spend for a month, then decide where to cut. "
    "Talk to your friend directly and say how you feel, without blaming. "
    "Break the work into small tasks and start with the first one today."
)


@dataclass(frozen=True)
class Example:
    id: str
    topic: str
    question: str
    answer: str
    attributes: dict[str, int]

    @property
    def group(self) -> str:
        """Examples answering the same question (in any phrasing) share a group: `q012`."""
        return self.id.split("-", 1)[0]

    def steerlm(self) -> str:
        from store.attributes import Attributes

        return Attributes.from_dict(self.attributes).steerlm()


def load_corpus(path: Path = CORPUS_PATH) -> list[Example]:
    """Every example in file order (the build relies on that order being stable)."""
    if not path.exists():
        raise FileNotFoundError(
            f"advice corpus not found at {path}; regenerate it with `python -m tools.data.corpus_source`"
        )
    out = []
    with path.open(encoding="utf-8") as fh:
        for n, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                rec = json.loads(line)
                out.append(Example(rec["id"], rec["topic"], rec["question"], rec["answer"], dict(rec["attributes"])))
            except (ValueError, KeyError) as exc:
                raise ValueError(f"{path}:{n}: bad corpus record ({exc}); regenerate the corpus") from exc
    return out


def tokenizer_texts(path: Path = CORPUS_PATH) -> list[str]:
    """Texts the BPE is trained on, in file order: each distinct question and answer, and every
    example's attribute string (so the attribute names become single tokens while the byte-level
    pre-tokeniser keeps each digit, colon and comma a token of its own)."""
    if not path.exists():
        return [_FALLBACK]
    seen: dict[str, None] = {}
    attrs: list[str] = []
    for ex in load_corpus(path):
        seen.setdefault(ex.question)
        seen.setdefault(ex.answer)
        attrs.append(ex.steerlm())
    return list(seen) + attrs
