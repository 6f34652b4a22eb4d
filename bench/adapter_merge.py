"""What a LoRA adapter applied at every layer costs the gate's generation, against the same adapter
merged into the weights: greedy answers to the gate's advice requests on SmolLM2, as the gate
generates a side's.

    .venv/bin/python bench/adapter_merge.py --adapter DIR [--prompts 32] [--batch-size 16] [--repeats 3]

Three models answer the same prompts in turn within each repeat (so a slow minute of the machine
falls on all of them alike): the base with the adapter on through PEFT (every targeted linear layer
adds its low-rank product at each step), the same adapter merged into a copy of the base
(`merge_and_unload`: one matrix per layer, as a plain model), and the bare base. Printed per model:
the median seconds per answer, its ratio to the PEFT model's in the same repeat (median and
range), and how many answers are the PEFT model's text (merging changes the float rounding, so a
near tie in greedy decoding may go the other way).
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


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, default=REPO / ".cache/test/models/smollm2-135m-instruct")
    ap.add_argument("--adapter", type=Path, required=True, help="a LoRA adapter directory (a training run's)")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    import torch
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evaluator.generation import hf_answer_fn
    from evaluator.shipped import load_advice_prompts

    torch.set_num_threads(2)
    tokenizer = AutoTokenizer.from_pretrained(args.model_dir)

    def base():
        return AutoModelForCausalLM.from_pretrained(args.model_dir)

    models = {"peft": PeftModel.from_pretrained(base(), args.adapter).eval(),
              "merged": PeftModel.from_pretrained(base(), args.adapter).merge_and_unload().eval(),
              "base": base().eval()}
    prompts = load_advice_prompts()[: args.prompts]
    seconds: dict[str, list[float]] = {name: [] for name in models}
    answers: dict[str, list[str]] = {}
    for _ in range(args.repeats):
        for name, model in models.items():
            answer = hf_answer_fn(model, tokenizer, max_new_tokens=args.max_new_tokens, batch_size=args.batch_size)
            t0 = time.perf_counter()
            answers[name] = answer(prompts)
            seconds[name].append((time.perf_counter() - t0) / len(prompts))
    report = {"machine": cpu_model(), "threads": torch.get_num_threads(), "adapter": str(args.adapter),
              "prompts": len(prompts), "batch_size": args.batch_size, "max_new_tokens": args.max_new_tokens,
              "repeats": args.repeats, "models": {}}
    for name in models:
        ratios = [s / p for s, p in zip(seconds[name], seconds["peft"])]
        report["models"][name] = {
            "s_per_answer_median": round(statistics.median(seconds[name]), 3),
            "ratio_to_peft_median": round(statistics.median(ratios), 3),
            "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
            "same_answers_as_peft": sum(a == p for a, p in zip(answers[name], answers["peft"])),
        }
    emit(report, args.out)


if __name__ == "__main__":
    main()
