"""The gate's HH axis on SmolLM2: its time and its pair outcomes at two batch settings.

    .venv/bin/python bench/gate_hh.py [--data-dir .cache/test] [--limit N] [--out bench/results/gate-hh.json]

The gate scores the shipped HH sample (400 pairs, 800 answers) once per side by mean
log-likelihood per answer token. This bench scores it on the base model with a LoRA adapter of
the trainer's shape on through PEFT, disabled for "live" and enabled for "candidate" (the gate
now merges each side's adapter into the weights, which costs less than this) under each setting:

- `fp32, 1 worker`: `BatchConfig(workers=1)`, float32, torch's own intra-op threads;
- `bf16, 1 worker`: the same under bfloat16 autocast;
- `this machine`: `BatchConfig.for_this_machine()`, bfloat16 autocast where the CPU computes it
  natively, one batch per core in threads sharing torch's threads (one each) (what `advisor eval hh` uses).

The adapter's B matrices are seeded noise (a fresh LoRA adds nothing), small enough that the
candidate stays close to the base model, as a short training run leaves it. Reported: the machine,
each setting's seconds per side, its ratio to float32's, each side's HH accuracy, how many pairs'
outcomes (chosen strictly above rejected) differ from float32's, and the candidate − live difference
the gate's axis reads under each. Not a pass/fail test; run it on a quiet machine.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from _machine import cpu_model, emit  # noqa: E402


def load(model_dir: Path, seed: int):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32)
    config = LoraConfig(r=64, lora_alpha=64, target_modules="all-linear", task_type="CAUSAL_LM")
    model = get_peft_model(model, config)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if "lora_B" in name:
                p.copy_(torch.randn(p.shape, generator=gen) * 1e-3)
    return model.eval(), tokenizer


def score(model, tokenizer, subsets, batch, side: str) -> dict:
    from evaluator.hh import evaluate_hh_pairs
    from evaluator.scoring import LogLikelihoodScorer

    scorer = LogLikelihoodScorer(model, tokenizer, batch, mean=True)
    ctx = model.disable_adapter() if side == "live" else contextlib.nullcontext()
    t0, c0 = time.monotonic(), time.process_time()
    with ctx:
        report, outcomes, _ = evaluate_hh_pairs(subsets, scorer)
    return {"seconds": round(time.monotonic() - t0, 1), "cpu_s": round(time.process_time() - c0, 1),
            "accuracy": report.mean, "helpful": report.helpful, "harmless": report.harmless,
            "tokens": scorer.stats.tokens, "outcomes": outcomes}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--data-dir", type=Path, default=REPO / ".cache" / "test")
    ap.add_argument("--limit", type=int, default=None, help="first N rows of each subset (default: all 400 pairs)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    import torch

    from evaluator.hh_data import load_hh_sample
    from evaluator.logprobs import BatchConfig

    model, tokenizer = load(args.data_dir / "models" / "smollm2-135m-instruct", args.seed)
    subsets = load_hh_sample(limit=args.limit)
    settings = {"fp32, 1 worker": BatchConfig(workers=1), "bf16, 1 worker": BatchConfig(workers=1, bf16=True),
                "this machine": BatchConfig.for_this_machine()}
    runs: dict[str, dict] = {}
    for name, batch in settings.items():
        for side in ("live", "candidate"):
            runs[f"{name} / {side}"] = score(model, tokenizer, subsets, batch, side)
            print(name, side, runs[f"{name} / {side}"]["seconds"], "s", file=sys.stderr)
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": cpu_model(), "cores": os.cpu_count(),
              "torch": torch.__version__, "threads": torch.get_num_threads(), "load_avg": os.getloadavg(),
              "pairs": sum(len(s.pairs) for s in subsets.values()),
              "settings": {k: {"bf16": b.bf16, "workers": b.workers} for k, b in settings.items()}}
    for name in settings:
        row = report.setdefault("results", {}).setdefault(name, {})
        for side in ("live", "candidate"):
            base, run = runs[f"fp32, 1 worker / {side}"], runs[f"{name} / {side}"]
            row[side] = {"seconds": run["seconds"], "cpu_s": run["cpu_s"],
                         "ratio_to_fp32": round(run["seconds"] / base["seconds"], 3), "accuracy": run["accuracy"],
                         "outcomes_differ_from_fp32": sum(x != y for x, y in zip(base["outcomes"], run["outcomes"]))}
        cand, live = runs[f"{name} / candidate"]["outcomes"], runs[f"{name} / live"]["outcomes"]
        row["pairs_where_sides_differ"] = sum(x != y for x, y in zip(cand, live))
    emit(report, args.out)


if __name__ == "__main__":
    main()
