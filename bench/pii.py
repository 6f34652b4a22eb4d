"""Benchmark PII redaction on feedback/data/pii_testset.jsonl.

    .venv/bin/python bench/pii.py [--ner spacy|blank|both] [--split all|dev|test] [--repeat 3]
                                  [--out test-output/pii_bench.json]

Per NLP engine choice: load time (a fresh Redactor, imports included the first time: run one
--ner per process for a cold figure), throughput
of `redact_many` over the whole set (texts/s, best of --repeat, one process, whatever threads
spaCy uses), per-type precision / recall / character coverage, type-agnostic figures, and which
controls got a detection. Scoring rules: feedback.pii_testset. Prints a table, writes JSON.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from feedback import pii_testset  # noqa: E402
from feedback.pii import Redactor  # noqa: E402


def run(ner: str, split: str, repeat: int) -> dict:
    # Presidio's import pulls in transformers and torch when they are installed (its nlp_engine
    # package imports its transformers engine): timed apart from building the Redactor.
    t0 = time.perf_counter()
    import feedback._pii_engine  # noqa: F401
    import_s = time.perf_counter() - t0
    t0 = time.perf_counter()
    redactor = Redactor(ner=ner)
    load_s = time.perf_counter() - t0
    items = pii_testset.load(split)
    texts = [i["text"] for i in items]
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        results = redactor.redact_many(texts)
        best = min(best, time.perf_counter() - t0)
    report = pii_testset.score(items, [r.spans for r in results])
    return {"ner": ner, "split": split, "import_s": round(import_s, 2), "load_s": round(load_s, 2), "texts_per_s": round(len(texts) / best, 1),
            "cores": os.cpu_count(), "load_average": round(os.getloadavg()[0], 2),
            "mean_chars": round(sum(map(len, texts)) / len(texts)), **report}


def table(r: dict) -> str:
    f = lambda x: "  -  " if x is None else f"{x:.3f}"
    lines = [f"ner={r['ner']} split={r['split']} items={r['items']} import={r['import_s']}s build={r['load_s']}s "
             f"throughput={r['texts_per_s']} texts/s (mean {r['mean_chars']} chars; {r['cores']} cores, "
             f"load average {r['load_average']})",
             f"{'type':<14}{'planted':>8}{'found':>7}{'recall':>8}{'precision':>10}{'chars':>8}"]
    for t, m in r["per_type"].items():
        lines.append(f"{t:<14}{m['planted']:>8}{m['detected']:>7}{f(m['recall']):>8}{f(m['precision']):>10}"
                     f"{f(m['char_coverage']):>8}")
    a = r["any_type"]
    lines.append(f"{'(any type)':<14}{a['planted']:>8}{a['detected']:>7}{f(a['recall']):>8}{f(a['precision']):>10}")
    c = r["controls"]
    lines.append(f"controls with a detection: {c['with_detection']}/{c['n']}")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--ner", choices=("spacy", "blank", "both"), default="both")
    ap.add_argument("--split", choices=("all", "dev", "test"), default="all")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--out", type=Path, default=REPO / "test-output" / "pii_bench.json")
    ap.add_argument("--show-fp", action="store_true", help="list every detection that overlaps nothing planted")
    args = ap.parse_args()
    reports = [run(n, args.split, args.repeat) for n in (("spacy", "blank") if args.ner == "both" else (args.ner,))]
    for r in reports:
        print(table(r), end="\n\n")
        if args.show_fp:
            for fp in r["false_positives"]:
                print(f"  FP {fp['id']} {fp['type']}: {fp['value']!r}")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(reports, indent=2, ensure_ascii=False) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
