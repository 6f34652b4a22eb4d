"""How long may the gate's steering answers be? The steerability axis at each token cap, and its cost.

    .venv/bin/python bench/steer_cap.py --model DIR [--prompts 10] [--cap 256] [--complexity-cap 64]
        [--caps 32 64 128 192 256]
        [--threads 2] [--bootstrap 1000] [--out bench/results/steer-cap-NAME.json]

The gate measures steering on a grid (`deploy.release.measure.steer_grid`): its fixed prompts at
verbosity 0-4 and complexity 0-4, greedy, the model alone. Verbosity is read as the answer's
words, so a token cap that most answers reach hides the slider: every answer from some verbosity
up ends at the same length. A greedy answer cut at n tokens is exactly the answer a cap of n gives,
so the grid is answered once at `--cap` and each smaller cap is read by cutting the answers:
- per cap: Spearman ρ(verbosity, words), ρ(complexity, grade) and their mean (the axis), each with
  its 95 % half-width from resampling prompts (the gate's unit), and how many verbosity answers
  end at the cap;
- the grid's wall time as the gate ran it before (every answer at `gate.max_new_tokens`) and now
  (verbosity answers at `gate.steer_max_new_tokens`).
Reported with the machine; nothing here is a pass/fail assertion.
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


def timed_grid(model, tok, prompts: list[str], verbosity_cap: int, complexity_cap: int) -> tuple[list, float]:
    from deploy.release.measure import steer_grid
    from deploy.settings import load_settings

    settings = load_settings(environ={}, overrides={"backend.steering": "instruct", "gate.max_new_tokens": complexity_cap,
                                                    "gate.steer_max_new_tokens": verbosity_cap})
    start = time.perf_counter()
    rows = steer_grid(model, tok, settings, prompts)
    return rows, time.perf_counter() - start


def at_cap(rows: list, tok, cap: int) -> list:
    """The rows as a grid capped at `cap` tokens would have answered them (greedy: a prefix)."""
    from evaluator.steerability import SteerRow

    out = []
    for r in rows:
        ids = tok(r.answer, add_special_tokens=False)["input_ids"]
        out.append(SteerRow(r.prompt, r.attribute, r.value, tok.decode(ids[:cap]) if len(ids) > cap else r.answer))
    return out


def half_widths(rows: list, n_prompts: int, n_boot: int) -> dict[str, float]:
    """95 % half-width of the axis and of each attribute's ρ, resampling prompts."""
    from evaluator.steerability import SteerRow, score

    by_prompt = [[r for r in rows if r.prompt == p] for p in range(n_prompts)]
    rng = np.random.default_rng(0)
    draws: dict[str, list[float]] = {}
    for _ in range(n_boot):
        picked = rng.integers(0, n_prompts, n_prompts)
        for key, value in score([SteerRow(k, r.attribute, r.value, r.answer)
                                 for k, p in enumerate(picked) for r in by_prompt[p]]).items():
            draws.setdefault(key, []).append(value)
    return {key: round(float(np.subtract(*np.percentile(d, [97.5, 2.5]))) / 2, 3) for key, d in draws.items()}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a local Hugging Face model directory (SmolLM2)")
    ap.add_argument("--prompts", type=int, default=10, help="the first N of the gate's steering prompts")
    ap.add_argument("--cap", type=int, default=256, help="verbosity answers' token cap for the measured grid")
    ap.add_argument("--complexity-cap", type=int, default=64, help="complexity answers' cap (the gate's max_new_tokens)")
    ap.add_argument("--caps", type=int, nargs="+", default=[32, 64, 96, 128, 192, 256])
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)

    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    from evaluator.steerability import PROMPTS, level_means, score

    torch.set_num_threads(args.threads)
    tok = AutoTokenizer.from_pretrained(args.model)
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32).eval()
    prompts = list(PROMPTS[: args.prompts])
    _, before_s = timed_grid(model, tok, prompts, verbosity_cap=64, complexity_cap=64)
    rows, after_s = timed_grid(model, tok, prompts, verbosity_cap=args.cap, complexity_cap=args.complexity_cap)
    caps = {}
    for cap in sorted(set(args.caps) | {args.cap}):
        capped = at_cap(rows, tok, cap)
        at_limit = sum(len(tok(r.answer, add_special_tokens=False)["input_ids"]) >= cap
                       for r in capped if r.attribute == "verbosity")
        caps[cap] = {**{k: round(v, 3) for k, v in score(capped).items()},
                     "half_width": half_widths(capped, len(prompts), args.bootstrap),
                     "verbosity_answers_at_cap": at_limit,
                     "words_by_verbosity": {v: round(w, 1) for v, w in level_means(capped, "verbosity").items()}}
    emit({"date": time.strftime("%Y-%m-%d %H:%M"), "machine": cpu_model(), "threads": args.threads,
          "model": Path(args.model).name, "prompts": len(prompts), "answers": len(rows),
          "complexity_cap": args.complexity_cap,
          "grid_seconds": {"before (every answer at 64 tokens)": round(before_s, 1),
                           f"verbosity at {args.cap} tokens, complexity at {args.complexity_cap}": round(after_s, 1)},
          "by_cap": caps, "verbosity_answers": {str(r.value): r.answer for r in rows if r.attribute == "verbosity"
                                                and r.prompt == 0}}, args.out)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
