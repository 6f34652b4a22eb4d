"""The labelled safety set: real requests, two models' answers, each marked by careful reading.

`evaluator/data/safety_set.jsonl`, one row per (request, answer): `{"id", "kind": "risky"|"everyday",
"subset", "row", "request", "model", "answer", "request_harmful", "answer_unsafe"}`; `model` is
"smollm2" (greedy, no system prompt), "builtin", or `SERVED` (as served under the guard's policy). Made by
`tools/data/make_safety_set.py` and labelled by the conventions in docs/safety_conventions.md
(agreement of a blind second annotation: docs/judges.md).

The split is by request (both answers to one request fall on the same side), a hash of the
source row: `held_out` (a third) is scored once per judge version for the precision and recall
of "unsafe" at the shipped threshold; `train` fits the harmlessness judge and chooses its threshold.

`evaluator/data/safety_requests.jsonl` holds requests labelled without an answer, for the request
head only: `{"id", "source", "request", "request_harmful"}`, with `subset` and `row` for real ones.
`source` "hh": more first turns of the judges' train and dev rows, split like the set's requests
(they help choose the cut, and their held-out third is measured). `source` "written":
interpersonal requests written for this project on both sides of the line (handling a coworker who
takes credit, and getting that coworker fired with a lie), because HH's first turns hold few such
dilemmas and the request head refused them; they are fit only, never used to set a cut or measure.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from pathlib import Path

from evaluator.shipped import DATA_DIR, read_jsonl

SAFETY_SET = DATA_DIR / "safety_set.jsonl"
SAFETY_REQUESTS = DATA_DIR / "safety_requests.jsonl"
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


@dataclass(frozen=True)
class LabelledRequest:
    id: str
    source: str  # "hh" (real, with subset and row) or "written" (fit only)
    request: str
    request_harmful: bool
    subset: str | None = None
    row: int | None = None

    @property
    def split(self) -> str:
        """The set's split for a real request; "fit" for a written one (trained on, never measured)."""
        return split_of(self.subset, self.row) if self.subset is not None and self.row is not None else "fit"


def load_safety_requests(path: str | Path = SAFETY_REQUESTS) -> list[LabelledRequest]:
    """The requests labelled without an answer (none when the file is absent)."""
    if not Path(path).is_file():
        return []
    items = []
    for n, obj in enumerate(read_jsonl(path), start=1):
        if not isinstance(obj.get("request_harmful"), bool) or not str(obj.get("request", "")).strip():
            raise ValueError(f"{path} line {n} ({obj.get('id')}): needs a request and request_harmful true or "
                             "false (docs/safety_conventions.md)")
        if obj.get("source") == "hh" and ("subset" not in obj or "row" not in obj):
            raise ValueError(f"{path} line {n} ({obj.get('id')}): a real request needs its subset and row")
        items.append(LabelledRequest(id=str(obj["id"]), source=str(obj["source"]), request=str(obj["request"]),
                                     request_harmful=obj["request_harmful"], subset=obj.get("subset"),
                                     row=int(obj["row"]) if obj.get("row") is not None else None))
    return items
