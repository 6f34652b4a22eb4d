"""HH-RLHF preference-accuracy throughput: pairs/s and the time for all 8,552 test pairs.

    .venv/bin/python bench/eval.py --data ../shared/data/hh-rlhf [--model DIR] [--limit 40]
        [--repeats 3] [--threads 1] [--workers 2] [--scorer loglik|implicit] [--bf16] [--full] [--json]

The model is `--model`, else the built-in model when it is built under `--data-dir`, else a
randomly initialised model of the built-in recipe's shape and tokenizer (same size, same
tokens, same speed; its accuracy means nothing and is labelled so). `--scorer implicit` puts a
fresh LoRA adapter on it, so each pair costs a policy pass and a reference pass.

Reported, after the machine (CPU, cores, torch, threads, load average — other processes on a
shared box slow every figure down):
- the median over `--repeats` of pairs/s and tokens/s on a seeded sample of `--limit` rows per
  subset (the same rows every repeat);
- the full-run estimate: the exact token count of all 8,552 pairs (tokenized, not guessed)
  divided by the median tokens/s — HH rows vary in length, so tokens extrapolate better than
  pairs;
- tokens per CPU-second (process CPU time, all threads) and the full-run time it implies on an
  idle machine with `--workers` cores (CPU time is what other processes on a shared box distort
  least; with one torch thread per worker, as when workers equal cores, no spin-waiting inflates it);
- with `--full`, the measured time of the whole run, and its accuracies.
Nothing here is a pass/fail assertion.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _machine import cpu_model  # noqa: E402

from evaluator.hh import evaluate_hh  # noqa: E402
from evaluator.hh_data import load_hh  # noqa: E402
from evaluator.logprobs import BatchConfig, encode_rows  # noqa: E402
from evaluator.scoring import ImplicitRewardScorer, LogLikelihoodScorer  # noqa: E402


def machine() -> dict:
    import torch

    cpu = cpu_model()
    return {"cpu": cpu, "cores": os.cpu_count(), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "python": platform.python_version(), "load_avg_1m": round(os.getloadavg()[0], 2)}


def model_dir(args: argparse.Namespace) -> tuple[Path, str]:
    if args.model:
        return Path(args.model), "given"
    from chat.builtin.build import Recipe, builtin_model_path, is_built

    built = builtin_model_path(Path(args.data_dir))
    if is_built(built):
        return built, "built-in"
    # Same tokenizer recipe and shape as the built-in model, random weights: same cost per token.
    from chat.builtin.corpus import tokenizer_texts
    from chat.builtin.model import new_model
    from chat.builtin.tokenizer import train_tokenizer

    recipe = Recipe()
    out = Path(args.cache) / "builtin-shape-random"
    if not (out / "config.json").is_file():
        tok = train_tokenizer(tokenizer_texts(recipe.corpus_path), recipe.vocab_size,
                              model_max_length=recipe.shape.max_position_embeddings)
        model = new_model(recipe.shape, tok, seed=0)
        model.save_pretrained(out)
        tok.save_pretrained(out)
    return out, "built-in shape, random weights (accuracy meaningless)"


def make_scorer(path: Path, kind: str, batch: BatchConfig):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    tok = AutoTokenizer.from_pretrained(path)
    model = AutoModelForCausalLM.from_pretrained(path).eval()
    if kind == "implicit":
        from peft import LoraConfig, get_peft_model

        model = get_peft_model(model, LoraConfig(r=16, lora_alpha=32, target_modules="all-linear"))
        return ImplicitRewardScorer(model, tok, batch=batch), tok, model
    return LogLikelihoodScorer(model, tok, batch), tok, model


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", required=True, help="hh-rlhf directory (e.g. ../shared/data/hh-rlhf)")
    ap.add_argument("--model", help="model directory (default: built-in, else its shape with random weights)")
    ap.add_argument("--data-dir", default="./data", help="where the built-in model is cached")
    ap.add_argument("--cache", default=".cache/bench", help="where a random built-in-shape model is written")
    ap.add_argument("--limit", type=int, default=40, help="rows per subset in the timed sample")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=None, help="torch threads (default: torch's)")
    ap.add_argument("--workers", type=int, default=1, help="batches scored at once, sharing torch's threads")
    ap.add_argument("--max-tokens", type=int, default=4096, help="token budget per batch")
    ap.add_argument("--scorer", choices=("loglik", "implicit"), default="loglik")
    ap.add_argument("--max-length", type=int, default=1024)
    ap.add_argument("--bf16", action="store_true", help="bfloat16 autocast")
    ap.add_argument("--no-share", action="store_true", help="turn prompt sharing off (for comparison)")
    ap.add_argument("--full", action="store_true", help="also time all 8,552 pairs")
    ap.add_argument("--json", action="store_true", help="print one JSON object at the end")
    return ap.parse_args(argv)


def full_run_size(args: argparse.Namespace, tok, batch) -> tuple[dict, int, float]:
    """Every HH pair, the exact number of model tokens scoring them takes, and the tokenizing time."""
    everything = load_hh(args.data)
    all_pairs = [p for s in everything.values() for p in s.pairs]
    t0 = time.perf_counter()
    rows, _ = encode_rows(tok, [p.prompt for p in all_pairs] + [p.rejected_prompt or p.prompt for p in all_pairs],
                          [p.chosen for p in all_pairs] + [p.rejected for p in all_pairs], batch,
                          share=batch.share_prompts)
    encode_s = time.perf_counter() - t0
    passes = 2 if args.scorer == "implicit" else 1
    full_tokens = sum(r.length for r in rows) * passes
    print(f"full run: {len(all_pairs):,} pairs, {full_tokens:,} model tokens ({passes} pass(es)); "
          f"rendering + tokenizing took {encode_s:.1f} s", flush=True)
    return everything, full_tokens, encode_s


def timed_sample(args: argparse.Namespace, scorer) -> tuple[int, float, float, float]:
    """Score the seeded sample `repeats` times; (pairs, median pairs/s, tokens/s, tokens/CPU-s)."""
    sample = load_hh(args.data, limit=args.limit, seed=0)
    n = sum(len(s.pairs) for s in sample.values())
    pairs_s, tokens_s, tokens_cpu_s = [], [], []
    for r in range(args.repeats):
        scorer.stats.__init__()
        t0, c0 = time.perf_counter(), time.process_time()
        evaluate_hh(sample, scorer)
        dt, dc = time.perf_counter() - t0, time.process_time() - c0
        pairs_s.append(n / dt)
        tokens_s.append(scorer.stats.tokens / dt)
        tokens_cpu_s.append(scorer.stats.tokens / dc)
        print(f"repeat {r + 1}: {n} pairs in {dt:.1f} s = {n / dt:.2f} pairs/s, {scorer.stats.tokens / dt:,.0f} tokens/s, "
              f"{scorer.stats.tokens / dc:,.0f} tokens/CPU-s (padding {1 - scorer.stats.tokens / scorer.stats.padded_tokens:.1%})",
              flush=True)
    return n, statistics.median(pairs_s), statistics.median(tokens_s), statistics.median(tokens_cpu_s)


def full_run(everything: dict, scorer, cores: int) -> dict:
    """Score all 8,552 pairs once; accuracy per subset and the time it took."""
    n = sum(len(s.pairs) for s in everything.values())
    scorer.stats.__init__()
    t0, c0 = time.perf_counter(), time.process_time()
    report = evaluate_hh(everything, scorer)
    dt, dc = time.perf_counter() - t0, time.process_time() - c0
    print(f"full run measured: {n:,} pairs in {dt / 60:.1f} min ({n / dt:.2f} pairs/s), "
          f"{dc / 60:.1f} CPU-min (idle {cores}-core machine: ~{dc / cores / 60:.1f} min); "
          f"helpful {report.helpful:.3f} harmless {report.harmless:.3f} mean {report.mean:.3f}", flush=True)
    return {"full_run_s": round(dt, 1), "full_run_cpu_s": round(dc, 1), "full_pairs_per_s": round(n / dt, 2),
            "full_accuracy": {k: v for k, v in report.as_dict().items() if k != "counts"}}


def main(argv: list[str] | None = None) -> None:
    args = parse_args(argv)
    import torch
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()
    if args.threads:
        torch.set_num_threads(args.threads)
    info = machine()
    print("machine:", json.dumps(info), flush=True)
    path, kind = model_dir(args)
    batch = BatchConfig(max_length=args.max_length, max_tokens=args.max_tokens, bf16=args.bf16,
                        share_prompts=not args.no_share, workers=args.workers)
    scorer, tok, model = make_scorer(path, args.scorer, batch)
    params = sum(p.numel() for p in model.parameters())
    print(f"model: {path} ({kind}), {params / 1e6:.2f}M parameters, scorer {args.scorer}, bf16 {args.bf16}, "
          f"prompt sharing {not args.no_share}, workers {args.workers}, max tokens/batch {args.max_tokens}", flush=True)
    everything, full_tokens, encode_s = full_run_size(args, tok, batch)
    n, med_pairs, med_tokens, med_cpu = timed_sample(args, scorer)
    cores = min(max(args.workers, args.threads or 1), os.cpu_count() or 1)
    estimate, idle_estimate = full_tokens / med_tokens + encode_s, full_tokens / (med_cpu * cores) + encode_s
    result = {"machine": info, "model": str(path), "model_kind": kind, "parameters": params, "scorer": args.scorer,
              "bf16": args.bf16, "prompt_sharing": batch.share_prompts, "workers": args.workers,
              "max_tokens": args.max_tokens, "sample_pairs": n, "repeats": args.repeats,
              "median_pairs_per_s": round(med_pairs, 2), "median_tokens_per_s": round(med_tokens),
              "full_pairs": sum(len(s.pairs) for s in everything.values()), "full_tokens": full_tokens,
              "estimated_full_run_s": round(estimate, 1), "median_tokens_per_cpu_s": round(med_cpu),
              "estimated_full_run_idle_s": round(idle_estimate, 1), "idle_cores": cores}
    print(f"median: {med_pairs:.2f} pairs/s, {med_tokens:,.0f} tokens/s -> estimated full run {estimate / 60:.1f} min; "
          f"{med_cpu:,.0f} tokens/CPU-s -> idle {cores}-core machine: {idle_estimate / 60:.1f} min", flush=True)
    if args.full:
        result.update(full_run(everything, scorer, cores))
    result["load_avg_1m_end"] = round(os.getloadavg()[0], 2)
    if args.json:
        print(json.dumps(result))


if __name__ == "__main__":
    main()
