"""The PII test set and how a detector is scored on it (bench/pii.py and tests/feedback/test_pii.py).

`feedback/data/pii_testset.jsonl` (generator and conventions: tools/data/make_pii_testset.py):
one item per line, `{"id", "split", "kind", "text", "spans": [{"type", "start", "end", "value"}]}`,
kind `template` | `hand` | `control` (controls plant nothing).

Scoring: a detected span counts for a planted span when they overlap and have the same type
(type-agnostic figures drop the type condition). Overlap rather than exact offsets, because where
a span ends is convention ("Mr." in or out of a name, the postcode in or out of an address) while
whether the value was caught is the question; the exact coverage is reported next to it (the
share of planted characters that were replaced), so a detector that catches "Leeds" out of a
whole street address is not mistaken for one that removed the address.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

TESTSET = Path(__file__).resolve().parent / "data" / "pii_testset.jsonl"
STRUCTURED = ("EMAIL", "PHONE", "CARD", "IBAN", "URL", "IP", "NATIONAL_ID")


def load(split: str | None = None, path: Path = TESTSET) -> list[dict]:
    items = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return [i for i in items if split in (None, "all", i["split"])]


def _overlaps(a_start: int, a_end: int, b_start: int, b_end: int) -> bool:
    return a_start < b_end and b_start < a_end


def score(items: list[dict], detected: list[list[tuple[str, int, int]]]) -> dict:
    """Per-type and type-agnostic precision/recall, character coverage, false positives on controls."""
    planted, found, det, correct = Counter(), Counter(), Counter(), Counter()
    chars, covered = Counter(), Counter()
    any_planted = any_found = any_det = any_correct = 0
    control_hits, fp_examples = 0, []
    for item, spans in zip(items, detected):
        gold = item["spans"]
        for g in gold:
            planted[g["type"]] += 1
            any_planted += 1
            same = [d for d in spans if d[0] == g["type"] and _overlaps(d[1], d[2], g["start"], g["end"])]
            found[g["type"]] += bool(same)
            any_found += any(_overlaps(d[1], d[2], g["start"], g["end"]) for d in spans)
            chars[g["type"]] += g["end"] - g["start"]
            covered[g["type"]] += sum(1 for c in range(g["start"], g["end"]) if any(s <= c < e for _, s, e in same))
        for t, s, e in spans:
            det[t] += 1
            any_det += 1
            correct[t] += any(g["type"] == t and _overlaps(s, e, g["start"], g["end"]) for g in gold)
            hit = any(_overlaps(s, e, g["start"], g["end"]) for g in gold)
            any_correct += hit
            if not hit:
                fp_examples.append({"id": item["id"], "type": t, "value": item["text"][s:e]})
        control_hits += item["kind"] == "control" and bool(spans)
    types = sorted(set(planted) | set(det))
    per_type = {t: {"planted": planted[t], "detected": det[t],
                    "recall": _ratio(found[t], planted[t]), "precision": _ratio(correct[t], det[t]),
                    "char_coverage": _ratio(covered[t], chars[t])} for t in types}
    n_controls = sum(1 for i in items if i["kind"] == "control")
    return {"items": len(items), "per_type": per_type,
            "any_type": {"planted": any_planted, "detected": any_det, "recall": _ratio(any_found, any_planted),
                         "precision": _ratio(any_correct, any_det)},
            "controls": {"n": n_controls, "with_detection": control_hits},
            "false_positives": fp_examples}


def _ratio(a: int, b: int) -> float | None:
    return round(a / b, 3) if b else None
