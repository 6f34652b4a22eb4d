"""Crash recovery: rows left `running` by a process that died are failed with the reason, and
their training runs settled, when the scheduler starts (DuckDB) or while a replica leads it.

Design choices:
- Who is dead is the store's call (`Jobs.stale`): on PostgreSQL a running row whose owner
  has not renewed its lease for `store.job_lease_s` seconds (each store renews its own every
  10 s), on a DuckDB file every running row another store left (one process owns the file, so
  at start nobody else can be running anything).
- A stale row's training run is settled first (`trainer.launch.recover_dead_run`): a subprocess
  that still lives keeps its row running (the next poll records how it ended); a crashed one is
  failed with the resume hint and loses its half-written files; one that never started is failed
  and its directory removed. The remaining stale rows (cycles, their steps, extractions, ...)
  are failed with "the process that ran it stopped: <owner> at <last heartbeat>".
- Each row is failed by a guarded UPDATE (`Jobs.reclaim`): an owner that renewed its lease
  or finished the row in the meantime keeps it.
- On DuckDB every unfinished training run is checked too (one process: none can be followed by a
  live one); on PostgreSQL only those of stale rows (a pid means nothing on another host).
"""

from __future__ import annotations

import logging

from deploy.settings import Settings
from store import Job, Store
from store.jobs import stop_reason
from trainer.launch import recover_dead_run

log = logging.getLogger("advisor.recovery")


def recover_stale_work(store: Store, settings: Settings, *, when: str) -> list[Job]:
    """Fail the rows whose process died, settling their training runs; returns the rows failed.
    `when` completes the reason: e.g. "on starting the scheduler"."""
    stale = store.jobs.stale(settings.store.job_lease_s)
    by_id = {job.id: job for job in stale}
    runs_alive = set()
    for run in store.jobs.unfinished_training_runs():
        job = by_id.get(run.job_id or "")
        if job is None and store.shared:
            continue
        reason = stop_reason(job) if job is not None else "the process that started it stopped"
        if recover_dead_run(store, run.id, reason).state.alive:
            runs_alive.add(run.job_id)
    failed = []
    for job in stale:
        if job.id in runs_alive:
            continue
        done = store.jobs.reclaim(job, f"{stop_reason(job)} (found by {store.jobs.owner} {when}); run it again if "
                                      "it is still wanted")
        if done is not None:
            failed.append(done)
    if failed:
        log.warning("%s: %d job(s) left running by a stopped process marked failed: %s", when, len(failed),
                    ", ".join(f"{j.kind} {j.id}" for j in failed))
    return failed
