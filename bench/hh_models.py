"""HH-RLHF preference accuracy per subset, for each model given, scored as the release gate scores it.

    .venv/bin/python bench/hh_models.py NAME=DIR [NAME=DIR ...] [--sample | --hh ../shared/data/hh-rlhf
        --per-subset 250] [--out bench/results/hh_models.json]

A pair is correct when the model gives the chosen answer a higher mean log-likelihood per answer
token than the rejected one (`evaluator.scoring.LogLikelihoodScorer(mean=True)`, the gate's HH
score: defined for any model, and an answer's length does not decide). Data: by default the sample
shipped in the package (`evaluator/data/hh_sample.jsonl`, 100 pairs per subset, what every gate
run scores); with `--hh`, `--per-subset` seeded pairs per subset of the test splits, rows 1000 and
above only (rows below are reserved for an evaluation this project does not see:
`evaluator.hh_data.RESERVED_BELOW`). Reported per subset and for helpful (the three helpful
subsets pooled), harmless and their unweighted mean (Bai et al.), each with a 95 % bootstrap interval over pairs (2,000
resamples, seeded; the mean's interval resamples within each subset), the pairs scored, the
truncated ones, the wall time and the machine. Run it alone: torch on two cores shares badly.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.append(str(Path(__file__).resolve().parent))  # after the repo: bench/store.py must not shadow the store package

import numpy as np  # noqa: E402
from _machine import cpu_model, emit  # noqa: E402

HELPFUL = ("helpful-base", "helpful-online", "helpful-rejection-sampled")


def interval(values: list[float], groups: list[str] | None = None, n_boot: int = 2000) -> list[float]:
    """95 % percentile bootstrap of the mean (of the per-group means when `groups` is given)."""
    rng = np.random.default_rng(0)
    x = np.asarray(values, dtype=float)
    if groups is None:
        boots = x[rng.integers(0, len(x), size=(n_boot, len(x)))].mean(axis=1)
    else:
        g = np.asarray(groups)
        parts = []
        for name in dict.fromkeys(groups):
            xs = x[g == name]
            parts.append(xs[rng.integers(0, len(xs), size=(n_boot, len(xs)))].mean(axis=1))
        boots = np.mean(parts, axis=0)
    return [round(float(np.percentile(boots, 2.5)), 3), round(float(np.percentile(boots, 97.5)), 3)]


def score_model(model_dir: str, subsets: dict) -> dict:
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evaluator.hh import evaluate_hh_pairs
    from evaluator.logprobs import BatchConfig
    from evaluator.scoring import LogLikelihoodScorer

    started = time.time()
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir).eval()
    scorer = LogLikelihoodScorer(model, tokenizer, BatchConfig(workers=1), mean=True)
    report, outcomes, groups = evaluate_hh_pairs(subsets, scorer)
    ok = [1.0 if o else 0.0 for o in outcomes]
    names = [p.subset for s in subsets.values() for p in s.pairs]
    out = {name: {"accuracy": round(r.accuracy, 3), "ci95": interval([v for v, n in zip(ok, names) if n == name]),
                  "pairs": r.pairs, "ties": r.ties} for name, r in report.subsets.items()}
    helpful = [v for v, n in zip(ok, names) if n in HELPFUL]
    harmless = [v for v, n in zip(ok, names) if n not in HELPFUL]
    out["helpful"] = {"accuracy": round(report.helpful, 3), "ci95": interval(helpful), "pairs": len(helpful)}
    out["harmless"] = {"accuracy": round(report.harmless, 3), "ci95": interval(harmless), "pairs": len(harmless)}
    out["mean"] = {"accuracy": round(report.mean, 3), "ci95": interval(ok, groups), "pairs": len(ok)}
    out["truncated"] = scorer.stats.truncated
    out["wall_s"] = round(time.time() - started, 1)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("models", nargs="+", help="NAME=DIR, one per model")
    ap.add_argument("--hh", type=Path, default=None, help="hh-rlhf directory (default: the shipped sample)")
    ap.add_argument("--per-subset", type=int, default=250, help="pairs per subset with --hh")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    from evaluator.hh_data import RESERVED_BELOW, load_hh, load_hh_sample

    subsets = (load_hh(args.hh, limit=args.per_subset, seed=0, first_row=RESERVED_BELOW) if args.hh
               else load_hh_sample())
    report = {"machine": cpu_model(), "data": str(args.hh) if args.hh else "evaluator/data/hh_sample.jsonl",
              "scorer": "mean log-likelihood per answer token", "models": {}}
    for spec in args.models:
        name, _, model_dir = spec.partition("=")
        print(f"{name}: scoring {sum(len(s.pairs) for s in subsets.values())} pairs", flush=True)
        report["models"][name] = {"dir": model_dir, **score_model(model_dir, subsets)}
    emit(report, args.out)


if __name__ == "__main__":
    main()
