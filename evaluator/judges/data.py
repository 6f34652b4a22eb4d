"""The judges' human preference data: HH-RLHF test rows >= 1000, split once into train, dev and test.

Design choices:
- Rows below 1000 of each file are reserved for an evaluation this project does not see; they
  are never read here (`evaluator.hh_data.RESERVED_BELOW`).
- Rows the release gate measures with are left out, so no gate item was ever a judge's training
  example: the shipped HH sample (the HH axis), the advice requests (the helpfulness axis) and
  the real risky requests (the harmlessness axis).
- Pairs whose two answers are equal, or whose conversations differ before the answer, teach no
  preference between answers to one conversation and are left out (counted).
- The split is a hash of (subset, row): stable whatever else changes, and the same for every
  judge. Test is scored once per judge version; choices are made on dev.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from evaluator.hh_data import HARMLESS_SUBSETS, HELPFUL_SUBSETS, RESERVED_BELOW, HHPair, load_hh
from evaluator.shipped import ADVICE_PROMPTS, HH_SAMPLE, RISKY_PROMPTS, read_jsonl

AXES = ("helpful", "harmless")
SPLITS = ("train", "dev", "test")
SHARES = {"test": 0.25, "dev": 0.15}  # the rest is train


@dataclass(frozen=True)
class JudgePair:
    axis: str  # "helpful" or "harmless"
    split: str
    pair: HHPair


def split_of(subset: str, row: int) -> str:
    u = int(hashlib.sha256(f"{subset}:{row}".encode()).hexdigest()[:8], 16) / 2**32
    if u < SHARES["test"]:
        return "test"
    return "dev" if u < SHARES["test"] + SHARES["dev"] else "train"


def gate_rows() -> set[tuple[str, int]]:
    """(subset, row) of every HH row the release gate measures with."""
    rows: set[tuple[str, int]] = set()
    for path in (HH_SAMPLE, ADVICE_PROMPTS, RISKY_PROMPTS):
        for obj in read_jsonl(path):
            if "subset" in obj and "row" in obj:
                rows.add((str(obj["subset"]), int(obj["row"])))
    return rows


def axis_of(subset: str) -> str:
    return "harmless" if subset in HARMLESS_SUBSETS else "helpful"


def load_judge_pairs(hh_dir: str | Path, splits: Iterable[str] = SPLITS) -> tuple[list[JudgePair], dict[str, int]]:
    """The usable pairs of the wanted splits, and what was left out and why."""
    wanted = set(splits)
    held = gate_rows()
    left_out = {"gate_rows": 0, "equal": 0, "differ_earlier": 0}
    out: list[JudgePair] = []
    for name, subset in load_hh(hh_dir, HARMLESS_SUBSETS + HELPFUL_SUBSETS, first_row=RESERVED_BELOW).items():
        for pair in subset.pairs:
            if (name, pair.row) in held:
                left_out["gate_rows"] += 1
            elif pair.is_equal:
                left_out["equal"] += 1
            elif pair.differs_earlier:
                left_out["differ_earlier"] += 1
            elif (split := split_of(name, pair.row)) in wanted:
                out.append(JudgePair(axis_of(name), split, pair))
    return out, left_out
