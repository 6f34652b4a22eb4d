"""How the gate's batch size changes the time it takes to answer: greedy answers to the gate's
advice requests (as plain user turns) on SmolLM2 with a LoRA adapter active, as the gate generates
the candidate's.

    .venv/bin/python bench/generation_batch.py --adapter DIR [--prompts 48] [--sizes 8 16 32] [--repeats 3]

Each repeat times every batch size on the same prompts in turn (so a slow minute of the machine
falls on all of them alike); printed per size: the median seconds per answer over the repeats,
its ratio to the first size's in the same repeat (median and range), and whether the answers are
the text the first size gave (greedy decoding with left padding: they should be, near ties aside).
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
    ap.add_argument("--prompts", type=int, default=48)
    ap.add_argument("--sizes", type=int, nargs="+", default=[8, 16, 32])
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
    model = PeftModel.from_pretrained(AutoModelForCausalLM.from_pretrained(args.model_dir), args.adapter)
    prompts = load_advice_prompts()[: args.prompts]
    seconds: dict[int, list[float]] = {b: [] for b in args.sizes}
    answers: dict[int, list[str]] = {}
    for _ in range(args.repeats):
        for b in args.sizes:
            answer = hf_answer_fn(model, tokenizer, max_new_tokens=args.max_new_tokens, batch_size=b)
            t0 = time.perf_counter()
            answers[b] = answer(prompts)
            seconds[b].append((time.perf_counter() - t0) / len(prompts))
    first = args.sizes[0]
    report = {"machine": cpu_model(), "threads": torch.get_num_threads(), "prompts": len(prompts),
              "max_new_tokens": args.max_new_tokens, "repeats": args.repeats, "sizes": {}}
    for b in args.sizes:
        ratios = [s / f for s, f in zip(seconds[b], seconds[first])]
        report["sizes"][str(b)] = {
            "s_per_answer_median": round(statistics.median(seconds[b]), 3),
            "ratio_to_first_median": round(statistics.median(ratios), 3),
            "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
            "same_answers_as_first": sum(a == f for a, f in zip(answers[b], answers[first])),
        }
    emit(report, args.out)


if __name__ == "__main__":
    main()
