"""Jobs: one row per scheduled or manual run (extraction, dataset, training, evaluation, gate,
cycle, ...), its status, parameters, result and error.

Design choices:
- Status moves queued → running → succeeded | failed | skipped | cancelled; `running` stamps
  `started_at` once, a terminal status stamps `finished_at`, both in the database's clock.
- `params` and `result` are JSON documents: each kind of job records what it needs without a
  migration per kind.
- A cycle's steps are jobs whose `parent_id` is the cycle's job.
- Several replicas may share the table (PostgreSQL): a job created `queued` is run by whoever
  claims it, and `claim_job` is one guarded UPDATE (`WHERE status = 'queued'`), so of two
  replicas claiming at once exactly one gets the row (PostgreSQL re-checks the condition on the
  row the first one changed, and the second UPDATE matches nothing).
"""

from __future__ import annotations

import json

from feedback.store.db import Database
from feedback.store.records import JOB_COLUMNS, Job, NotFound, job_from_row, new_id

TERMINAL = ("succeeded", "failed", "skipped", "cancelled")


class Jobs(Database):
    def create_job(
        self, kind: str, *, trigger: str = "manual", params: dict | None = None,
        status: str = "running", parent_id: str | None = None,
    ) -> Job:
        job_id = new_id()
        with self.transaction():
            self._execute(
                "INSERT INTO jobs (id, kind, trigger, status, params, parent_id, started_at) "
                "VALUES (?, ?, ?, ?, ?, ?, CASE WHEN ? = 'running' THEN now() END)",
                [job_id, kind, trigger, status, json.dumps(params or {}), parent_id, status],
            )
        return self.get_job(job_id)

    def update_job(
        self, job_id: str, *, status: str | None = None, result: dict | None = None, error: str | None = None,
    ) -> Job:
        """Change a job's status/result; a terminal status stamps `finished_at`."""
        sets, params = [], []
        if status is not None:
            sets.append("status = ?")
            params.append(status)
            if status == "running":
                sets.append("started_at = coalesce(started_at, now())")
            if status in TERMINAL:
                sets.append("finished_at = now()")
        if result is not None:
            sets.append("result = ?")
            params.append(json.dumps(result, default=str))
        if error is not None:
            sets.append("error = ?")
            params.append(error)
        if sets:
            with self.transaction():
                self._execute(f"UPDATE jobs SET {', '.join(sets)} WHERE id = ?", [*params, job_id])
        return self.get_job(job_id)

    def get_job(self, job_id: str) -> Job:
        row = self._read_one(f"SELECT {JOB_COLUMNS} FROM jobs WHERE id = ?", [job_id])
        if row is None:
            raise NotFound(f"No job {job_id!r}.")
        return job_from_row(row)

    def list_jobs(self, *, kind: str | None = None, limit: int = 50) -> list[Job]:
        """The newest jobs first, of one kind or all."""
        sql = f"SELECT {JOB_COLUMNS} FROM jobs"
        params: list = []
        if kind:
            sql += " WHERE kind = ?"
            params.append(kind)
        sql += " ORDER BY created_at DESC LIMIT ?"
        return [job_from_row(r) for r in self._read(sql, [*params, limit])]

    def child_jobs(self, parent_id: str) -> list[Job]:
        """The steps of a cycle (jobs whose parent is `parent_id`), oldest first."""
        rows = self._read(f"SELECT {JOB_COLUMNS} FROM jobs WHERE parent_id = ? ORDER BY created_at", [parent_id])
        return [job_from_row(r) for r in rows]

    def claim_job(self, job_id: str) -> Job | None:
        """Move a queued job to running for this caller; None when someone else claimed it first."""
        row = self._returning(
            "UPDATE jobs SET status = 'running', started_at = coalesce(started_at, now()) "
            f"WHERE id = ? AND status = 'queued' RETURNING {JOB_COLUMNS}", [job_id])
        return job_from_row(row) if row else None

    def queued_jobs(self, *, limit: int = 20) -> list[Job]:
        """Jobs waiting to be claimed, oldest first."""
        rows = self._read(f"SELECT {JOB_COLUMNS} FROM jobs WHERE status = 'queued' ORDER BY created_at LIMIT ?",
                          [limit])
        return [job_from_row(r) for r in rows]

    def running_job(self, kind: str, *, exclude: str | None = None) -> Job | None:
        """The newest running job of this kind other than `exclude`, if any."""
        row = self._read_one(
            f"SELECT {JOB_COLUMNS} FROM jobs WHERE kind = ? AND status = 'running' AND id <> ? "
            "ORDER BY created_at DESC LIMIT 1",
            [kind, exclude or ""],
        )
        return job_from_row(row) if row else None
