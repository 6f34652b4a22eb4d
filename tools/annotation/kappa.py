"""Agreement of two annotations of the same conversations: Cohen's kappa per category, a user turn as
the unit, and span matches under the extraction metric's rule.

    python tools/annotation/kappa.py [FIRST SECOND]    (default: the records of the double annotation)
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORDS = Path(__file__).resolve().parent / "records"
CATS = ["repeat_rephrase", "aware_with_correction", "aware_without_correction", "ask_clarification", "positive"]


def load(path):
    return {r["id"]: r for r in map(json.loads, open(path))}


def kappa(a, b):
    n = len(a)
    po = sum(x == y for x, y in zip(a, b)) / n
    pa, pb = sum(a) / n, sum(b) / n
    pe = pa * pb + (1 - pa) * (1 - pb)
    return (po - pe) / (1 - pe) if pe < 1 else 1.0


def span_ok(p, g):
    p, g = p.strip(), g.strip()
    return p in g and 2 * len(p) >= len(g)


def main(first_path=RECORDS / "first_annotator.jsonl", second_path=RECORDS / "second_annotator.jsonl"):
    gold = load(ROOT / "feedback" / "data" / "hh_gold.jsonl")
    first, second = load(first_path), load(second_path)
    units = [(cid, i) for cid in first for i, m in enumerate(gold[cid]["messages"]) if m["role"] == "user"]
    units = [u for u in units if u[1] != next(i for i, m in enumerate(gold[u[0]]["messages"]) if m["role"] == "user")]

    def labels(ann, cid, i):
        return {f["category"] for f in ann[cid]["feedback"] if f["message"] == i}

    print(f"{len(first)} conversations, {len(units)} user turns after the first")
    for cat in [*CATS, None]:
        a = [(cat in labels(first, *u)) if cat else bool(labels(first, *u)) for u in units]
        b = [(cat in labels(second, *u)) if cat else bool(labels(second, *u)) for u in units]
        print(f"{cat or 'any feedback':26s} kappa {kappa(a, b):.3f}  first {sum(a):3d}  second {sum(b):3d}")
    matched = sum(any(p["message"] == g["message"] and (span_ok(p["span"], g["span"]) or span_ok(g["span"], p["span"]))
                      for g in second[c]["feedback"]) for c in first for p in first[c]["feedback"])
    print(f"spans: first {sum(len(r['feedback']) for r in first.values())}, second "
          f"{sum(len(r['feedback']) for r in second.values())}; first spans matched by second: {matched}")


if __name__ == "__main__":
    main(*sys.argv[1:3])
