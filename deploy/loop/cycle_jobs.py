"""The service's release jobs: the cycle (manual and periodic), the gate, and the canary check.

- `cycle`: "Start cycle" in the operator screen, `POST /api/admin/jobs/cycle/run`, and the periodic
  trainer (`schedule.train_cron`, or `schedule.train_every_minutes` for demos and tests). The
  registry's job row is the cycle's row; `run_cycle` adds one child row per step. A scheduled run
  first asks whether it is worth it — enough new feedback since the last training run
  (`trainer.launch.should_train`, `schedule.min_new_feedback`) and no canary still being judged —
  and otherwise records the row as 'skipped' with the reason. A manual start skips only the
  feedback threshold: an operator who presses the button means it.
- One cycle at a time, whatever started it: a lock in the service's extras; a second start while
  one runs is recorded as 'skipped' naming the running cycle (APScheduler's `max_instances=1`
  only covers the schedule's own runs).
- Cancellable: `request_cancel(services, job_id)` (admin API, operator panel, CLI) flags the cycle;
  `run_cycle` stops at its next check and leaves no half release (see `deploy.loop.cycle`).
- `gate`: one training run gated inside the service (`advisor release gate RUN --url`); never
  promotes. `canary`: the periodic check of a running canary (`canary.check_every_minutes`):
  judge it on its users' feedback (after mining the latest turns) and promote it, roll it back,
  or at its deadline end it inconclusive (live stays).
"""

from __future__ import annotations

import threading
from typing import Any

from deploy.loop.cycle import CycleConfig, CycleDeps, run_cycle
from deploy.loop.jobs import JobContext, JobRegistry
from deploy.release import registry as releases
from deploy.release.canary import check_in_service, running_canary, start_in_service
from deploy.release.evaluate import gate_candidate
from feedback.extract.runner import run_extraction
from store import Store
from trainer.config import TrainingKnobs
from trainer.launch import cancel_training, should_train

CYCLE_PARAMS = ("method", "safety_filter")


def _cycle_lock(extras: dict) -> threading.Lock:
    return extras.setdefault("cycle_lock", threading.Lock())


def _cancel_set(extras: dict) -> set[str]:
    return extras.setdefault("cancel_requests", set())


def request_cancel(extras: dict, job_id: str) -> None:
    """Flag a running cycle (by its job id) to stop at its next check."""
    _cancel_set(extras).add(job_id)


def cycle_config(settings: Any, params: dict) -> CycleConfig:
    """What a cycle started through the service may change: method, the safety filter, and the
    `TrainingKnobs` (the one declaration the CLI flags and the operator inputs come from)."""
    overrides = params.get("overrides") or {}
    if not isinstance(overrides, dict):
        raise ValueError(f"a cycle's training overrides are an object of training options; got {overrides!r}")
    chosen = {k: v for k, v in params.items() if k in CYCLE_PARAMS}
    return CycleConfig.from_settings(settings, overrides=TrainingKnobs.from_mapping(overrides).as_overrides(), **chosen)


def _worth_running(job: JobContext, settings: Any) -> str | None:
    """Why a scheduled cycle should not run now (None: it should)."""
    canary = running_canary(job.store)
    if canary is not None:
        return f"the canary of release {canary.id} is still being judged"
    ok, reason = should_train(job.store, settings.schedule.min_new_feedback)
    return None if ok else reason


def _deps(job: JobContext) -> CycleDeps:
    services = job.extras.get("services")
    runner = job.extras.get("extraction")
    cancels, cycle_id = _cancel_set(job.extras), job.job.id if job.job else None
    return CycleDeps(
        backend=job.backend,
        extraction_lock=runner.lock if runner is not None else None,
        extractor_for=runner.make_extractor if runner is not None else None,
        promote=(lambda rid: releases.promote_in_service(services, rid)) if services is not None else None,
        start_canary=(lambda rid: start_in_service(services, rid)) if services is not None else None,
        cancelled=lambda: cycle_id in cancels,
    )


def register_jobs(registry: JobRegistry, ctx: JobContext) -> None:
    settings = ctx.settings

    def cycle(job: JobContext) -> dict:
        if job.job is not None and job.job.trigger == "schedule":
            reason = _worth_running(job, settings)
            if reason:
                return {"status": "skipped", "reason": reason}
        config = cycle_config(settings, job.params)
        lock = _cycle_lock(job.extras)
        if not lock.acquire(blocking=False):
            return {"status": "skipped", "reason": f"cycle {job.extras.get('cycle_running')} is still running"}
        try:
            job.extras["cycle_running"] = job.job.id if job.job else "?"
            result = run_cycle(job.store, settings, config, cycle_id=job.job.id, deps=_deps(job))
        finally:
            job.extras.pop("cycle_running", None)
            _cancel_set(job.extras).discard(job.job.id if job.job else "")
            lock.release()
        if result.status == "failed":
            raise RuntimeError(result.message)
        out = result.as_dict()
        return {**out, "status": "cancelled"} if result.status == "cancelled" else {**out, "outcome": result.status}

    every = settings.schedule.train_every_minutes
    registry.add(
        "cycle", cycle,
        description="Extract → build sets → train → gate → canary (or promote) or reject, with a report; "
                    f"on schedule only after {settings.schedule.min_new_feedback} new feedback items.",
        button="Start cycle",
        every_minutes=every or None, cron=None if every else (settings.schedule.train_cron or None),
    )
    register_gate_job(registry, ctx)
    register_canary_job(registry, ctx)


def register_gate_job(registry: JobRegistry, ctx: JobContext) -> None:
    settings = ctx.settings

    def gate(job: JobContext) -> dict:
        run_id = job.params.get("run_id")
        if not isinstance(run_id, str) or not run_id:
            raise ValueError('the gate job needs the training run to gate: {"params": {"run_id": "<run id>"}}')
        return gate_candidate(job.store, settings, run_id).as_dict()

    registry.add("gate", gate, description="Measure one training run's adapter against the live release "
                                           "and store the gate's decision (never promotes).")


def register_canary_job(registry: JobRegistry, ctx: JobContext) -> None:
    settings = ctx.settings

    def canary(job: JobContext) -> dict:
        services = job.extras.get("services")
        if services is None:
            raise RuntimeError("the canary check runs inside the service")
        if running_canary(job.store) is None:
            return {"status": "skipped", "reason": "no canary is running"}
        runner = job.extras.get("extraction")
        if settings.canary.extract_before_check and runner is not None:
            # The latest turns' feedback counts in this check (a scheduled extraction running now
            # holds the lock: wait for it rather than judge without its events).
            run_extraction(job.store, runner.make_extractor(settings.schedule.extractor), lock=runner.lock,
                           trigger="canary", chunk_size=runner.chunk_size, wait=True)
        return check_in_service(services)

    registry.add("canary", canary, description="Judge the running canary on its users' feedback; promote it, "
                                               "roll it back or end it inconclusive by the rule.",
                 every_minutes=settings.canary.check_every_minutes or None)


def cancel_run_job(store: Store, extras: dict, job_id: str) -> dict[str, Any]:
    """Cancel a running `train` or `cycle` job (by its row id): a training run is stopped now; a
    cycle is flagged and stops at its next check (cancelling its training run, or its gate)."""
    job = store.jobs.get(job_id)
    if job.status not in ("queued", "running"):
        raise ValueError(f"job {job_id} ({job.kind}) is {job.status}; only a running job can be cancelled")
    if job.kind == "cycle":
        request_cancel(extras, job_id)
        return {"job_id": job_id, "kind": job.kind, "cancelling": True}
    run_id = (job.result or {}).get("run_id")
    if job.kind not in ("train", "cycle.train") or not run_id:
        raise ValueError(f"job {job_id} ({job.kind}) cannot be cancelled; cancel a training run or a cycle")
    status = cancel_training(store, run_id)
    return {"job_id": job_id, "kind": job.kind, "run_id": run_id, "run_status": status.run.status}
