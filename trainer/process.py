"""Starting, watching and cancelling a run's subprocess (`python -m trainer.run RUN_DIR`).

Design choices:
- A subprocess, not a thread: training holds the GIL, gigabytes and sometimes a GPU; a crash or
  an OOM kill must not take the service down, and SIGKILL must be a recoverable event.
- The child gets its own session (process group), so Ctrl-C in a terminal that waits on it
  (`advisor train --wait`) stops the watching, not the training.
- Restarting a run directory whose process died resumes from its last checkpoint: the child
  finds `checkpoints/checkpoint-N` itself. Nothing else is needed to "resume".
- This module imports no torch: the service and the CLI stay light.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

from trainer.config import RunConfig
from trainer.rundir import (
    CONFIG,
    LOG,
    PID,
    RUN_MODULE,
    TERMINAL,
    RunState,
    now_iso,
    pid_alive,
    read_metadata,
    read_pid,
    run_state,
    update_metadata,
)

PROJECT_ROOT = Path(__file__).resolve().parent.parent


class RunError(RuntimeError):
    """The run cannot be started or controlled as asked; the message says why."""


@dataclass
class RunHandle:
    run_dir: Path
    process: subprocess.Popen

    @property
    def pid(self) -> int:
        return self.process.pid

    def poll(self) -> int | None:
        return self.process.poll()

    def wait(self, timeout: float | None = None) -> int:
        return self.process.wait(timeout)

    def state(self) -> RunState:
        self.process.poll()  # reap, so a finished child is not a zombie that looks alive
        return run_state(self.run_dir)

    def cancel(self, timeout: float = 30.0) -> RunState:
        return cancel_run(self.run_dir, timeout=timeout, process=self.process)


def start_run(run_dir: str | Path, config: RunConfig | None = None, *, python: str | None = None) -> RunHandle:
    """Start (or, after a crash, restart and resume) the run in `run_dir`.

    `config` is written to config.json; without it, the one already there is used (a restart).
    """
    run_dir = Path(run_dir).resolve()
    if not (run_dir / "train.parquet").exists():
        raise RunError(f"{run_dir} has no train.parquet; build a dataset into it first "
                       "(feedback.datasets.build_dataset or `advisor dataset build --out`).")
    if pid_alive(read_pid(run_dir)):
        raise RunError(f"the run in {run_dir} is already running (pid {read_pid(run_dir)}).")
    if config is not None:
        (run_dir / CONFIG).write_text(json.dumps(config.to_dict(), indent=2) + "\n")
    elif not (run_dir / CONFIG).exists():
        raise RunError(f"{run_dir} has no config.json and no config was given.")
    meta = read_metadata(run_dir)
    if meta.get("status") == "succeeded":
        raise RunError(f"the run in {run_dir} already succeeded; start a new run instead.")
    (run_dir / PID).unlink(missing_ok=True)  # the last attempt's pid would read as "crashed"
    # Queued until the child says otherwise: a restart must not look finished (the last attempt's
    # "cancelled" or "failed") while the new process is starting.
    update_metadata(run_dir, run_id=meta.get("run_id", run_dir.name), status="queued",
                    created_at=meta.get("created_at") or now_iso(), error=None, finished_at=None)
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(PROJECT_ROOT), env.get("PYTHONPATH")]))
    env.setdefault("TOKENIZERS_PARALLELISM", "false")
    with (run_dir / LOG).open("ab") as log:
        log.write(f"\n==== {now_iso()} start {RUN_MODULE} {run_dir}\n".encode())
        log.flush()
        process = subprocess.Popen(
            [python or sys.executable, "-u", "-m", RUN_MODULE, str(run_dir)],
            stdout=log, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            cwd=PROJECT_ROOT, env=env, start_new_session=True,
        )
    (run_dir / PID).write_text(f"{process.pid}\n")
    return RunHandle(run_dir, process)


def cancel_run(run_dir: str | Path, *, timeout: float = 30.0, process: subprocess.Popen | None = None) -> RunState:
    """SIGTERM the run (it stops after the current step and records `cancelled`); SIGKILL it if
    it has not exited after `timeout` seconds. A run that is not alive is just marked cancelled."""
    run_dir = Path(run_dir)
    pid = read_pid(run_dir)
    if pid_alive(pid):
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if process is not None:
                process.poll()
            if not pid_alive(pid):
                break
            time.sleep(0.2)
        else:
            os.kill(pid, signal.SIGKILL)
            if process is not None:
                process.wait(10)
    if read_metadata(run_dir).get("status") not in TERMINAL:
        update_metadata(run_dir, status="cancelled", finished_at=now_iso(),
                        error="cancelled before it finished")
    return run_state(run_dir)


def wait_for(run_dir: str | Path, *, timeout: float | None = None, interval: float = 0.5,
             process: subprocess.Popen | None = None) -> RunState:
    """Block until the run is no longer alive; returns its final state."""
    deadline = None if timeout is None else time.monotonic() + timeout
    while True:
        if process is not None:
            process.poll()
        state = run_state(run_dir)
        if not state.alive and state.status != "queued":
            return state
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"run {run_dir} still {state.status} after {timeout} s")
        time.sleep(interval)
