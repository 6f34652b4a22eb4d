"""The training job inside the service: "Train now" in the operator screen and the periodic check.

Design choices:
- `train` is the operator's "Train now" (or `POST /api/admin/jobs/train/run`): a training run
  alone, gated later by hand ("Gate this run" in the training panel). The periodic trainer runs
  the whole cycle instead (`deploy.loop.cycle_jobs`, `schedule.train_cron`), asking
  `should_train` first. A job started with trigger "schedule" (by an older config) still asks.
- A run can be cancelled (`deploy.loop.cycle_jobs.cancel_run_job`: admin API, operator panel, `advisor train --cancel`):
  the subprocess stops after its current step, the run and the job row end 'cancelled', and no
  release exists for it (releases are only made by the gate from a run that succeeded).
- The registry's job row *is* the run's row: it is handed to `launch_training(job_id=…)`, so a
  run never shows up twice. The job thread then follows the subprocess (it only waits on a
  file, so a thread is cheap) and writes step/total, loss and ETA onto the row through
  `ctx.progress`; the row ends succeeded or failed with the run.
- A request while a run is in progress is refused, not queued: a queued run would train on data
  that the running one already covers. The refusal is recorded on the row ('skipped', with
  the reason naming the running run), so the operator sees why nothing started.
- `start_training` / `follow_training` are plain functions: the cycle (`deploy.loop.cycle`) trains
  through the same two calls.
- Every launch (this job, the cycle, `advisor train`) is built by `launch_request` from the
  settings: where it starts, its steering mode, its safety filter and people's-data rules are
  decided in one place, and `trainer.launch.launch_training` takes that one request.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from deploy.loop.jobs import JobContext, JobRegistry
from deploy.loop.privacy import training_data_rules
from deploy.settings import Settings
from feedback.datasets import SafetyFilter
from store import Store, TrainingRun
from trainer.config import TrainingKnobs
from trainer.launch import (
    LaunchRequest,
    TrainingBusy,
    TrainingStatus,
    launch_training,
    poll_training,
    should_train,
)

POLL_S = 1.0  # progress.jsonl is written once per logged step; polling faster buys nothing


def runs_dir(settings: Settings) -> Path:
    return settings.data_path / "runs"


def start_point(store: Store, base_model: str, from_base: bool) -> tuple[str | None, str | None, str | None]:
    """(adapter to continue from, its release id, a note for the operator): the live release's
    adapter, unless `from_base` or it was trained on another base model."""
    live = store.releases.live()
    if from_base or live is None or not live.adapter_path:
        return None, live.id if live else None, None
    if live.base_model != base_model:
        return None, live.id, (f"live release {live.id} was trained on {live.base_model}, not {base_model}: "
                               "starting from the base model")
    return live.adapter_path, live.id, None


def training_base_model(settings: Settings, backend: Any = None) -> str:
    """The local weights a run trains: the serving backend's model (built-in or transformers)."""
    if settings.backend.kind in ("pretrained", "builtin", "transformers") and backend is not None and backend.model:
        return str(backend.model)
    if settings.backend.kind == "transformers" and settings.backend.model:
        return settings.backend.model
    if settings.backend.kind == "pretrained":
        from chat.pretrained import build_pretrained_model

        return str(build_pretrained_model(settings.data_path))
    if settings.backend.kind == "builtin":
        from chat.builtin import build_builtin_model

        return str(build_builtin_model(settings.data_path))
    raise ValueError(
        f"training needs local model weights, and the {settings.backend.kind} backend names none; "
        "train from the CLI with `advisor train --base-model DIR` (the model the server serves)."
    )


def train_overrides(settings: Settings) -> dict[str, Any]:
    steps = settings.schedule.train_max_steps
    return {"max_steps": steps} if steps else {}


def launch_request(
    store: Store, settings: Settings, *, method: str, base_model: str, from_base: bool = False,
    overrides: dict[str, Any] | None = None, safety_filter: SafetyFilter | None = None, trigger: str = "manual",
    eval_fraction: float = 0.1, job_id: str | None = None, dataset_dir: str | Path | None = None,
) -> tuple[LaunchRequest, str | None]:
    """(the launch of a `method` run on `base_model` as the settings say, a note for the operator).
    It continues from the live release's adapter (`start_point`), renders prompts in the served
    steering mode, and keeps the settings' people's-data rules. Without `safety_filter`, the set is
    filtered as `schedule.safety_filter` says (the moderator by default); a KTO set takes
    `schedule.safety_anchors` anchors per user row. `overrides` are RunConfig
    fields (the CLI's and the admin API's training knobs)."""
    from deploy.loop.safety import make_safety_filter, safety_anchors

    if safety_filter is None:
        safety_filter = make_safety_filter(settings, settings.schedule.safety_filter)
    adapter, parent, note = start_point(store, base_model, from_base)
    request = LaunchRequest(
        method=method, runs_dir=runs_dir(settings), base_model=base_model, start_adapter=adapter,
        parent_release_id=parent, trigger=trigger, overrides=dict(overrides or {}), safety_filter=safety_filter,
        eval_fraction=eval_fraction, job_id=job_id, dataset_dir=dataset_dir, steering=settings.steering_mode,
        anchors=safety_anchors(settings, method) if dataset_dir is None else None,  # a built set has its own
        **training_data_rules(settings),
    )
    return request, note


def start_training(
    store: Store, settings: Settings, *, method: str, backend: Any = None, trigger: str = "manual",
    job_id: str | None = None, safety_filter: SafetyFilter | None = None, eval_fraction: float = 0.1,
    overrides: dict[str, Any] | None = None, dataset_dir: str | Path | None = None,
) -> TrainingRun:
    """Start a run of `method` from the live release (or the base model) on the served model, for
    the service's job and the cycle: `schedule.train_max_steps` caps it. Raises `TrainingBusy`."""
    request, _ = launch_request(
        store, settings, method=method, base_model=training_base_model(settings, backend),
        overrides={**train_overrides(settings), **(overrides or {})}, safety_filter=safety_filter, trigger=trigger,
        eval_fraction=eval_fraction, job_id=job_id, dataset_dir=dataset_dir)
    return launch_training(store, request)


def progress_fields(status: TrainingStatus) -> dict[str, Any]:
    """What the jobs table shows for a run: where it is, its loss and how long is left."""
    return {"run_id": status.run.id, "method": status.run.method, "run_status": status.state.status,
            **status.state.fields()}


def follow_training(
    store: Store, run_id: str, *, progress: Callable[..., None] | None = None, poll_s: float = POLL_S,
    timeout_s: float | None = None,
) -> TrainingStatus:
    """Wait for the run's subprocess to end, reporting progress; returns its recorded outcome."""
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    while True:
        status = poll_training(store, run_id)
        if progress is not None:
            progress(**progress_fields(status))
        if status.run.status not in ("queued", "running"):
            return status
        if deadline is not None and time.monotonic() > deadline:
            raise TimeoutError(f"training run {run_id} is still running after {timeout_s:.0f}s; it goes on in the "
                               f"background (`advisor train --cancel {run_id}` stops it).")
        time.sleep(poll_s)


def run_outcome(status: TrainingStatus) -> dict[str, Any]:
    """The run's final fields for a job row; raises with the run's own error when it did not succeed."""
    if status.run.status != "succeeded":
        raise RuntimeError(f"training run {status.run.id} {status.run.status}: {status.run.error or 'no error recorded'}")
    return {**progress_fields(status), "metrics": status.run.metrics,
            "adapter_dir": status.run.metrics.get("adapter_dir"), "run_dir": status.run.run_dir}


def register_jobs(registry: JobRegistry, ctx: JobContext) -> None:
    settings = ctx.settings

    def train(job: JobContext) -> dict:
        scheduled = job.job is not None and job.job.trigger == "schedule"
        method = job.params.get("method") or settings.schedule.train_method
        if scheduled:
            ok, reason = should_train(job.store, settings.schedule.min_new_feedback)
            if not ok:
                return {"status": "skipped", "reason": reason}
        try:
            run = start_training(job.store, settings, method=method, backend=job.backend,
                                 trigger=job.job.trigger if job.job else "manual",
                                 job_id=job.job.id if job.job else None,
                                 overrides=TrainingKnobs.from_mapping(job.params.get("overrides")).as_overrides())
        except TrainingBusy as exc:
            return {"status": "skipped", "reason": f"refused: {exc}"}
        if run.status == "failed":  # no examples: launch_training recorded why
            raise RuntimeError(run.error)
        job.progress(run_id=run.id, method=method, run_dir=run.run_dir, progress="starting")
        status = follow_training(job.store, run.id, progress=job.progress)
        if status.run.status == "cancelled":
            return {"status": "cancelled", **progress_fields(status)}
        return run_outcome(status)

    registry.add(
        "train", train,
        description=(f"Train a {settings.schedule.train_method} adapter on the feedback so far (a run alone; "
                     "the periodic trainer runs the whole cycle)."),
        button="Train now",
    )

