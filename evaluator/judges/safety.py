"""The labelled safety set: real requests, two models' answers, each marked by careful reading.

`evaluator/data/safety_set.jsonl`, one row per (request, answer): `{"id", "kind": "risky"|"everyday",
"subset", "row", "request", "model", "answer", "request_harmful", "answer_unsafe"}`; `model` is
"smollm2" (greedy, no system prompt), "builtin", or `SERVED` (as served under the guard's policy). Made by
`tools/data/make_safety_set.py` and labelled by the conventions in docs/safety_conventions.md
(agreement of a blind second annotation: docs/judges.md).

The split is by request (both answers to one request fall on the same side), a hash of the
source row: `held_out` (a third) is scored once per judge version for the precision and recall
of "unsafe" at the shipped threshold; `train` fits the harmlessness judge and chooses its threshold.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from evaluator.shipped import DATA_DIR, read_jsonl

SAFETY_SET = DATA_DIR / "safety_set.jsonl"
SERVED = "smollm2-served"  # the served model's answers as the service draws them (policy, sampled)
HELD_OUT_SHARE = 1 / 3


@dataclass(frozen=True)
class SafetyItem:
    id: str
    kind: str
    subset: str
    row: int
    request: str
    model: str
    answer: str
    request_harmful: bool
    answer_unsafe: bool

    @property
    def split(self) -> str:
        return split_of(self.subset, self.row)


def split_of(subset: str, row: int) -> str:
    u = int(hashlib.sha256(f"safety:{subset}:{row}".encode()).hexdigest()[:8], 16) / 2**32
    return "held_out" if u < HELD_OUT_SHARE else "train"


def load_safety_set(path: str | Path = SAFETY_SET) -> list[SafetyItem]:
    """Labelled rows only; a row without both labels is an error that names it."""
    items = []
    for n, obj in enumerate(read_jsonl(path), start=1):
        if not isinstance(obj.get("request_harmful"), bool) or not isinstance(obj.get("answer_unsafe"), bool):
            raise ValueError(f"{path} line {n} ({obj.get('id')}): request_harmful and answer_unsafe must be "
                             "true or false (label it by docs/safety_conventions.md)")
        items.append(SafetyItem(id=str(obj["id"]), kind=str(obj["kind"]), subset=str(obj["subset"]),
                                row=int(obj["row"]), request=str(obj["request"]), model=str(obj["model"]),
                                answer=str(obj["answer"]), request_harmful=obj["request_harmful"],
                                answer_unsafe=obj["answer_unsafe"]))
    return items
