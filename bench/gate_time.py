"""The release gate's wall time on SmolLM2 at its defaults: a first gate against the live release,
then the same pair gated again with the live side's answers and HH scores cached.

    .venv/bin/python bench/gate_time.py [--data-dir .cache/test] [--steps 2] [--out bench/results/gate-time-smollm2.json]

The candidate is a LoRA adapter from a short real SFT run on SmolLM2 (`--steps` steps of batch 4 on
the tests' synthetic rows): the gate measures whatever adapter it is given, and its time depends on
the model and the gate's settings, not on how long the adapter trained. The live release is the
base model (`ensure_base_release`), as on a fresh deployment. The gate runs as the service runs it
(`deploy.release.evaluate.gate_candidate`, judges validated, guard on, the shipped HH sample,
advice and risky prompts, steering grid, served answers) with every setting at its default. The
first gate ("before": nothing cached, both sides generated and scored) and the second ("after":
the live side from the cache) are timed per step (the steps the gate keeps with its outcome), and
their decisions and per-axis values are compared: caching must not change what the gate decides. Not a
pass/fail test; run it on a quiet machine. `--root` gates an earlier run's adapter again in its
own store, so both gates find the live side's caches as that run left them.
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "tests"))
sys.path.append(str(REPO / "bench"))

from _machine import cpu_model  # noqa: E402


def adapter_run(root: Path, base_model: Path, steps: int) -> Path:
    from training_helpers import make_run_dir

    from trainer.config import config_for
    from trainer.process import start_run
    from trainer.rundir import EXIT_OK

    run_dir = make_run_dir(root / "run", "sft", n=4 * steps)
    handle = start_run(run_dir, config_for("sft", base_model=str(base_model), max_steps=steps, batch_size=4))
    if handle.wait(3600) != EXIT_OK:
        raise SystemExit((run_dir / "train.log").read_text()[-3000:])
    return run_dir


def gate_settings(data_dir: Path, base: Path):
    """Every setting at its default but where the data and the base model are: the gate as the
    service runs it (SmolLM2 as served, steered by instructions; the judges read the same model)."""
    from deploy.settings import load_settings

    return load_settings(environ={}, overrides={"data_dir": str(data_dir), "backend.model": str(base),
                                                "judges.model_dir": str(base)})


def timed_gate(store, settings, run_id: str) -> dict:
    from deploy.release.evaluate import gate_candidate

    t0 = time.monotonic()
    outcome = gate_candidate(store, settings, run_id)
    total = time.monotonic() - t0
    return {"seconds": round(total, 1), "promote": outcome.decision.promote, "reasons": outcome.decision.reasons,
            "candidate": outcome.candidate, "live": outcome.live,
            "cached": {"answers": outcome.details["live"].get("cached_answers"),
                       "hh_scores": outcome.details["live"].get("hh", {}).get("cached_scores"),
                       "judge_scores": outcome.details["live"].get("cached_judge_scores")},
            "steps": [{**step, "step": step["step"][:120]} for step in outcome.details["steps"]]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, default=REPO / ".cache" / "test", help="holds models/smollm2-135m-instruct")
    ap.add_argument("--steps", type=int, default=2)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "gate-time-smollm2.json")
    ap.add_argument("--root", type=Path, default=None,
                    help="an earlier run's directory (printed as 'root'): its adapter and store are gated again, "
                         "with the live side's caches as that run left them")
    args = ap.parse_args()

    from deploy.release.registry import ensure_base_release
    from store import Store

    base = (args.data_dir / "models" / "smollm2-135m-instruct").resolve()
    root = args.root or Path(tempfile.mkdtemp(prefix="advisor-gate-time-"))
    settings = gate_settings(root / "data", base)
    print(f"root: {root}", flush=True)
    with Store(settings.db_path) as store:
        ensure_base_release(store, str(base))
        run = next((r for r in store.jobs.list_training_runs() if r.status == "succeeded"), None) if args.root else None
        if run is None:
            t0 = time.monotonic()
            run_dir = adapter_run(root, base, args.steps)
            print(f"adapter: {args.steps} SFT steps in {time.monotonic() - t0:.0f}s", flush=True)
            run = store.jobs.create_training_run(method="sft", run_dir=str(run_dir), base_model=str(base))
            store.jobs.update_training_run(run.id, status="succeeded")
        before = timed_gate(store, settings, run.id)
        print(f"before (nothing cached): {before['seconds']}s, promote {before['promote']}", flush=True)
        after = timed_gate(store, settings, run.id)
        print(f"after (live side cached): {after['seconds']}s, promote {after['promote']}", flush=True)
    same = before["promote"] == after["promote"] and before["candidate"] == after["candidate"] \
        and before["live"] == after["live"]
    result = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": cpu_model(), "model": str(base.name),
              "before": before, "after": after, "ratio": round(after["seconds"] / before["seconds"], 3),
              "same_decision_and_values": same}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: result[k] for k in ("ratio", "same_decision_and_values")}))


if __name__ == "__main__":
    main()
