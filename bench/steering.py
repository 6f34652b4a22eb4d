"""Does a model follow the steering attributes? Length against verbosity, reading grade against complexity.

    PYTHONPATH=. .venv/bin/python bench/steering.py --model DIR [--mode instruct|steerlm]
        [--split dev|test|all] [--limit 10] [--max-new-tokens 300] [--batch-size 10]
        [--threads 1] [--bootstrap 1000] [--out results.json]

Each prompt of `bench/data/steering_prompts.jsonl` (everyday dilemmas written for this bench, none
of them in chat/builtin/corpus.jsonl; `dev` is what renderings may be tuned on, `test` is not
looked at while tuning) is answered greedily through `TransformersBackend.complete`, i.e. through
the same steering rendering (`chat.steering.render`) the app uses, at
- verbosity 0..4 with complexity 2, and
- complexity 0..4 with verbosity 2 (the other attributes at their defaults: 4, 4, 4).

Reported, pooled over (prompt, level) pairs, each with a 95% bootstrap interval from resampling
prompts (seeded): Spearman rho(verbosity, words); mean words at verbosity 4 over verbosity 0;
Spearman rho(complexity, Flesch-Kincaid grade, textstat); grade at complexity 4 minus 0. Also the
mean per level, how many answers ran into the token limit (their length is capped, so a ratio
measured with many of them understates the steering), the wall time and the machine. The JSON
(`--out`) keeps every answer and the messages each setting rendered a question to.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.append(str(Path(__file__).resolve().parent))  # after the repo: bench/store.py must not shadow the store package

import numpy as np  # noqa: E402
from _machine import cpu_model  # noqa: E402

from evaluator.paired import spearman  # noqa: E402
from evaluator.text import words  # noqa: E402

PROMPTS = Path(__file__).resolve().parent / "data" / "steering_prompts.jsonl"
LEVELS = range(5)
TARGETS = {"rho_verbosity_words": 0.6, "ratio_words_v4_v0": 2.0}


def _policy() -> str:
    from deploy.settings import GuardSettings

    return GuardSettings().system_prompt


def load_prompts(split: str, limit: int | None) -> list[dict]:
    rows = [json.loads(line) for line in PROMPTS.read_text().splitlines() if line.strip()]
    rows = [r for r in rows if split == "all" or r["split"] == split]
    return rows[:limit] if limit else rows


def settings() -> list[tuple[int, int]]:
    """(verbosity, complexity) pairs: each sweep holds the other attribute at 2; (2, 2) once."""
    return sorted({(v, 2) for v in LEVELS} | {(2, c) for c in LEVELS})


def generate(model: str, mode: str, questions: list[str], *, max_new_tokens: int, batch_size: int,
             progress=print, backend=None, policy: str = "") -> tuple[dict, dict, dict]:
    """answers[(v, c)] = list of answers; rendered[(v, c)] = the messages a question "…" is sent as;
    tokens[(v, c)] = each answer's length in tokens. The grid is the release gate's
    (`evaluator.steerability.answer_grid`); its (2, 2) cell, in both sweeps, is answered once.
    With `backend` (a loaded TransformersBackend) that one is used, and left open, instead of loading `model`.
    With `policy`, each question is sent under the serving guard's safety policy, as the chat sends it."""
    from chat.backends.base import SamplingParams
    from chat.backends.transformers_backend import TransformersBackend
    from chat.guard import with_policy
    from chat.steering import render
    from evaluator.steerability import answer_grid
    from store.attributes import Attributes, SteeringMode

    mode = SteeringMode(mode)
    own = backend is None
    if own:
        backend = TransformersBackend(model, device="cpu", kind="transformers", max_batch_size=batch_size,
                                      local_files_only=True)
    params = SamplingParams(max_new_tokens=max_new_tokens, temperature=0.0)
    answers, rendered, tokens = {}, {}, {}

    def answer(qs: list[str], attribute: str, value: int) -> list[str]:
        attrs = Attributes(**{attribute: value})
        key = (attrs.verbosity, attrs.complexity)
        if key in answers:
            return answers[key]
        msgs, kwarg = render(with_policy([{"role": "user", "content": "…"}], policy), attrs, mode)
        rendered[key] = {"messages": msgs, "template_attributes": kwarg}
        t0 = time.monotonic()
        out = answers[key] = backend.complete([with_policy([{"role": "user", "content": q}], policy) for q in qs],
                                              attributes=attrs, steering=mode, params=params)
        tokens[key] = [len(backend.tokenizer(a, add_special_tokens=False)["input_ids"]) for a in out]
        progress(f"  verbosity {key[0]} complexity {key[1]}: {np.mean([words(a) for a in out]):6.1f} words, "
                 f"{time.monotonic() - t0:5.1f} s")
        return out

    answer_grid(answer, questions, LEVELS)
    if own:
        backend.close()
    return ({k: answers[k] for k in settings()}, {k: rendered[k] for k in settings()},
            {k: tokens[k] for k in settings()})


def matrices(answers: dict, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(words_v[prompt, verbosity level], grade_c[prompt, complexity level]) from `generate`'s answers,
    each answer measured as the gate measures it (`evaluator.steerability.measure`)."""
    from evaluator.steerability import measure

    words_v = np.array([[measure("verbosity", answers[(v, 2)][i]) for v in LEVELS] for i in range(n)], float)
    grade_c = np.array([[measure("complexity", answers[(2, c)][i]) for c in LEVELS] for i in range(n)], float)
    return words_v, grade_c


def analyse(words_v: np.ndarray, grade_c: np.ndarray, *, n_boot: int, seed: int = 0) -> dict:
    """words_v[prompt, verbosity level], grade_c[prompt, complexity level] -> point estimates and 95% CIs.
    A ρ is NaN where a resample's measure is constant (the gate counts it 0); NaN draws leave the interval."""
    n = words_v.shape[0]
    lv = np.tile(np.arange(5), n)

    def stats(idx: np.ndarray) -> dict:
        w, g = words_v[idx], grade_c[idx]
        return {
            "rho_verbosity_words": spearman(lv[: w.size], w.reshape(-1)),
            "ratio_words_v4_v0": float(w[:, 4].mean() / max(w[:, 0].mean(), 1e-9)),
            "rho_complexity_grade": spearman(lv[: g.size], g.reshape(-1)),
            "grade_c4_minus_c0": float(g[:, 4].mean() - g[:, 0].mean()),
            **{f"words_v{k}": float(w[:, k].mean()) for k in range(5)},
            **{f"grade_c{k}": float(g[:, k].mean()) for k in range(5)},
        }

    point = stats(np.arange(n))
    rng = np.random.default_rng(seed)
    boots = [stats(rng.integers(0, n, n)) for _ in range(n_boot)]
    out = {}
    for key, value in point.items():
        sample = np.array([b[key] for b in boots], dtype=float)
        sample = sample[~np.isnan(sample)]
        lo, hi = (np.percentile(sample, [2.5, 97.5]) if sample.size else (float("nan"), float("nan")))
        out[key] = {"value": value, "ci95": [float(lo), float(hi)]}
    return out


def machine() -> dict:
    import torch

    return {"cpu": cpu_model(), "cores": os.cpu_count(), "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
            "load_avg_1m": round(os.getloadavg()[0], 2)}


def table(result: dict) -> str:
    s = result["stats"]

    def f(key: str, fmt: str = "{:.2f}") -> str:
        v, (lo, hi) = s[key]["value"], s[key]["ci95"]
        return f"{fmt.format(v)} [{fmt.format(lo)}, {fmt.format(hi)}]"

    lines = [f"model {result['model']}  mode {result['mode']}  prompts {result['n_prompts']} ({result['split']})  "
             f"max_new_tokens {result['max_new_tokens']}  wall {result['wall_s']:.0f} s",
             "level  words@verbosity (95% CI)   FK grade@complexity (95% CI)"]
    for k in LEVELS:
        lines.append(f"{k:>5}  {f(f'words_v{k}', '{:.1f}'):<26} {f(f'grade_c{k}', '{:.1f}')}")
    lines += [
        f"Spearman rho(verbosity, words)     {f('rho_verbosity_words')}   target >= {TARGETS['rho_verbosity_words']}",
        f"mean words verbosity 4 / 0         {f('ratio_words_v4_v0')}   target >= {TARGETS['ratio_words_v4_v0']}",
        f"Spearman rho(complexity, FK grade) {f('rho_complexity_grade')}",
        f"FK grade complexity 4 - 0          {f('grade_c4_minus_c0')}",
        f"answers at the token limit: {result['at_token_limit']} of {result['n_answers']}",
    ]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True, help="a local Hugging Face model directory")
    ap.add_argument("--mode", default="instruct", choices=("instruct", "steerlm"))
    ap.add_argument("--split", default="dev", choices=("dev", "test", "all"))
    ap.add_argument("--limit", type=int, default=None, help="first N prompts of the split")
    ap.add_argument("--max-new-tokens", type=int, default=300)
    ap.add_argument("--batch-size", type=int, default=10)
    # One thread: on a shared 2-core box two OpenMP threads wait on each other (measured: a batch of 10
    # took 1.2 s per token on 2 threads, 0.25 s on 1, with another process busy). The thread count can
    # change the last bits of a sum, so compare runs made with the same one (it is in the JSON).
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads (default 1)")
    ap.add_argument("--bootstrap", type=int, default=1000)
    ap.add_argument("--policy", action="store_true", help="send each question under the serving guard's safety policy")
    ap.add_argument("--out", type=Path, default=None, help="write the JSON result (answers included) here")
    args = ap.parse_args(argv)

    import torch

    torch.set_num_threads(args.threads)
    prompts = load_prompts(args.split, args.limit)
    questions = [p["question"] for p in prompts]
    print(f"{len(questions)} prompts x {len(settings())} settings, greedy, up to {args.max_new_tokens} new tokens",
          file=sys.stderr)
    t0 = time.monotonic()
    answers, rendered, tokens = generate(args.model, args.mode, questions, max_new_tokens=args.max_new_tokens,
                                        batch_size=args.batch_size, progress=lambda m: print(m, file=sys.stderr),
                                        policy=_policy() if args.policy else "")
    wall = time.monotonic() - t0
    words_v, grade_c = matrices(answers, len(questions))
    at_limit = sum(t >= args.max_new_tokens - 2 for ts in tokens.values() for t in ts)
    result = {
        "model": args.model, "mode": args.mode, "policy": args.policy, "split": args.split, "n_prompts": len(questions),
        "prompt_ids": [p["id"] for p in prompts], "max_new_tokens": args.max_new_tokens,
        "bootstrap": {"samples": args.bootstrap, "seed": 0, "unit": "prompt"},
        "stats": analyse(words_v, grade_c, n_boot=args.bootstrap),
        "at_token_limit": at_limit, "n_answers": sum(len(a) for a in answers.values()),
        "wall_s": round(wall, 1), "machine": machine(),
        "rendered": {f"v{v}c{c}": r for (v, c), r in rendered.items()},
        "answers": {f"v{v}c{c}": a for (v, c), a in answers.items()},
        "answer_tokens": {f"v{v}c{c}": t for (v, c), t in tokens.items()},
    }
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(json.dumps(result, indent=1, ensure_ascii=False) + "\n")
    print(table(result))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
