"""Does the chat stay responsive while a training run shares the machine? Turn latency idle vs during.

    python bench/chat_during_training.py --data-dir .cache/test [--turns 6 --steps 6 --max-new-tokens 64]

Design choices:
- The chat side is what a user gets: `chat.turns.send` on SmolLM2 with the guard and the policy
  (the served defaults), one user at a time, greedy, everyday questions (`bench/chat_load.QUESTIONS`).
- The training side is what the scheduled cycle starts: a SmolLM2 KTO LoRA run through
  `trainer.start_run` (its own session, niceness and autogroup 19: `trainer.run.lower_priority`),
  launched by `bench/train.py` as a separate process, as the service launches one.
- Three phases in one run: idle before, during (turns start only once the run is training, and
  a turn counts only if the run was still alive when it ended), idle after. Medians with 95 %
  bootstrap intervals; during / idle (before and after pooled) as a ratio of medians with an
  interval from resampling each phase independently.
"""

from __future__ import annotations

import argparse
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "bench"))

from _machine import cpu_model, emit  # noqa: E402
from guard_latency import EVERYDAY, median_ci, served_path, timed_turn  # noqa: E402


def ratio_unpaired(a: list[float], b: list[float], n_boot: int = 2000, seed: int = 0) -> dict:
    """Median(a) / median(b), with a 95 % interval from resampling a and b independently."""
    import numpy as np

    x, y, rng = np.asarray(a), np.asarray(b), np.random.default_rng(seed)
    ra = np.median(x[rng.integers(0, x.size, (n_boot, x.size))], axis=1)
    rb = np.median(y[rng.integers(0, y.size, (n_boot, y.size))], axis=1)
    return {"ratio": round(float(np.median(x) / np.median(y)), 3),
            "ci95": [round(float(v), 3) for v in np.percentile(ra / rb, [2.5, 97.5])]}


def turns(ctx, n: int, tag: str, params, alive=lambda: True) -> list[dict]:
    out = []
    for i in range(n):
        t = timed_turn(ctx, f"{tag}-{i}", EVERYDAY[i % len(EVERYDAY)], params)
        if alive():
            out.append(t)
        print(tag, i, round(t["ttft"], 2), round(t["total"], 2), flush=True)
    return out


def start_training(data_dir: Path, steps: int, work: Path) -> subprocess.Popen:
    """`bench/train.py` in the background, its temporary run directory under `work`."""
    cmd = [sys.executable, str(REPO / "bench" / "train.py"), "--data-dir", str(data_dir), "--model", "pretrained",
           "--methods", "kto", "--steps", str(steps), "--rows", "48", "--out", str(work / "train.json")]
    return subprocess.Popen(cmd, stdout=(work / "train.log").open("w"), stderr=subprocess.STDOUT, cwd=REPO,
                            env={**os.environ, "TMPDIR": str(work)})


def wait_until_training(work: Path, proc: subprocess.Popen, timeout: float = 600) -> None:
    """Until the run logs its first training step (model loading and reference log-probs are over)."""
    from trainer.rundir import read_progress

    t0 = time.monotonic()
    while proc.poll() is None and time.monotonic() - t0 < timeout:
        if any(r.get("event") == "log" for run in work.glob("bench-train-*/kto") for r in read_progress(run)):
            return
        time.sleep(2)
    raise SystemExit(f"the training run never started a step; see {work / 'train.log'}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, default=REPO / ".cache" / "test")
    ap.add_argument("--turns", type=int, default=6, help="turns per phase")
    ap.add_argument("--steps", type=int, default=6, help="KTO steps of the training run")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--threads", type=int, default=2, help="the chat process's torch threads")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "chat-during-training.json")
    args = ap.parse_args()

    from chat.backends.base import SamplingParams
    from deploy.serving.factory import turn_context

    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=0.0)
    with served_path(args.data_dir, args.threads) as (settings, store, backend, guard):
        ctx = turn_context(settings, store, backend, source="cli", guard=guard)
        timed_turn(ctx, "warmup", "Hello?", SamplingParams(max_new_tokens=4, temperature=0.0))
        before = turns(ctx, args.turns, "idle-before", params)
        with tempfile.TemporaryDirectory(prefix="chat-during-training-") as tmp:
            work = Path(tmp)
            proc = start_training(args.data_dir, args.steps, work)
            wait_until_training(work, proc)
            during = turns(ctx, args.turns, "during", params, alive=lambda: proc.poll() is None)
            proc.wait()
            after = turns(ctx, args.turns, "idle-after", params)
            out = work / "train.json"
            train = out.read_text() if out.is_file() else (work / "train.log").read_text()[-2000:]
    idle = before + after
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{cpu_model()}, {platform.machine()}",
              "torch_threads": args.threads, "max_new_tokens": args.max_new_tokens, "judge": guard.version,
              "turns": {"idle": len(idle), "during": len(during)}, "training": train}
    for metric in ("ttft", "total"):
        report[metric] = {"idle": median_ci([t[metric] for t in idle]),
                          "during": median_ci([t[metric] for t in during]) if during else None,
                          "during_over_idle": ratio_unpaired([t[metric] for t in during], [t[metric] for t in idle])
                          if during else None}
    emit(report, args.out)


if __name__ == "__main__":
    main()
