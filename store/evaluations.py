"""Evaluation results: one row per (subject, suite, metric) measurement, append-only.

Design choices:
- A subject is whatever was measured: a release id, a run id or a model path. Measuring again
  appends; readers take the latest value of each (suite, metric), so the history stays.
- "Latest per key" is a `row_number()` window, not DuckDB's `arg_max`: PostgreSQL runs it too.
"""

from __future__ import annotations

import json

from store.db import Database
from store.records import new_id


class Evaluations(Database):
    def add_eval_results(
        self, subject: str, suite: str, metrics: dict[str, float], *, job_id: str | None = None,
        details: dict | None = None,
    ) -> None:
        with self.transaction():
            self._executemany(
                "INSERT INTO eval_results (id, job_id, subject, suite, metric, value, details) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [[new_id(), job_id, subject, suite, name, float(value), json.dumps(details or {}, default=str)]
                 for name, value in metrics.items()],
            )

    def eval_results(self, subject: str) -> dict[str, dict[str, float]]:
        """Latest value of each (suite, metric) for a subject."""
        rows = self._read(
            "SELECT suite, metric, value FROM ("
            " SELECT suite, metric, value,"
            "  row_number() OVER (PARTITION BY suite, metric ORDER BY created_at DESC) AS nth"
            " FROM eval_results WHERE subject = ?) AS latest WHERE nth = 1",
            [subject],
        )
        out: dict[str, dict[str, float]] = {}
        for suite, metric, value in rows:
            out.setdefault(suite, {})[metric] = value
        return out
