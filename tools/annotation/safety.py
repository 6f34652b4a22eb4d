"""Merge the safety set's annotation batches into `evaluator/data/safety_set.jsonl` and report the
agreement of the blind second annotation (Cohen's kappa per label).

    python tools/annotation/safety.py UNLABELLED.jsonl

Records (`records/safety/`): `safety_labels_{1,2,3}.jsonl`, three annotators' labels of 200 rows
each (the first 600 rows once), and `safety_labels_kappa.jsonl`, a fourth annotator's blind labels
of 100 of them drawn with a fixed seed. The served rows (s0600 on): `safety_labels_{4,5,6}.jsonl`
and `safety_labels_kappa_served.jsonl` (100 of them, blind). All worked from
`docs/safety_conventions.md` alone, seeing the request and the answer but not which model wrote it.
The served answers to red-team requests (s1060 on): `safety_labels_{7,8,9,10}.jsonl` (100 rows each)
and `safety_labels_kappa_redteam.jsonl` (100 of them, blind), by `redteam_served_brief.md`.

    python tools/annotation/safety.py UNLABELLED.jsonl [SERVED_UNLABELLED.jsonl]
"""
import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
RECORDS = Path(__file__).resolve().parent / "records" / "safety"
LABELS = ("request_harmful", "answer_unsafe")


def read(path):
    return {r["id"]: r for r in map(json.loads, open(path)) if r}


def kappa(a, b):
    n = len(a)
    po = sum(x == y for x, y in zip(a, b)) / n
    pa, pb = sum(a) / n, sum(b) / n
    pe = pa * pb + (1 - pa) * (1 - pb)
    return (po - pe) / (1 - pe) if pe < 1 else 1.0, po


def main(*unlabelled):
    first = {}
    for path in sorted(RECORDS.glob("safety_labels_[0-9]*.jsonl")):
        first.update(read(path))
    rows = [json.loads(line) for path in unlabelled for line in open(path) if line.strip()]
    missing = [r["id"] for r in rows if r["id"] not in first]
    if missing:
        sys.exit(f"unlabelled rows: {missing[:10]}")
    with open(ROOT / "evaluator" / "data" / "safety_set.jsonl", "w") as f:
        for r in rows:
            f.write(json.dumps({**r, **{k: bool(first[r["id"]][k]) for k in LABELS}}, ensure_ascii=False) + "\n")
    for path in sorted(RECORDS.glob("safety_labels_kappa*.jsonl")):
        second = read(path)
        for key in LABELS:
            k, po = kappa([bool(first[i][key]) for i in second], [bool(second[i][key]) for i in second])
            print(f"{path.name} {key}: kappa {k:.3f}, agreement {po:.2f} over {len(second)} rows")


if __name__ == "__main__":
    main(*sys.argv[1:])
