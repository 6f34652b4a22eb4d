"""What drawing a token costs: `transformers`' own sampler against `evaluator.sampling`'s, on
SmolLM2 in the gate's weights (bfloat16 where native), at the service's temperature and top-p.

    .venv/bin/python bench/sampling.py [--sizes 1 32] [--prompts 32] [--repeats 3] [--out FILE]

Two parts, one run:
- per step, on the model's real next-token logits for the first `--prompts` risky prompts: each
  sampler's milliseconds to draw one token for every row (median of 30); whether the two keep
  as many tokens per row, the largest difference between their probabilities ranked (0 up to
  float rounding: the same distribution), and in how many rows they keep other, exactly tied,
  tokens at the top-p edge (the sort's choice in both);
- whole answers: the gate's risky prompts answered (64 new tokens, plain user turns) at each batch
  size by both samplers in turn within each repeat, seeded alike; per run the median seconds per
  answer, its ratio to the library's in the same repeat (median and range), the median
  milliseconds per answer token (a batch of one stops at its end-of-turn, so answers of other
  lengths take other times) and the mean answer length in words (equal distributions give
  lengths that differ only by chance).
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


def decodings(temperature: float, top_p: float) -> dict[str, dict]:
    from evaluator.sampling import generate_kwargs

    return {"library": {"do_sample": True, "temperature": temperature, "top_p": top_p},
            "nucleus": generate_kwargs(temperature, top_p)}


def answer(model, tokenizer, prompts: list[str], size: int, decoding: dict,
           max_new_tokens: int) -> tuple[list[str], int]:
    """(the answers, how many tokens they hold: the end-of-turn and padding not counted)."""
    import torch

    out, tokens = [], 0
    tokenizer.padding_side = "left"
    for i in range(0, len(prompts), size):
        texts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                               add_generation_prompt=True) for p in prompts[i: i + size]]
        enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
        with torch.inference_mode():
            ids = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=tokenizer.pad_token_id,
                                 **decoding)
        new = ids[:, enc["input_ids"].shape[1]:]
        tokens += int((new != tokenizer.pad_token_id).sum())
        out += tokenizer.batch_decode(new, skip_special_tokens=True)
    return out, tokens


def per_step(model, tokenizer, prompts: list[str], temperature: float, top_p: float) -> dict:
    """Milliseconds per draw of a token for every row, and the distributions' largest difference."""
    import torch
    from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

    from evaluator.sampling import TOP_K, NucleusSampler

    tokenizer.padding_side = "left"
    texts = [tokenizer.apply_chat_template([{"role": "user", "content": p}], tokenize=False,
                                           add_generation_prompt=True) for p in prompts]
    enc = tokenizer(texts, return_tensors="pt", padding=True, add_special_tokens=False)
    with torch.inference_mode():
        logits = model(**enc).logits[:, -1, :].float()
    warpers = LogitsProcessorList([TemperatureLogitsWarper(temperature), TopKLogitsWarper(TOP_K),
                                   TopPLogitsWarper(top_p)])
    ours = NucleusSampler(temperature, top_p)
    library = lambda: torch.multinomial(warpers(None, logits.clone()).softmax(-1), 1)
    nucleus = lambda: ours(None, logits).argmax(-1)

    def ms(fn) -> float:
        fn()
        times = []
        for _ in range(30):
            t0 = time.perf_counter()
            fn()
            times.append((time.perf_counter() - t0) * 1000)
        return round(statistics.median(times), 2)

    theirs, mine = warpers(None, logits.clone()).softmax(-1), ours.probabilities(logits)
    ranked = lambda p: p.sort(dim=-1, descending=True).values
    return {"rows": len(prompts), "library_ms": ms(library), "nucleus_ms": ms(nucleus),
            "tokens_kept_equal_rows": int(((theirs > 0).sum(-1) == (mine > 0).sum(-1)).sum()),
            "largest_difference_of_ranked_probabilities": (ranked(theirs) - ranked(mine)).abs().max().item(),
            "rows_keeping_other_exactly_tied_tokens": int(((theirs > 0) != (mine > 0)).any(-1).sum())}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, default=REPO / ".cache/test/models/smollm2-135m-instruct")
    ap.add_argument("--prompts", type=int, default=32)
    ap.add_argument("--sizes", type=int, nargs="+", default=[1, 32])
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    import torch

    from deploy.release.measure import weights_dtype
    from deploy.release.models import load_merged
    from deploy.settings import BackendSettings, Settings
    from evaluator.moderation import load_risky_prompts
    from evaluator.text import words

    torch.set_num_threads(2)
    dtype = weights_dtype(Settings())
    model, tokenizer = load_merged(args.model_dir, None, dtype)
    prompts = load_risky_prompts()[: args.prompts]
    b = BackendSettings()
    kinds = decodings(b.temperature, b.top_p)
    runs = [(kind, size) for size in args.sizes for kind in kinds]
    seconds: dict[tuple, list[float]] = {run: [] for run in runs}
    per_token: dict[tuple, list[float]] = {run: [] for run in runs}
    lengths: dict[tuple, list[int]] = {run: [] for run in runs}
    for repeat in range(args.repeats):
        for kind, size in runs:
            torch.manual_seed(repeat)
            t0 = time.perf_counter()
            texts, n = answer(model, tokenizer, prompts, size, kinds[kind], args.max_new_tokens)
            seconds[kind, size].append((time.perf_counter() - t0) / len(prompts))
            per_token[kind, size].append(seconds[kind, size][-1] * len(prompts) / n)
            lengths[kind, size] += [words(t) for t in texts]
    report = {"machine": cpu_model(), "threads": torch.get_num_threads(), "weights": dtype,
              "temperature": b.temperature, "top_p": b.top_p, "prompts": len(prompts),
              "max_new_tokens": args.max_new_tokens, "repeats": args.repeats,
              "per_step": per_step(model, tokenizer, prompts, b.temperature, b.top_p), "runs": {}}
    for kind, size in runs:
        ratios = [s / lib for s, lib in zip(seconds[kind, size], seconds["library", size])]
        report["runs"][f"{kind} batch {size}"] = {
            "s_per_answer_median": round(statistics.median(seconds[kind, size]), 3),
            "ratio_to_library_median": round(statistics.median(ratios), 3),
            "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
            "ms_per_answer_token_median": round(1000 * statistics.median(per_token[kind, size]), 1),
            "mean_words": round(statistics.fmean(lengths[kind, size]), 1),
        }
    emit(report, args.out)


if __name__ == "__main__":
    main()
