"""Write `evaluator/data/hh_sample.jsonl`: the HH-RLHF rows the release gate scores out of the box.

    python -m tools.data.make_hh_sample [--hh ../shared/data/hh-rlhf] [--per-subset 100]

Source: Anthropic's HH-RLHF test splits (MIT licence, Copyright 2022 Anthropic; the notice is
`evaluator/data/HH_SAMPLE_LICENSE.md`). Each output line is `{"subset", "row", "chosen", "rejected"}`:
the transcripts exactly as published, with the subset and the 0-based line number of the row in
that subset's `test.jsonl.gz`, so every pair can be traced back to its source.

Which rows: only rows 1000 and above of each subset (rows below 1000 are reserved for an
evaluation the project does not see), `--per-subset` of them per subset drawn with
`random.Random(SEED)`, kept in file order. Deterministic: the same input gives the same file.

Why 100 per subset (400 pairs), the computation: the gate's HH axis is the unweighted mean of
helpful (the three helpful subsets pooled, 300 pairs) and harmless (100 pairs). For a paired
comparison, only the pairs on which candidate and live disagree move the difference; with a
share d of discordant pairs, Var(Δhelpful) ≈ d/300, Var(Δharmless) ≈ d/100, so
Var(Δmean) = (d/300 + d/100)/4 = d/300. A candidate that flips a fifth of the pairs (d = 0.2, a
lot for a LoRA on advice) gives a 95 % half-width of 1.96·√(0.2/300) = 0.051, the size of the
axis's tolerance (0.05): a real drop of one tolerance is then seen, while an unchanged candidate
(d = 0) has an interval of exactly zero. 200 per subset would halve the variance but double the
slowest step of a gate run on a CPU (both sides are scored: 1,600 answers at 200 per subset).
"""

from __future__ import annotations

import argparse
import gzip
import json
import random
from pathlib import Path

from evaluator.hh_data import RESERVED_BELOW
from evaluator.shipped import write_jsonl

SUBSETS = ("harmless-base", "helpful-base", "helpful-online", "helpful-rejection-sampled")
SEED = 20240515
OUT = Path(__file__).resolve().parents[2] / "evaluator" / "data" / "hh_sample.jsonl"


def sample(hh_dir: Path, per_subset: int) -> list[dict]:
    rows = []
    for subset in SUBSETS:
        with gzip.open(hh_dir / subset / "test.jsonl.gz", "rt", encoding="utf-8") as f:
            lines = [line for line in f if line.strip()]
        pool = list(range(RESERVED_BELOW, len(lines)))
        keep = sorted(random.Random(f"{SEED}:{subset}").sample(pool, min(per_subset, len(pool))))
        for i in keep:
            obj = json.loads(lines[i])
            rows.append({"subset": subset, "row": i, "chosen": obj["chosen"], "rejected": obj["rejected"]})
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hh", type=Path, default=Path(__file__).resolve().parents[2].parent / "shared/data/hh-rlhf")
    parser.add_argument("--per-subset", type=int, default=100)
    parser.add_argument("--out", type=Path, default=OUT)
    args = parser.parse_args()
    rows = sample(args.hh, args.per_subset)
    write_jsonl(rows, args.out)
    print(f"wrote {len(rows)} rows to {args.out}")


if __name__ == "__main__":
    main()
