"""Jobs: one row per scheduled or manual run (extraction, dataset, training, evaluation, gate,
cycle, ...), its status, parameters, result and error; the training runs jobs start; and the
coordination of replicas sharing a PostgreSQL store (`coordination`: the leader lock, notifications).

Design choices:
- Status moves queued → running → succeeded | failed | skipped | cancelled; `running` stamps
  `started_at` once, a terminal status stamps `finished_at`, both in the database's clock.
- `params` and `result` are JSON documents: each kind of job records what it needs without a
  migration per kind.
- A cycle's steps are jobs whose `parent_id` is the cycle's job.
- Several replicas may share the table (PostgreSQL): a job created `queued` is run by whoever
  claims it, and `claim` is one guarded UPDATE (`WHERE status = 'queued'`), so of two
  replicas claiming at once exactly one gets the row (PostgreSQL re-checks the condition on the
  row the first one changed, and the second UPDATE matches nothing).
- Crash recovery by lease: a running row names its `owner` (the store that runs it: host, pid and
  a token, so two stores in one process are two owners) and `heartbeat_at`. On PostgreSQL each
  store renews the lease of the rows it runs every `heartbeat_s` from a daemon thread, so a
  replica that is alive (even one that lost the scheduler lock for a moment) keeps its rows, and
  one that died stops renewing them; `stale` finds rows whose lease is older than the
  caller's limit. A lease rather than the leader lock alone, because any process (a CLI command,
  a replica that is not leading) may run a job, and rather than pids, because replicas live on
  other hosts and in other containers. On a DuckDB file one process owns the database, so every
  running row another store left is stale.
- Training runs: the run's process never opens the database (DuckDB's single-process lock): it
  writes progress and artifacts into its run directory, and the service copies status and
  metrics into the run's row when it polls. So a row is created `queued` and moved along by the
  service alone. `config` and `metrics` are JSON documents, like a job's params and result.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import socket
import threading
from contextlib import AbstractContextManager
from datetime import datetime

from store import coordination
from store.db import Database
from store.records import JOB_COLUMNS, RUN_COLUMNS, Job, NotFound, TrainingRun, job_from_row, new_id, run_from_row

TERMINAL = ("succeeded", "failed", "skipped", "cancelled")
HEARTBEAT_S = 10.0  # how often a store on PostgreSQL renews the lease of the jobs it runs

log = logging.getLogger("advisor.store")


def stop_reason(job: Job) -> str:
    """Why a stale running row is being failed: its owner and its last sign of life."""
    last = job.heartbeat_at or job.started_at or job.created_at
    owner = job.owner or "a process that recorded no lease (a row from before leases)"
    return f"the process that ran it stopped: {owner} at {last.isoformat(sep=' ', timespec='seconds')}"


class Jobs:
    """Jobs and their leases, training runs, and the coordination of replicas (who leads, who
    hears of a change)."""

    heartbeat_s: float = HEARTBEAT_S

    def __init__(self, db: Database):
        self._db = db

    @property
    def owner(self) -> str:
        """This store's lease id, "host:pid/token": the owner stamped on the jobs it runs."""
        if "_owner" not in self.__dict__:
            self._owner = f"{socket.gethostname()}:{os.getpid()}/{secrets.token_hex(3)}"
        return self._owner

    def create(
        self, kind: str, *, trigger: str = "manual", params: dict | None = None,
        status: str = "running", parent_id: str | None = None,
    ) -> Job:
        job_id = new_id()
        with self._db.transaction():
            self._db.execute(
                "INSERT INTO jobs (id, kind, trigger, status, params, parent_id, owner, started_at, heartbeat_at) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, CASE WHEN ? = 'running' THEN now() END, "
                "CASE WHEN ? = 'running' THEN now() END)",
                [job_id, kind, trigger, status, json.dumps(params or {}), parent_id, self.owner, status, status],
            )
        if status == "running":
            self._keep_leases()
        return self.get(job_id)

    def update(
        self, job_id: str, *, status: str | None = None, result: dict | None = None, error: str | None = None,
    ) -> Job:
        """Change a job's status/result; a terminal status stamps `finished_at`."""
        sets, params = [], []
        if status is not None:
            sets.append("status = ?")
            params.append(status)
            if status == "running":
                sets += ["started_at = coalesce(started_at, now())", "owner = ?", "heartbeat_at = now()"]
                params.append(self.owner)
                self._keep_leases()
            if status in TERMINAL:
                sets.append("finished_at = now()")
        if result is not None:
            sets.append("result = ?")
            params.append(json.dumps(result, default=str))
        if error is not None:
            sets.append("error = ?")
            params.append(error)
        if sets:
            with self._db.transaction():
                self._db.execute(f"UPDATE jobs SET {', '.join(sets)} WHERE id = ?", [*params, job_id])
        return self.get(job_id)

    def merge_result(self, job_id: str, fields: dict, *, status: str | None = None, error: str | None = None) -> Job:
        """Add `fields` to the job's result, keeping the keys they do not name (progress written
        beside a final outcome must not drop it), with a status and error when given."""
        with self._db.transaction():
            return self.update(job_id, status=status, error=error, result={**self.get(job_id).result, **fields})

    def get(self, job_id: str) -> Job:
        row = self._db.read_one(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", [job_id])
        if row is None:
            raise NotFound(f"No job {job_id!r}.")
        return job_from_row(row)

    def list(self, *, kind: str | None = None, limit: int = 50) -> list[Job]:
        """The newest jobs first, of one kind or all."""
        sql = f"SELECT {JOB_COLUMNS} FROM jobs"
        params: list = []
        if kind:
            sql += " WHERE kind = ?"
            params.append(kind)
        sql += " ORDER BY created_at DESC LIMIT ?"
        return [job_from_row(r) for r in self._db.read(sql, [*params, limit])]

    def children(self, parent_id: str) -> list[Job]:
        """The steps of a cycle (jobs whose parent is `parent_id`), oldest first."""
        rows = self._db.read(f"SELECT {JOB_COLUMNS} FROM jobs WHERE parent_id = ? ORDER BY created_at", [parent_id])
        return [job_from_row(r) for r in rows]

    def claim(self, job_id: str) -> Job | None:
        """Move a queued job to running for this caller; None when someone else claimed it first."""
        row = self._db.returning(
            "UPDATE jobs SET status = 'running', started_at = coalesce(started_at, now()), owner = ?, "
            f"heartbeat_at = now() WHERE id = ? AND status = 'queued' RETURNING {JOB_COLUMNS}", [self.owner, job_id])
        if row is None:
            return None
        self._keep_leases()
        return job_from_row(row)

    def queued(self, *, limit: int = 20) -> list[Job]:
        """Jobs waiting to be claimed, oldest first."""
        rows = self._db.read(f"SELECT {JOB_COLUMNS} FROM jobs WHERE status = 'queued' ORDER BY created_at LIMIT ?",
                             [limit])
        return [job_from_row(r) for r in rows]

    def running(self, kind: str, *, exclude: str | None = None) -> Job | None:
        """The newest running job of this kind other than `exclude`, if any."""
        row = self._db.read_one(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE kind = ? AND status = 'running' AND id <> ? "
            "ORDER BY created_at DESC LIMIT 1",
            [kind, exclude or ""],
        )
        return job_from_row(row) if row else None

    # ---- leases (crash recovery)

    def heartbeat(self) -> int:
        """Renew the lease of every job this store runs; returns how many rows it renewed."""
        return self._db.execute("UPDATE jobs SET heartbeat_at = now() WHERE owner = ? AND status = 'running'",
                                [self.owner])

    def stale(self, stale_after_s: float) -> list[Job]:
        """Running rows of other owners whose lease is older than `stale_after_s` seconds (their
        process died); on a DuckDB file every running row of another owner. Oldest first."""
        rows = self._db.read(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE status = 'running' AND coalesce(owner, '') <> ? "
            "AND (? OR coalesce(heartbeat_at, started_at, created_at) < now() - INTERVAL '1 second' * ?) "
            "ORDER BY created_at",
            [self.owner, not self._db.shared, float(stale_after_s)])
        return [job_from_row(r) for r in rows]

    def reclaim(self, job: Job, error: str) -> Job | None:
        """Mark a stale row (from `stale`) failed with `error`, unless it changed since it
        was read (its owner renewed the lease or finished it): then None."""
        last: datetime | None = job.heartbeat_at
        with self._db.transaction():
            changed = self._db.execute(
                "UPDATE jobs SET status = 'failed', error = ?, finished_at = now() "
                "WHERE id = ? AND status = 'running' AND heartbeat_at IS NOT DISTINCT FROM ?",
                [error, job.id, last])
        return self.get(job.id) if changed else None

    def _keep_leases(self) -> None:
        """Start this store's lease renewal (PostgreSQL only), once."""
        if not self._db.shared or "_lease_thread" in self.__dict__:
            return
        self._lease_stop = threading.Event()
        self._lease_thread = threading.Thread(target=self._renew_leases, name="advisor-job-leases", daemon=True)
        self._lease_thread.start()

    def _renew_leases(self) -> None:
        while not self._lease_stop.wait(self.heartbeat_s):
            try:
                self.heartbeat()
            except Exception:  # noqa: BLE001 - a database hiccup must not end the renewal
                log.warning("could not renew the leases of %s's jobs; retrying in %.0fs", self.owner,
                            self.heartbeat_s, exc_info=True)

    def close(self) -> None:
        """Stop renewing leases (`Store.close`, before the database closes)."""
        if "_lease_thread" in self.__dict__:
            self._lease_stop.set()
            self._lease_thread.join(timeout=self.heartbeat_s + 5)

    # ---- coordination between replicas (`coordination`)

    def leadership(self, name: str) -> coordination.Leadership:
        """The lead for `name` (e.g. "scheduler") among the processes sharing this database."""
        return coordination.leadership(self._db, name)

    def notify(self, channel: str, payload: str = "") -> None:
        """Tell listening replicas (in the caller's transaction, if any: sent when it commits)."""
        coordination.notify(self._db, channel, payload)

    def listener(self, *channels: str) -> AbstractContextManager[coordination.Listener]:
        """Hear the notifications of `channels` (`with store.jobs.listener("release") as l: l.wait(5)`)."""
        return coordination.listener(self._db, *channels)

    # ---- training runs

    def create_training_run(
        self, *, method: str, run_dir: str, base_model: str, job_id: str | None = None,
        parent_release_id: str | None = None, data_hash: str | None = None, config: dict | None = None,
        run_id: str | None = None,
    ) -> TrainingRun:
        run_id = run_id or new_id()
        with self._db.transaction():
            self._db.execute(
                "INSERT INTO training_runs (id, job_id, method, status, run_dir, base_model, parent_release_id, "
                "data_hash, config) VALUES (?, ?, ?, 'queued', ?, ?, ?, ?, ?)",
                [run_id, job_id, method, run_dir, base_model, parent_release_id, data_hash,
                 json.dumps(config or {}, default=str)],
            )
        return self.get_training_run(run_id)

    def update_training_run(
        self, run_id: str, *, status: str | None = None, metrics: dict | None = None, error: str | None = None,
    ) -> TrainingRun:
        sets, params = [], []
        if status is not None:
            sets.append("status = ?")
            params.append(status)
            if status in ("succeeded", "failed", "cancelled"):
                sets.append("finished_at = now()")
        if metrics is not None:
            sets.append("metrics = ?")
            params.append(json.dumps(metrics, default=str))
        if error is not None:
            sets.append("error = ?")
            params.append(error)
        if sets:
            with self._db.transaction():
                self._db.execute(f"UPDATE training_runs SET {', '.join(sets)} WHERE id = ?", [*params, run_id])
        return self.get_training_run(run_id)

    def get_training_run(self, run_id: str) -> TrainingRun:
        row = self._db.read_one(f"SELECT {RUN_COLUMNS} FROM training_runs WHERE id = ?", [run_id])
        if row is None:
            raise NotFound(f"No training run {run_id!r}.")
        return run_from_row(row)

    def list_training_runs(self, *, limit: int = 50) -> list[TrainingRun]:
        rows = self._db.read(f"SELECT {RUN_COLUMNS} FROM training_runs ORDER BY created_at DESC LIMIT ?", [limit])
        return [run_from_row(r) for r in rows]

    def unfinished_training_runs(self) -> list[TrainingRun]:
        """Runs still queued or running by their row, oldest first (their process may be gone)."""
        rows = self._db.read(
            f"SELECT {RUN_COLUMNS} FROM training_runs WHERE status IN ('queued', 'running') ORDER BY created_at"
        )
        return [run_from_row(r) for r in rows]

    def last_training_run_at(self) -> datetime | None:
        """When the newest training run was created; None before the first."""
        row = self._db.read_one("SELECT max(created_at) FROM training_runs")
        return row[0] if row else None
