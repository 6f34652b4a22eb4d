"""The gate's work in one stream of two torch threads against two streams of one thread each
(`evaluator.streams`), on SmolLM2 in the gate's weights (bfloat16 where native).

    .venv/bin/python bench/gate_streams.py [--items 64] [--repeats 3] [--out FILE]

Four of the gate's steps, each on its own inputs, both ways in turn within each repeat (which
way goes first alternates):
- greedy answers to the first `--items` advice requests (the gate's batch size and token budget);
- sampled answers to the first `--items` risky prompts, seeded per batch as the gate draws them;
- HH log-likelihoods of the first `--items` pairs of the shipped sample (`workers` 1 or 2; both
  answers after the chosen side's conversation: the time, not the accuracy, is measured);
- the judges' features of the same pairs' chosen answers (`Featurizer.encode` under
  `evaluator.streams.side_by_side`).
Per step: the median seconds of each way, the ratio two streams / one stream in the same repeat
(median and range), and whether the outputs are equal (for answers, how many differ per repeat:
one thread a batch rounds bfloat16 otherwise than two, and one flipped token changes the rest;
scores to 3 decimals). Not a pass/fail test; run it on a quiet machine.
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


def steps(model, tokenizer, featurizer, settings, items: int) -> dict:
    """name -> run(streams) -> output, each one of the gate's steps on its own inputs."""
    from deploy.release.measure import DRAW_SEED, _answer_fn
    from evaluator.hh_data import load_hh_sample
    from evaluator.logprobs import BatchConfig
    from evaluator.moderation import load_risky_prompts
    from evaluator.scoring import LogLikelihoodScorer
    from evaluator.shipped import load_advice_prompts
    from evaluator.streams import side_by_side

    advice, risky = load_advice_prompts()[:items], load_risky_prompts()[:items]
    pairs = [p for s in load_hh_sample().values() for p in s.pairs][:items]
    prompts, chosen, rejected = [p.prompt for p in pairs], [p.chosen for p in pairs], [p.rejected for p in pairs]

    def hh(streams: int) -> list[float]:
        scorer = LogLikelihoodScorer(model, tokenizer, BatchConfig.for_this_machine(workers=streams), mean=True)
        return [round(x, 3) for x in scorer.score(prompts + prompts, chosen + rejected)]

    def features(streams: int) -> list:
        with side_by_side(streams):
            return featurizer.encode(prompts, chosen).round(3).tolist()

    return {
        "advice_greedy": lambda n: _answer_fn(model, tokenizer, settings, streams=n)(advice),
        "risky_sampled": lambda n: _answer_fn(model, tokenizer, settings, seed=DRAW_SEED,
                                              max_new_tokens=settings.gate.max_new_tokens, streams=n)(risky),
        "hh_loglik": hh,
        "judge_features": features,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, default=REPO / ".cache" / "test", help="holds models/smollm2-135m-instruct")
    ap.add_argument("--items", type=int, default=64)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--only", nargs="*", default=None, help="run only these steps (names as in the report)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    import torch

    from deploy.release.measure import weights_dtype
    from deploy.release.models import load_merged
    from deploy.settings import load_settings
    from evaluator.judges.features import Featurizer

    base = args.data_dir / "models" / "smollm2-135m-instruct"
    settings = load_settings(environ={}, overrides={"backend.model": str(base)})
    dtype = weights_dtype(settings)
    model, tokenizer = load_merged(base, None, dtype)
    featurizer = Featurizer(base)
    threads = torch.get_num_threads()
    seconds: dict[str, dict[int, list[float]]] = {}
    same: dict[str, bool] = {}
    differ: dict[str, list[int]] = {}
    for rep in range(args.repeats):
        for name, run in steps(model, tokenizer, featurizer, settings, args.items).items():
            if args.only and name not in args.only:
                continue
            outs = {}
            for n in ((1, 2) if rep % 2 == 0 else (2, 1)):  # alternate which way goes first
                t0 = time.perf_counter()
                outs[n] = run(n)
                seconds.setdefault(name, {}).setdefault(n, []).append(time.perf_counter() - t0)
                print(f"repeat {rep} {name} streams={n}: {seconds[name][n][-1]:.1f}s", flush=True)
            same[name] = same.get(name, True) and outs[1] == outs[2]
            if isinstance(outs[1], list) and outs[1] and isinstance(outs[1][0], str):  # answers: how many differ
                differ.setdefault(name, []).append(sum(a != b for a, b in zip(outs[1], outs[2])))
    report = {"machine": cpu_model(), "torch_threads": threads, "weights": dtype, "items": args.items,
              "repeats": args.repeats, "steps": {}}
    for name, by in seconds.items():
        ratios = [b / a for a, b in zip(by[1], by[2])]
        report["steps"][name] = {"one_stream_s": round(statistics.median(by[1]), 2),
                                 "two_streams_s": round(statistics.median(by[2]), 2),
                                 "ratio_median": round(statistics.median(ratios), 3),
                                 "ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
                                 "same_output": same[name], **({"answers_differing": differ[name]} if name in differ else {})}
    emit(report, args.out)


if __name__ == "__main__":
    main()
