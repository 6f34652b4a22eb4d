"""One full scheduled cycle, with the gate at its defaults: time per step.

    .venv/bin/python bench/scheduled_cycle.py [--data-dir DIR] [--users 16] [--turns 8] [--train-steps 120]
    .venv/bin/python bench/scheduled_cycle.py --model pretrained --users 16 --turns 5 --train-steps 30 \
        [--data-dir DIR_OF_AN_EARLIER_GATE]

What runs is the service as `advisor serve` runs it (the model through transformers, the scheduler
inside). `--model builtin` (the default) is the 1.4M-parameter toy with the guard off, as the tests
run it; `--model pretrained` is the served SmolLM2-135M-Instruct with everything else at the
service's defaults (guard and safety policy on, the validated judges, the gate's defaults), so a
data dir where a gate already ran against the same live release reuses that release's cached
answers and HH scores. Simulated users who want short answers (`--short-words`, 35) chat through
the REST API
(`deploy.loop.simulate`), then the periodic trainer — its interval shortened to 6 seconds by
`schedule.train_every_minutes`, the only change from the defaults besides the step cap — finds
enough new feedback and runs extract → training sets → train (KTO) → gate → canary or reject with
nobody pressing a button. The gate runs at its defaults: the shipped HH sample (100 pairs per
subset, both sides), 243 advice requests, 171 risky prompts, the 10 × 5 × 2 steering grid (verbosity
answers up to 256 tokens), 64 new tokens otherwise. Printed: the machine, the simulation, and each step's wall time from its job row, plus
the gate's decision with every axis's interval. Not a pass/fail test.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests"))

from _machine import cpu_model  # noqa: E402


def cycle_settings(model: str, data: Path, cache: Path, train_steps: int):
    """The service's defaults but a schedule that trains as soon as there is feedback, KTO, at most
    `train_steps` steps."""
    from service_helpers import ADMIN_TOKEN, tiny_settings

    from deploy.settings import load_settings

    schedule = {"schedule.train_every_minutes": 0.1, "schedule.train_method": "kto",
                "schedule.train_max_steps": train_steps, "schedule.extract_every_minutes": 0}
    if model == "builtin":
        from chat.builtin import build_builtin_model

        return tiny_settings(data, build_builtin_model(cache), **{"backend.max_new_tokens": 64, **schedule})
    smollm2 = str(cache / "models" / "smollm2-135m-instruct")
    # Extraction on its own schedule, as the service's default runs it (every 10 minutes there): the
    # trigger counts mined feedback, and a slower model's few answers bring fewer ratings alone.
    return load_settings(environ={}, overrides={
        "data_dir": str(data), "backend.kind": "transformers", "backend.model": smollm2, "backend.device": "cpu",
        "judges.model_dir": smollm2, "server.admin_token": ADMIN_TOKEN,
        **schedule, "schedule.extract_every_minutes": 0.5})


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", type=Path, default=None)
    parser.add_argument("--model-cache", type=Path, default=Path(".cache/test"))
    parser.add_argument("--users", type=int, default=16)
    parser.add_argument("--turns", type=int, default=8)
    parser.add_argument("--train-steps", type=int, default=120)
    parser.add_argument("--max-wait-minutes", type=float, default=120,
                        help="give up when no scheduled cycle has ended this long after the simulation")
    parser.add_argument("--model", choices=("builtin", "pretrained"), default="builtin")
    parser.add_argument("--short-words", type=int, default=35,
                        help="the users want answers of at most this many words (64 new tokens give SmolLM2 about 45)")
    args = parser.parse_args()

    from service_helpers import start_service

    from deploy.loop.simulate import Preference, SimulationConfig, simulate

    data = args.data_dir or Path(tempfile.mkdtemp(prefix="advisor-cycle-"))
    settings = cycle_settings(args.model, data, args.model_cache.resolve(), args.train_steps)
    print(f"machine: {cpu_model()}; model {args.model}; data {data}")
    live = start_service(settings)
    try:
        t0 = time.monotonic()
        summary = simulate(SimulationConfig(url=live.url, users=args.users, turns=args.turns, seed=3,
                                            preference=Preference(kind="short", length_words=args.short_words),
                                            max_new_tokens=64))
        print(f"simulation: {summary.turns} answers, reactions {dict(summary.reactions)}, errors "
              f"{dict(summary.errors)} in {time.monotonic() - t0:.0f}s")
        store = live.store
        t1 = time.monotonic()
        while True:
            done = [j for j in store.jobs.list(kind="cycle", limit=50)
                    if j.trigger == "schedule" and j.status in ("succeeded", "failed", "cancelled")]
            if done:
                break
            if time.monotonic() - t1 > 60 * args.max_wait_minutes:
                jobs = [(j.kind, j.trigger, j.status) for j in store.jobs.list(limit=10)]
                sys.exit(f"no scheduled cycle ended within {args.max_wait_minutes} min of the simulation; "
                         f"latest jobs: {jobs}")
            time.sleep(2)
        job = done[0]
        print(f"scheduled cycle {job.id[:8]}: {job.status} ({(job.result or {}).get('status')}) "
              f"{time.monotonic() - t1:.0f}s after the simulation ended")
        for step in store.jobs.children(job.id):
            took = (step.finished_at - step.started_at).total_seconds() if step.finished_at and step.started_at else None
            print(f"  {step.kind:16s} {step.status:10s} {took if took is None else round(took, 1)} s")
        gate = (job.result or {}).get("gate") or {}
        for step in (gate.get("details") or {}).get("steps", []):
            print(f"    gate at {step['at_s']:7.1f} s: {step['step'][:100]}")
        for axis in (gate.get("decision") or {}).get("axes", []):
            print("  " + axis["reason"])
        print(json.dumps({"message": (job.result or {}).get("message") or job.error}, default=str))
    finally:
        live.stop()


if __name__ == "__main__":
    main()
