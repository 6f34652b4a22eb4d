"""Does the gate's model-alone harmlessness decision on one candidate depend on which random
numbers its draws get? The same pair measured under several seed sets.

    .venv/bin/python bench/harm_seeds.py --adapter DIR [--seeds 1 2] [--out FILE]

Each side (the base with the candidate's adapter merged in, and the bare base, as a gate against
the base release loads them) answers the gate's risky prompts `gate.harmlessness_draws` times per
seed set, sampled as the gate samples (`deploy.release.measure.risky_answer_sets`); seed set s
seeds draw d with DRAW_SEED + 1000·s + d on both sides alike, as the gate does (set 0 is the
gate's own). Every answer is judged by the gate's harmlessness judge at its cut; per set: each
side's share judged safe, the paired 95 % interval of Δ over prompts (the gate's own bootstrap)
and whether the axis passes (lower end ≥ −tolerance). The spread of Δ across sets against the
intervals' width says whether the interval covers what the seed does. Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import gc
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "bench"))  # after the repo: bench/store.py must not shadow the store package

from _machine import cpu_model, emit  # noqa: E402
from gate_power import interval  # noqa: E402  (the gate's own paired bootstrap)
from harm_power import gate_judge_setup, judged, shares  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, default=REPO / ".cache" / "test", help="holds models/smollm2-135m-instruct")
    ap.add_argument("--adapter", type=Path, required=True, help="the candidate's LoRA adapter directory")
    ap.add_argument("--seeds", type=int, nargs="+", default=[1, 2], help="seed sets (0: the gate's own)")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()

    from deploy.release.measure import DRAW_SEED, risky_answer_sets, weights_dtype
    from deploy.release.models import load_merged
    from evaluator.moderation import load_risky_prompts

    started = time.time()
    base, settings, judge = gate_judge_setup(args.data_dir, "bench-harm-seeds")
    prompts = load_risky_prompts()
    safe: dict[str, dict[int, list[float]]] = {}
    for side, adapter in (("candidate", args.adapter), ("live", None)):
        model, tokenizer = load_merged(base, adapter, weights_dtype(settings))
        safe[side] = {}
        for s in args.seeds:
            print(f"{side}: seed set {s}", flush=True)
            sets = risky_answer_sets(model, tokenizer, settings, prompts, seed=DRAW_SEED + 1000 * s)
            flags = judged(judge, prompts, sets)
            safe[side][s] = shares(flags, range(len(flags)))
        del model
        gc.collect()
    tolerance = settings.gate.harmlessness.tolerance
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": cpu_model(), "adapter": str(args.adapter),
              "judge": judge.version, "prompts": len(prompts), "draws": settings.gate.harmlessness_draws,
              "weights": weights_dtype(settings), "batch": settings.gate.batch_size, "tolerance": tolerance,
              "seed_sets": {}}
    for s in args.seeds:
        c, live = safe["candidate"][s], safe["live"][s]
        iv = interval(c, live)
        report["seed_sets"][str(s)] = {"candidate": round(sum(c) / len(c), 4), "live": round(sum(live) / len(live), 4),
                                       "delta": iv, "passes": iv["low"] >= -tolerance}
    report["wall_s"] = round(time.time() - started, 1)
    emit(report, args.out)


if __name__ == "__main__":
    main()
