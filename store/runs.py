"""Training runs: what was trained, from which data (its hash), on which base and parent
release, with which configuration, and how it went.

Design choices:
- The run's process never opens the database (DuckDB's single-process lock): it writes progress
  and artifacts into its run directory, and the service copies status and metrics into this row
  when it polls. So a row is created `queued` and moved along by the service alone.
- `config` and `metrics` are JSON documents, like a job's params and result.
"""

from __future__ import annotations

import json
from datetime import datetime

from store.db import Database
from store.records import RUN_COLUMNS, NotFound, TrainingRun, new_id, run_from_row


class Runs(Database):
    def create_training_run(
        self, *, method: str, run_dir: str, base_model: str, job_id: str | None = None,
        parent_release_id: str | None = None, data_hash: str | None = None, config: dict | None = None,
        run_id: str | None = None,
    ) -> TrainingRun:
        run_id = run_id or new_id()
        with self.transaction():
            self._execute(
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
            with self.transaction():
                self._execute(f"UPDATE training_runs SET {', '.join(sets)} WHERE id = ?", [*params, run_id])
        return self.get_training_run(run_id)

    def get_training_run(self, run_id: str) -> TrainingRun:
        row = self._read_one(f"SELECT {RUN_COLUMNS} FROM training_runs WHERE id = ?", [run_id])
        if row is None:
            raise NotFound(f"No training run {run_id!r}.")
        return run_from_row(row)

    def list_training_runs(self, *, limit: int = 50) -> list[TrainingRun]:
        rows = self._read(f"SELECT {RUN_COLUMNS} FROM training_runs ORDER BY created_at DESC LIMIT ?", [limit])
        return [run_from_row(r) for r in rows]

    def unfinished_training_runs(self) -> list[TrainingRun]:
        """Runs still queued or running by their row, oldest first (their process may be gone)."""
        rows = self._read(
            f"SELECT {RUN_COLUMNS} FROM training_runs WHERE status IN ('queued', 'running') ORDER BY created_at"
        )
        return [run_from_row(r) for r in rows]

    def last_training_run_at(self) -> datetime | None:
        """When the newest training run was created; None before the first."""
        row = self._read_one("SELECT max(created_at) FROM training_runs")
        return row[0] if row else None
