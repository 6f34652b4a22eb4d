"""The run directory: the whole contract between whoever starts a run and the run itself.

```
<run_dir>/
  config.json       requested config (written by the starter)
  train.parquet     training-set snapshot (feedback.datasets format)
  eval.parquet      held-out split (may be empty)
  dataset_card.*    the card of the snapshot, when it came from build_dataset
  pid               process id of the current attempt (written by the starter)
  metadata.json     status, effective config, base model, data hash, code version, metrics, error
  progress.jsonl    one JSON object per log / checkpoint / start event
  train.log         the subprocess's stdout + stderr (all attempts, appended)
  checkpoints/      Trainer checkpoints (resume point after a crash)
  adapter/          the final PEFT adapter (only once the run succeeded)
```

Design choices: only the run process writes `metadata.json` while it is alive (the starter
writes it before and the canceller after), always atomically (temp file + rename), so a reader
never sees half a file. Liveness comes from the pid file and /proc, checked against the command
line so a recycled pid is not mistaken for the run. No database: the service reconciles.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

CONFIG, METADATA, PROGRESS, LOG, PID = "config.json", "metadata.json", "progress.jsonl", "train.log", "pid"
CHECKPOINTS, ADAPTER = "checkpoints", "adapter"
TERMINAL = ("succeeded", "failed", "cancelled")
RUN_MODULE = "trainer.run"

# Exit codes of `python -m trainer.run`.
EXIT_OK, EXIT_FAILED, EXIT_BAD_DATA, EXIT_CANCELLED = 0, 1, 2, 143


def now_iso() -> str:
    return datetime.now(timezone.utc).isoformat(timespec="seconds")


def read_json(path: Path) -> dict[str, Any]:
    try:
        return json.loads(Path(path).read_text())
    except (OSError, ValueError):
        return {}


def write_json_atomic(path: Path, data: dict[str, Any]) -> None:
    path = Path(path)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(json.dumps(data, indent=2, default=str) + "\n")
    os.replace(tmp, path)


def read_metadata(run_dir: Path) -> dict[str, Any]:
    return read_json(Path(run_dir) / METADATA)


def update_metadata(run_dir: Path, **changes: Any) -> dict[str, Any]:
    data = read_metadata(run_dir) | changes
    write_json_atomic(Path(run_dir) / METADATA, data)
    return data


def read_progress(run_dir: Path) -> list[dict[str, Any]]:
    """Every complete record of progress.jsonl (a line being written is skipped)."""
    path = Path(run_dir) / PROGRESS
    if not path.exists():
        return []
    out = []
    for line in path.read_text(errors="replace").splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict):
            out.append(record)
    return out


def append_progress(run_dir: Path, record: dict[str, Any]) -> None:
    with (Path(run_dir) / PROGRESS).open("a") as fh:
        fh.write(json.dumps(record, default=str) + "\n")
        fh.flush()


def read_pid(run_dir: Path) -> int | None:
    try:
        return int((Path(run_dir) / PID).read_text().strip())
    except (OSError, ValueError):
        return None


def pid_alive(pid: int | None, *, marker: str = RUN_MODULE) -> bool:
    """True if `pid` is a live (not zombie) process whose command line contains `marker`."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        pass
    try:
        status = Path(f"/proc/{pid}/status").read_text()
        if "\nState:\tZ" in status:
            return False
        cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return True  # no /proc (not Linux): trust kill(0)
    return marker in cmdline


def last_checkpoint(run_dir: Path) -> Path | None:
    """The checkpoint with the highest step that has its trainer state (i.e. was fully written)."""
    ckpts = []
    for path in (Path(run_dir) / CHECKPOINTS).glob("checkpoint-*"):
        step = path.name.removeprefix("checkpoint-")
        if step.isdigit() and (path / "trainer_state.json").exists():
            ckpts.append((int(step), path))
    return max(ckpts)[1] if ckpts else None


def remove_partial_files(run_dir: Path) -> list[str]:
    """Delete what a killed run left half-written: checkpoints without their trainer state, the
    adapter being saved (`.adapter.tmp`; `adapter/` appears only by an atomic rename) and temp
    files. Complete checkpoints, the data snapshot and the logs stay: a resume starts from them.
    Returns the names removed, relative to `run_dir`."""
    run_dir = Path(run_dir)
    partial = [p for p in (run_dir / CHECKPOINTS).glob("checkpoint-*") if not (p / "trainer_state.json").exists()]
    partial += list(run_dir.glob(".*.tmp"))
    for path in partial:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return sorted(str(p.relative_to(run_dir)) for p in partial)


@dataclass
class RunState:
    """What a run directory says about its run, right now."""

    run_id: str
    run_dir: str
    status: str  # queued | running | succeeded | failed | cancelled | crashed
    alive: bool
    pid: int | None
    step: int = 0
    max_steps: int | None = None
    loss: float | None = None
    eta_s: float | None = None
    error: str | None = None
    metrics: dict[str, Any] = field(default_factory=dict)
    adapter_dir: str | None = None
    last: dict[str, Any] = field(default_factory=dict)  # the last progress record

    @property
    def finished(self) -> bool:
        return self.status in TERMINAL

    def fields(self) -> dict[str, Any]:
        """Where the run is, as a job row shows it: step, of how many, its loss and the time left."""
        return {"step": self.step, "max_steps": self.max_steps,
                "progress": f"{self.step}/{self.max_steps}" if self.max_steps else str(self.step),
                "loss": self.loss, "eta_s": None if self.eta_s is None else round(self.eta_s, 1)}


def run_state(run_dir: Path) -> RunState:
    run_dir = Path(run_dir)
    meta = read_metadata(run_dir)
    pid = read_pid(run_dir)
    alive = pid_alive(pid)
    status = meta.get("status", "queued")
    if status not in TERMINAL and not alive:
        # Started and gone without saying how it ended: killed (OOM, SIGKILL, reboot).
        status = "crashed" if pid is not None else status
    logs = [r for r in read_progress(run_dir) if "step" in r]
    last = logs[-1] if logs else {}
    losses = [r for r in logs if r.get("loss") is not None]
    timed = [r for r in logs if r.get("event") == "log"]
    adapter = run_dir / ADAPTER
    return RunState(
        run_id=meta.get("run_id", run_dir.name), run_dir=str(run_dir), status=status, alive=alive, pid=pid,
        step=int(last.get("step", 0)), max_steps=last.get("max_steps"),
        loss=losses[-1]["loss"] if losses else None, eta_s=timed[-1].get("eta_s") if timed else None,
        error=meta.get("error"), metrics=meta.get("metrics", {}),
        adapter_dir=str(adapter) if (adapter / "adapter_config.json").exists() else None, last=last,
    )


def code_version() -> str:
    """`git describe` of the checkout this code runs from, else the installed package version."""
    repo = Path(__file__).resolve().parent.parent
    try:
        out = subprocess.run(
            ["git", "describe", "--always", "--dirty", "--tags"], cwd=repo, capture_output=True, text=True, timeout=5,
        )
        if out.returncode == 0 and out.stdout.strip():
            return f"git {out.stdout.strip()}"
    except (OSError, subprocess.SubprocessError):
        pass
    try:
        from importlib.metadata import version

        return f"advisor {version('advisor')}"
    except Exception:  # noqa: BLE001 - not installed: say so rather than fail a run over it
        return "unknown"
