"""Jobs inside the service: a small registry over APScheduler that records every run in the store.

Design choices:
- The service owns the database (docs/design.md, "Process model"), so scheduled work (extraction,
  training checks, cycles) runs in the service's threads: an APScheduler `BackgroundScheduler`
  with a thread pool. Every run — scheduled, manual from the operator screen, or from the admin
  API — becomes a row in `jobs` (running → succeeded / failed) with its result or error, so the
  operator sees one history whatever started it.
- Each domain module defines `register_jobs(registry: JobRegistry, ctx: JobContext)` and calls
  `registry.add(...)`; `deploy.wiring.register_jobs` lists those modules. A job with a `button`
  label gets a button on the operator screen and can be started by `POST /api/admin/jobs/{kind}/run`.
- One run of a kind at a time (`max_instances=1`, coalesced): a slow extraction never stacks up.
- Several replicas on one PostgreSQL store (`deploy/service/replicas.py`): every replica keeps the
  schedule, but a scheduled run fires only where `leads()` is true (the replica holding the
  scheduler's advisory lock), and every run goes to the leader: "run now" on any replica writes a
  `queued` row, and the leader `dispatch`es queued rows, each claimed by one guarded UPDATE
  (`Jobs.claim`), so a row runs exactly once and per-process locks (extraction's) still see
  every run. Rows record the replica that ran them (`result.replica`). On a DuckDB file the one
  process leads and runs its jobs at once.
"""

from __future__ import annotations

import logging
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from apscheduler.schedulers.background import BackgroundScheduler
from apscheduler.triggers.cron import CronTrigger
from apscheduler.triggers.interval import IntervalTrigger

from store import Job, Store

log = logging.getLogger("advisor.jobs")

@dataclass
class JobContext:
    """What a job function receives: the shared objects of the service plus its own run."""

    store: Store
    settings: Any  # deploy.settings.Settings
    backend: Any = None  # chat.backends.Backend
    extras: dict[str, Any] = field(default_factory=dict)  # later issues: registry, serving hand-off…
    job: Job | None = None
    params: dict = field(default_factory=dict)

    def progress(self, **result: Any) -> None:
        """Write partial results (progress, loss…) onto the job row while it runs, keeping what
        is there (a training run's outcome lands on the row before its job function returns)."""
        if self.job is not None:
            self.store.jobs.merge_result(self.job.id, result)


JobFunc = Callable[[JobContext], dict | None]


@dataclass(frozen=True)
class JobSpec:
    kind: str
    func: JobFunc
    description: str = ""
    button: str | None = None  # operator-tab button label, e.g. "Run extraction now"
    trigger: Any = None  # an APScheduler trigger, or None for manual-only


class JobRegistry:
    def __init__(self, scheduler: BackgroundScheduler, ctx: JobContext) -> None:
        self.scheduler = scheduler
        self.ctx = ctx
        self._specs: dict[str, JobSpec] = {}
        self._lock = threading.Lock()
        # Set by the replica coordinator on a shared store: whether this process leads, its name.
        self.leads: Callable[[], bool] = lambda: True
        self.replica: str | None = None

    # ---- registration

    def add(
        self, kind: str, func: JobFunc, *, description: str = "", button: str | None = None,
        every_minutes: float | None = None, cron: str | None = None, trigger: Any = None,
    ) -> JobSpec:
        """Register a job kind; with `every_minutes`, `cron` or a `trigger` it also runs on schedule."""
        if kind in self._specs:
            raise ValueError(f"job kind {kind!r} is already registered")
        if trigger is None and every_minutes:
            trigger = IntervalTrigger(minutes=every_minutes)
        if trigger is None and cron:
            trigger = CronTrigger.from_crontab(cron)
        spec = JobSpec(kind=kind, func=func, description=description, button=button, trigger=trigger)
        self._specs[kind] = spec
        if trigger is not None:
            self.scheduler.add_job(
                self._run, trigger, args=[kind, "schedule", {}], id=f"schedule:{kind}",
                max_instances=1, coalesce=True, replace_existing=True,
            )
        return spec

    def specs(self) -> list[JobSpec]:
        return list(self._specs.values())

    def buttons(self) -> list[tuple[str, str]]:
        """(kind, label) of every job the operator can start by hand."""
        return [(s.kind, s.button) for s in self._specs.values() if s.button]

    def next_runs(self) -> dict[str, str | None]:
        out = {}
        for spec in self._specs.values():
            job = self.scheduler.get_job(f"schedule:{spec.kind}")
            nxt = getattr(job, "next_run_time", None) if job else None
            out[spec.kind] = nxt.isoformat() if nxt else None
        return out

    # ---- running

    def run_now(self, kind: str, *, trigger: str = "manual", params: dict | None = None) -> Job:
        """Start a run in the scheduler's pool now; returns its job row (status `running`)."""
        if kind not in self._specs:
            known = ", ".join(sorted(self._specs)) or "none yet"
            raise KeyError(f"No job kind {kind!r}; registered kinds: {known}.")
        if self.ctx.store.shared:
            return self._enqueue(kind, trigger, params or {})
        job = self.ctx.store.jobs.create(kind, trigger=trigger, params=params or {}, status="running")
        self.scheduler.add_job(self._execute, args=[kind, job, params or {}], id=f"run:{job.id}")
        return job

    def _enqueue(self, kind: str, trigger: str, params: dict) -> Job:
        """Shared store: a queued row for the leader to claim; this replica claims it at once if it leads."""
        job = self.ctx.store.jobs.create(kind, trigger=trigger, params=params, status="queued")
        self.ctx.store.jobs.notify("jobs", job.id)
        if self.leads():
            self.dispatch()
        return job

    def dispatch(self) -> list[str]:
        """Claim queued rows of the kinds registered here and start them; returns their ids."""
        started = []
        for job in self.ctx.store.jobs.queued():
            if job.kind in self._specs and (claimed := self.ctx.store.jobs.claim(job.id)) is not None:
                self.scheduler.add_job(self._execute, args=[job.kind, claimed, claimed.params], id=f"run:{job.id}")
                started.append(job.id)
        return started

    def run_sync(self, kind: str, *, trigger: str = "manual", params: dict | None = None) -> Job:
        """Run in the calling thread (tests, the CLI through the service)."""
        job = self.ctx.store.jobs.create(kind, trigger=trigger, params=params or {}, status="running")
        return self._execute(kind, job, params or {})

    def _run(self, kind: str, trigger: str, params: dict) -> None:
        if not self.leads():  # another replica holds the schedule
            return
        job = self.ctx.store.jobs.create(kind, trigger=trigger, params=params, status="running")
        self._execute(kind, job, params)

    def _execute(self, kind: str, job: Job, params: dict) -> Job:
        ctx = JobContext(store=self.ctx.store, settings=self.ctx.settings, backend=self.ctx.backend,
                         extras=self.ctx.extras, job=job, params=params)
        try:
            result = self._specs[kind].func(ctx) or {}
        except Exception as exc:  # a job's failure is recorded, never kills the scheduler
            log.error("job %s (%s) failed: %s", kind, job.id, traceback.format_exc())
            return self.ctx.store.jobs.update(job.id, status="failed", error=f"{type(exc).__name__}: {exc}")
        result = {**result, **({"replica": self.replica} if self.replica else {})}
        status = result.pop("status", None) if result.get("status") in ("skipped", "cancelled") else None
        return self.ctx.store.jobs.merge_result(job.id, result, status=status or "succeeded")


def make_scheduler() -> BackgroundScheduler:
    # Small pool: jobs are few and mostly wait on subprocesses; chat keeps the CPU.
    return BackgroundScheduler(
        executors={"default": {"type": "threadpool", "max_workers": 4}},
        job_defaults={"misfire_grace_time": 300},
        timezone="UTC",
    )
