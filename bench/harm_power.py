"""How wide is the gate's model-alone harmlessness interval for a candidate exactly as harmless as
live, with one answer per risky prompt and with several? An A/A run on the served model.

    .venv/bin/python bench/harm_power.py [--data-dir .cache/test] [--draws 8] [--limit 0]
        [--out bench/results/harm-power-smollm2.json]

Two sides equally harmless by construction: the same model (SmolLM2 as served, the model alone,
the gate's default sliders and 64-token budget) answers the gate's risky prompts `--draws` times,
each draw sampled as the service samples with its own seed (the gate's own
`deploy.release.measure.risky_answer_sets`), and every answer is judged by the gate's
harmlessness judge at its shipped cut. For k answers per prompt, the draws are cut into disjoint
groups of k; each pair of groups is one A/A comparison: per prompt the share of its k answers
judged safe, and the 95 % paired bootstrap interval of the mean difference (`evaluator.paired`,
the gate's own code, resampling prompts). An equally harmless candidate fails the axis whenever
that interval reaches below −tolerance (0.05). One greedy answer per prompt is judged too, for the
share flagged that the gate has reported so far. Draws here do not share seeds (no common random
numbers), so each half-width is what two models whose answers have drifted apart face.
Reported with the machine and the wall time; nothing here is a pass/fail assertion.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import replace
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "bench"))  # after the repo: bench/store.py must not shadow the store package

from _machine import cpu_model, emit  # noqa: E402
from gate_power import interval  # noqa: E402  (the A/A interval, the gate's own paired bootstrap)

GROUP_SIZES = (1, 2, 4)


def shares(flags: list[list[bool]], draws: range) -> list[float]:
    """Per prompt, the share of the given draws' answers judged safe."""
    return [sum(not flags[d][i] for d in draws) / len(draws) for i in range(len(flags[0]))]


def comparisons(flags: list[list[bool]], k: int) -> list[dict]:
    """A/A intervals between consecutive disjoint groups of k draws (groups 0|1, 2|3, ...)."""
    groups = [range(g * k, (g + 1) * k) for g in range(len(flags) // k)]
    return [interval(shares(flags, groups[g]), shares(flags, groups[g + 1])) for g in range(0, len(groups) - 1, 2)]


def gate_judge_setup(data_dir: Path, scratch: str):
    """(the base model's directory, settings at the gate's defaults, the gate's harmlessness judge)."""
    from deploy.release.judges import load_judges
    from deploy.settings import load_settings

    base = data_dir / "models" / "smollm2-135m-instruct"
    settings = load_settings(environ={}, overrides={"data_dir": str(data_dir / scratch),
                                                    "backend.model": str(base), "judges.model_dir": str(base)})
    return base, settings, load_judges(settings)[1]


def judged(judge, prompts: list[str], answer_sets: list[list[str]]) -> list[list[bool]]:
    """Per draw, per prompt: whether the judge flags the answer (its shipped cut)."""
    return [[p >= judge.threshold for p in judge.answer_risk(prompts, answers)] for answers in answer_sets]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, default=REPO / ".cache" / "test", help="holds models/smollm2-135m-instruct")
    ap.add_argument("--draws", type=int, default=8, help="sampled answers per prompt in all")
    ap.add_argument("--limit", type=int, default=0, help="risky prompts (0 = all shipped)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    from deploy.release.measure import risky_answer_sets, weights_dtype
    from deploy.release.models import load_merged
    from evaluator.moderation import load_risky_prompts

    started = time.time()
    base, settings, judge = gate_judge_setup(args.data_dir, "bench-harm-power")
    prompts = load_risky_prompts()[: args.limit or None]
    model, tokenizer = load_merged(base, None, weights_dtype(settings))  # as the gate loads a side

    greedy_settings = replace(settings, gate=replace(settings.gate, harmlessness_draws=1))
    print(f"greedy: {len(prompts)} risky prompts", flush=True)
    t = time.time()
    greedy = judged(judge, prompts, risky_answer_sets(model, tokenizer, greedy_settings, prompts))[0]
    greedy_s = time.time() - t
    sampled_settings = replace(settings, gate=replace(settings.gate, harmlessness_draws=args.draws))
    print(f"sampled: {args.draws} draws of {len(prompts)} risky prompts", flush=True)
    t = time.time()
    flags = judged(judge, prompts, risky_answer_sets(model, tokenizer, sampled_settings, prompts))
    sampled_s = time.time() - t
    per_prompt_flagged = [sum(f[i] for f in flags) for i in range(len(prompts))]
    report = {
        "date": time.strftime("%Y-%m-%d %H:%M"), "machine": cpu_model(), "model": str(base),
        "judge": judge.version, "answer_cut": judge.threshold, "prompts": len(prompts), "draws": args.draws,
        "max_new_tokens": settings.gate.max_new_tokens, "weights": weights_dtype(settings), "batch": settings.gate.batch_size,
        "sampling": {"temperature": settings.backend.temperature, "top_p": settings.backend.top_p},
        "greedy_flagged": sum(greedy), "flagged_per_draw": [sum(f) for f in flags],
        "prompts_by_draws_flagged": {str(n): per_prompt_flagged.count(n) for n in range(args.draws + 1)},
        "seconds": {"greedy": round(greedy_s, 1), "per_sampled_draw": round(sampled_s / args.draws, 1)},
        "answers_per_prompt": {str(k): comparisons(flags, k) for k in GROUP_SIZES if 2 * k <= args.draws},
    }
    report["wall_s"] = round(time.time() - started, 1)
    emit(report, args.out)


if __name__ == "__main__":
    main()
