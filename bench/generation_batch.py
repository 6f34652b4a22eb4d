"""How the gate's generation time depends on the batch size and on how a LoRA adapter is applied:
greedy answers to the gate's advice requests (as plain user turns) on SmolLM2, as the gate
generates a side's.

    .venv/bin/python bench/generation_batch.py --adapter DIR [--models peft merged base] [--sizes 8 16 32]
        [--dtypes float32 bfloat16] [--sampled]

Models: `peft`, the base with the adapter on through PEFT (every targeted linear layer adds its
low-rank product at each step); `merged`, the same adapter merged into a copy of the base
(`merge_and_unload`, what the gate answers with); `base`, the bare base. `--dtypes` casts each
model's weights (`gate.dtype`); `--sampled` draws as the service samples (seeded alike for every
run of a repeat) instead of greedily. Each repeat times every (model, dtype, batch size) on the
same prompts in turn (so a slow minute of the machine falls on all of them alike); printed per
run: the median seconds per answer and per batch (how long one batch holds the cores) over the
repeats, its ratio to the first run's in the same repeat (median and range), and how many
answers are the first run's text (greedy decoding with left padding should give the same;
merging or bfloat16 changes the float rounding, so a near tie may go the other way).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "bench"))

from _machine import cpu_model, emit  # noqa: E402

MODELS = ("peft", "merged", "base")


def load(name: str, dtype: str, model_dir: Path, adapter: Path):
    """The model `name` describes in `dtype`, loaded by the gate's own loaders."""
    import torch

    from deploy.release.models import load_causal_lm, load_merged

    if name == "peft":
        return load_causal_lm(model_dir, {"peft": adapter})[0].to(getattr(torch, dtype))
    return load_merged(model_dir, adapter if name == "merged" else None, dtype)[0]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, default=REPO / ".cache/test/models/smollm2-135m-instruct")
    ap.add_argument("--adapter", type=Path, required=True, help="a LoRA adapter directory (a training run's)")
    ap.add_argument("--models", nargs="+", choices=MODELS, default=["peft"])
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32])
    ap.add_argument("--dtypes", nargs="+", choices=["float32", "bfloat16"], default=["float32"])
    ap.add_argument("--sampled", action="store_true", help="sample as the service does (gate's risky draws)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    import torch
    from transformers import AutoTokenizer

    from deploy.settings import BackendSettings
    from evaluator.generation import hf_answer_fn
    from evaluator.shipped import load_advice_prompts

    torch.set_num_threads(2)
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)
    models = {(name, dtype): load(name, dtype, args.model_dir, args.adapter)
              for name in args.models for dtype in args.dtypes}
    prompts = load_advice_prompts()[: args.prompts]
    b = BackendSettings()
    sampling = {"temperature": b.temperature, "top_p": b.top_p} if args.sampled else None
    runs = [(name, dtype, size) for (name, dtype) in models for size in args.sizes]
    seconds: dict[tuple, list[float]] = {run: [] for run in runs}
    answers: dict[tuple, list[str]] = {}
    for repeat in range(args.repeats):
        for name, dtype, size in runs:
            answer = hf_answer_fn(models[name, dtype], tokenizer, max_new_tokens=args.max_new_tokens,
                                  batch_size=size, sampling=sampling)
            torch.manual_seed(repeat)
            t0 = time.perf_counter()
            answers[name, dtype, size] = answer(prompts)
            seconds[name, dtype, size].append((time.perf_counter() - t0) / len(prompts))
    first = runs[0]
    report = {"machine": cpu_model(), "threads": torch.get_num_threads(), "adapter": str(args.adapter),
              "prompts": len(prompts), "max_new_tokens": args.max_new_tokens, "repeats": args.repeats,
              "decoding": sampling or "greedy", "runs": {}}
    for run in runs:
        ratios = [s / f for s, f in zip(seconds[run], seconds[first])]
        median = statistics.median(seconds[run])
        report["runs"][" ".join(map(str, run))] = {
            "s_per_answer_median": round(median, 3),
            "s_per_batch_median": round(median * run[2], 2),
            "ratio_to_first_median": round(statistics.median(ratios), 3),
            "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
            "same_answers_as_first": sum(a == f for a, f in zip(answers[run], answers[first])),
        }
    emit(report, args.out)


if __name__ == "__main__":
    main()
