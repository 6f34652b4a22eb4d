"""Training runs as the service and the CLI see them: dataset → snapshot → run, recorded in the store.

The functions here are what `advisor train`, the operator's "Train now" button and the periodic
job call. They run in the process that owns the database; the run itself is a subprocess that
only sees its run directory.

Design choices:
- One run at a time, guarded twice: the `training_runs` table (a queued/running row whose process
  is alive) and a lock file `<runs_dir>/train.lock` created with O_EXCL and holding the run's pid.
  The table covers runs started by this database's owner; the lock covers two processes racing
  for the same runs directory. A lock whose pid is gone is stale and taken over.
- Empty data never starts a subprocess: the run is recorded as failed with the reason ("no
  training examples…"), so the operator sees why nothing trained; the live release is untouched.
- The store is reconciled lazily: `poll_training` reads the run directory and writes the outcome
  (status, metrics, error) into `training_runs` and `jobs`; a run whose process died without an
  outcome is recorded as failed with the resume hint.
- After the process that started a run died (`recover_dead_run`, called by crash recovery): a
  run whose subprocess still lives is left to finish; a crashed one is failed as above and loses
  only its half-written files (the resume needs the rest); one that never started (its starter
  died building the set) is failed and its directory removed: it holds no training to resume.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
from dataclasses import dataclass, field
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from feedback.datasets import DatasetCard, SafetyFilter, build_dataset, copy_dataset
from feedback.datasets.anchors import SafetyAnchors
from feedback.datasets.build import Redactor
from feedback.labeller import Labeller
from store import Store, TrainingRun
from store.analytics import feedback_count_since
from store.attributes import SteeringMode
from trainer.config import config_for
from trainer.process import RunError, cancel_run, start_run
from trainer.rundir import RunState, pid_alive, remove_partial_files, run_state

LOCK_FILE = "train.lock"
ACTIVE = ("queued", "running")


class TrainingBusy(RuntimeError):
    """Another training run is in progress; the message names it."""


@dataclass
class TrainingStatus:
    run: TrainingRun
    state: RunState


def new_run_id(method: str) -> str:
    stamp = datetime.now(timezone.utc).strftime("%Y%m%d-%H%M%S")
    return f"{method}-{stamp}-{secrets.token_hex(3)}"


# --------------------------------------------------------------------------- the lock


def _read_lock(runs_dir: Path) -> dict[str, Any]:
    try:
        return json.loads((runs_dir / LOCK_FILE).read_text())
    except (OSError, ValueError):
        return {}


def _lock_alive(lock: dict[str, Any]) -> bool:
    pid = lock.get("pid")
    if pid == os.getpid():
        return True  # being set up by this process (dataset build before the subprocess starts)
    return pid_alive(pid, marker="") if lock.get("phase") == "preparing" else pid_alive(pid)


def _acquire_lock(runs_dir: Path, run_id: str) -> None:
    runs_dir.mkdir(parents=True, exist_ok=True)
    path = runs_dir / LOCK_FILE
    for _ in range(2):
        try:
            fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            lock = _read_lock(runs_dir)
            if _lock_alive(lock):
                raise TrainingBusy(
                    f"training run {lock.get('run_id', '?')} holds {path} (pid {lock.get('pid')}); "
                    "wait for it to finish or cancel it first."
                ) from None
            path.unlink(missing_ok=True)  # stale: its process is gone
            continue
        with os.fdopen(fd, "w") as fh:
            json.dump({"run_id": run_id, "pid": os.getpid(), "phase": "preparing"}, fh)
        return
    raise TrainingBusy(f"could not take the training lock {path}; try again.")


def _set_lock_pid(runs_dir: Path, run_id: str, pid: int) -> None:
    tmp = runs_dir / f".{LOCK_FILE}.tmp"
    tmp.write_text(json.dumps({"run_id": run_id, "pid": pid, "phase": "training"}))
    os.replace(tmp, runs_dir / LOCK_FILE)


def _release_lock(runs_dir: Path, run_id: str) -> None:
    if _read_lock(runs_dir).get("run_id") == run_id:
        (runs_dir / LOCK_FILE).unlink(missing_ok=True)


# --------------------------------------------------------------------------- queries


def active_run(store: Store) -> TrainingRun | None:
    """The queued/running run whose process is still alive (reconciling dead ones on the way)."""
    for queued in store.jobs.unfinished_training_runs():
        status = poll_training(store, queued.id)
        if status.run.status in ACTIVE:
            return status.run
    return None


def ensure_idle(store: Store, runs_dir: Path) -> None:
    """Raise `TrainingBusy` with the reason if a run is in progress (table or lock file)."""
    run = active_run(store)
    if run is not None:
        state = run_state(Path(run.run_dir))
        where = f"step {state.step}/{state.max_steps}" if state.max_steps else state.status
        raise TrainingBusy(
            f"training run {run.id} ({run.method}) is in progress ({where}); "
            "wait for it to finish or cancel it first."
        )
    lock = _read_lock(Path(runs_dir))
    if lock and _lock_alive(lock):
        raise TrainingBusy(
            f"training run {lock.get('run_id', '?')} holds {Path(runs_dir) / LOCK_FILE} (pid {lock.get('pid')}); "
            "wait for it to finish or cancel it first."
        )


def should_train(store: Store, min_new_feedback: int) -> tuple[bool, str]:
    """Whether the periodic job should start a run now, and why (or why not)."""
    run = active_run(store)
    if run is not None:
        return False, f"training run {run.id} ({run.method}) is still in progress"
    last = store.jobs.last_training_run_at()
    count = feedback_count_since(store, last)
    since = "ever" if last is None else f"since the last training run ({last:%Y-%m-%d %H:%M})"
    if count < min_new_feedback:
        return False, f"{count} new feedback item(s) {since}; waiting for {min_new_feedback}"
    return True, f"{count} new feedback item(s) {since} (threshold {min_new_feedback})"


# --------------------------------------------------------------------------- launching


@dataclass(frozen=True)
class LaunchRequest:
    """Everything one training launch needs, built once (the service and the CLI build it from the
    settings with `deploy.loop.training.launch_request`; tests and benches write it out)."""

    method: str  # sft | kto | dpo
    runs_dir: str | Path  # the run goes in <runs_dir>/<run_id>/; the lock file is <runs_dir>/train.lock
    base_model: str  # local model directory the adapter is trained on
    start_adapter: str | None = None  # PEFT adapter to continue from (the live release's); None: the base model
    parent_release_id: str | None = None  # the release the run continues from, recorded on the run
    trigger: str = "manual"  # what asked for it (manual, cli, schedule, cycle, bench), on the jobs row
    overrides: dict[str, Any] = field(default_factory=dict)  # RunConfig fields over the method's defaults
    safety_filter: SafetyFilter | None = None  # drops unsafe examples from the set; None: no filter
    labeller: Labeller | None = None  # SFT attribute labels; None: the heuristic labeller
    eval_fraction: float = 0.1  # share of conversations held out for evaluation
    python: str | None = None  # interpreter of the training subprocess; None: this one
    job_id: str | None = None  # a jobs row the caller already made to record the run on (one run, one row)
    dataset_dir: str | Path | None = None  # a set the caller already built, copied instead of built again
    consent_default: bool = True  # people's data rules of the build (`feedback.datasets.build`)
    redactor: Redactor | None = None
    steering: SteeringMode = SteeringMode.STEERLM  # how the base model saw the attributes (`RunConfig.steering`)
    kto_attributes: str = "asked"  # a KTO set's row attributes (`build_dataset`); other methods and `dataset_dir` ignore it
    anchors: SafetyAnchors | None = None  # labelled risky answers for a KTO set; other methods and `dataset_dir` ignore it


def launch_training(store: Store, request: LaunchRequest) -> TrainingRun:
    """Build the `request.method` training set from the store, snapshot it into
    `<runs_dir>/<run_id>/`, record the run (`training_runs` + a `jobs` row) and start its subprocess.

    Raises `TrainingBusy` if a run is in progress. With no training examples, the run is recorded
    as failed with the reason and no subprocess is started. With `job_id` the run is recorded on
    that row; with `dataset_dir` the run trains on the set the caller reported. The users whose
    conversations the set holds are recorded on the run (`run_users`).
    """
    r = request
    method, base_model, start_adapter = r.method, str(r.base_model), r.start_adapter
    runs_dir = Path(r.runs_dir).resolve()
    ensure_idle(store, runs_dir)
    config = config_for(method, base_model=base_model, start_adapter=start_adapter, steering=r.steering,
                        **r.overrides)
    run_id = new_run_id(method)
    run_dir = runs_dir / run_id
    _acquire_lock(runs_dir, run_id)
    try:
        job = store.jobs.get(r.job_id) if r.job_id else store.jobs.create(
            "train", trigger=r.trigger, params={"method": method, "run_id": run_id, "base_model": base_model,
                                              "start_adapter": start_adapter})
        card: DatasetCard = (
            copy_dataset(r.dataset_dir, run_dir, method) if r.dataset_dir is not None
            else build_dataset(store, method, run_dir, safety_filter=r.safety_filter, labeller=r.labeller,
                               eval_fraction=r.eval_fraction, consent_default=r.consent_default,
                               redactor=r.redactor, kto_attributes=r.kto_attributes,
                               anchors=r.anchors if method == "kto" else None))
        store.jobs.create_training_run(
            run_id=run_id, method=method, run_dir=str(run_dir), base_model=base_model, job_id=job.id,
            parent_release_id=r.parent_release_id, data_hash=card.rows_sha256, config=config.to_dict(),
        )
        store.privacy.record_run_users(run_id, card.users)
        if card.n_train == 0:
            error = (f"no training examples for {method}: the feedback so far yields {card.n_rows} usable row(s) "
                     f"(dropped: {card.dropped or 'none'}). Collect more feedback and run extraction, then try again.")
            store.jobs.update(job.id, status="failed", error=error, result={"run_id": run_id, "dataset": card.to_json()})
            _release_lock(runs_dir, run_id)
            return store.jobs.update_training_run(run_id, status="failed", error=error)
        handle = start_run(run_dir, config, python=r.python)
        _set_lock_pid(runs_dir, run_id, handle.pid)
        store.jobs.update(job.id, result={"run_id": run_id, "dataset": card.to_json()})
        return store.jobs.update_training_run(run_id, status="running")
    except BaseException:
        _release_lock(runs_dir, run_id)
        raise


def poll_training(store: Store, run_id: str) -> TrainingStatus:
    """The run's live state from its directory; a finished run's outcome is written to the store."""
    run = store.jobs.get_training_run(run_id)
    state = run_state(Path(run.run_dir))
    outcome = state.status if state.finished else ("failed" if state.status == "crashed" else None)
    if outcome and run.status != outcome:
        error = state.error
        if state.status == "crashed":
            error = (f"the training process exited without finishing (killed?) at step {state.step}; "
                     "resume it from its last checkpoint with resume_training / `advisor train --resume "
                     f"{run_id}`")
        metrics = dict(state.metrics)
        if state.adapter_dir:
            metrics["adapter_dir"] = state.adapter_dir
        run = store.jobs.update_training_run(run_id, status=outcome, metrics=metrics, error=error)
        if run.job_id:  # complete as written: a reader that sees the status sees the outcome
            store.jobs.merge_result(run.job_id, {"run_id": run_id, "run_status": outcome, **state.fields(),
                                                 "metrics": metrics, "adapter_dir": state.adapter_dir},
                                    status=outcome, error=error)
        _release_lock(Path(run.run_dir).parent, run_id)
    elif run.job_id and state.alive and state.last:
        # Live progress on the job row, for the operator screen.
        store.jobs.merge_result(run.job_id, {"run_id": run_id, **state.fields()})
    return TrainingStatus(run, state)


def recover_dead_run(store: Store, run_id: str, reason: str) -> TrainingStatus:
    """Settle a queued/running run whose starting process died (`reason` says which, and when)."""
    status = poll_training(store, run_id)
    run, state = status.run, status.state
    if state.alive or run.status == "succeeded":
        return status
    if run.status in ACTIVE:  # no pid: the subprocess never started
        error = f"{reason}, before the training process started; nothing was trained: train again"
        run = store.jobs.update_training_run(run_id, status="failed", error=error)
        if run.job_id:
            store.jobs.update(run.job_id, status="failed", error=error)
        shutil.rmtree(run.run_dir, ignore_errors=True)
        _release_lock(Path(run.run_dir).parent, run_id)
        return TrainingStatus(run, state)
    remove_partial_files(Path(run.run_dir))
    return status


def resume_training(store: Store, run_id: str, *, python: str | None = None) -> TrainingRun:
    """Restart a run whose process died; it continues from its last checkpoint."""
    run = store.jobs.get_training_run(run_id)
    if run.status == "succeeded":
        raise RunError(f"training run {run_id} already succeeded.")
    runs_dir = Path(run.run_dir).parent
    ensure_idle(store, runs_dir)
    _acquire_lock(runs_dir, run_id)
    try:
        handle = start_run(run.run_dir, python=python)
    except BaseException:
        _release_lock(runs_dir, run_id)
        raise
    _set_lock_pid(runs_dir, run_id, handle.pid)
    if run.job_id:
        store.jobs.update(run.job_id, status="running")
    return store.jobs.update_training_run(run_id, status="running")


def cancel_training(store: Store, run_id: str, *, timeout: float = 30.0) -> TrainingStatus:
    run = store.jobs.get_training_run(run_id)
    cancel_run(run.run_dir, timeout=timeout)
    return poll_training(store, run_id)


def latest_run(store: Store) -> TrainingRun | None:
    runs = store.jobs.list_training_runs(limit=1)
    return runs[0] if runs else None

