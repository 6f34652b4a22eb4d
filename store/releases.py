"""Releases: what the service can answer with (a base model, or a trained adapter on it), the
gate's decision about each, and the evaluation results (one row per subject, suite and metric).

Design choices:
- Status is candidate → live | rejected, and live → retired when another goes live. Making one
  live retires the previous live one in the same transaction, so there is never zero or two live
  releases (once the first exists). On PostgreSQL two promotions on two replicas would each
  retire only the live release they saw, so that transaction first takes a lock for the purpose
  (`Database.xact_lock`, an advisory lock released at commit; DuckDB's write lock does it already).
- Creating a release whose id exists leaves that one as it is: replicas starting together each
  create the base model's release (`base-<model>`), and the first one wins.
- `decision` is the gate's document (metrics, comparisons, reasons), JSON like a job's result.
- A status change is announced on the "release" channel in the same transaction (sent when it
  commits), so replicas sharing a PostgreSQL store hot-swap within a moment (`coordination.py`).
- Evaluation results are append-only: a subject is whatever was measured (a release id, a run id
  or a model path); measuring again appends, and readers take the latest value of each (suite,
  metric) with a `row_number()` window (PostgreSQL runs it too), so the history stays.
"""

from __future__ import annotations

import json

from store import coordination
from store.db import Database
from store.records import RELEASE_COLUMNS, NotFound, Release, new_id, release_from_row


class Releases:
    """Releases and the gate's decisions, and the evaluation results they are judged by."""

    def __init__(self, db: Database):
        self._db = db

    def create(
        self, *, base_model: str, adapter_path: str | None, run_id: str | None = None,
        status: str = "candidate", decision: dict | None = None, release_id: str | None = None,
    ) -> Release:
        release_id = release_id or new_id()
        with self._db.transaction():
            self._db.execute(
                "INSERT INTO releases (id, run_id, adapter_path, base_model, status, decision, promoted_at) "
                "VALUES (?, ?, ?, ?, ?, ?, CASE WHEN ? = 'live' THEN now() END) ON CONFLICT (id) DO NOTHING",
                [release_id, run_id, adapter_path, base_model, status, json.dumps(decision or {}, default=str),
                 status],
            )
        return self.get(release_id)

    def get(self, release_id: str) -> Release:
        row = self._db.read_one(f"SELECT {RELEASE_COLUMNS} FROM releases WHERE id = ?", [release_id])
        if row is None:
            raise NotFound(f"No release {release_id!r}.")
        return release_from_row(row)

    def list(self, *, limit: int = 50) -> list[Release]:
        rows = self._db.read(f"SELECT {RELEASE_COLUMNS} FROM releases ORDER BY created_at DESC LIMIT ?", [limit])
        return [release_from_row(r) for r in rows]

    def live(self) -> Release | None:
        row = self._db.read_one(
            f"SELECT {RELEASE_COLUMNS} FROM releases WHERE status = 'live' ORDER BY promoted_at DESC LIMIT 1"
        )
        return release_from_row(row) if row else None

    def base(self, base_model: str) -> Release | None:
        """The release that serves `base_model` without an adapter: the live one if it is live,
        else the one promoted last; None when there is none."""
        row = self._db.read_one(
            f"SELECT {RELEASE_COLUMNS} FROM releases WHERE adapter_path IS NULL AND base_model = ? "
            "ORDER BY status = 'live' DESC, promoted_at DESC NULLS LAST LIMIT 1",
            [base_model],
        )
        return release_from_row(row) if row else None

    def set_status(self, release_id: str, status: str, *, decision: dict | None = None) -> Release:
        """Change a release's status. Making one live retires the previous live one in the same
        transaction, so there is never zero or two live releases."""
        with self._db.transaction():
            if status == "live":
                self._db.xact_lock("releases:live")
                self._db.execute(
                    "UPDATE releases SET status = 'retired', retired_at = now() WHERE status = 'live' AND id <> ?",
                    [release_id],
                )
            stamp = {"live": ", promoted_at = now(), retired_at = NULL", "retired": ", retired_at = now()"}
            self._db.execute(f"UPDATE releases SET status = ?{stamp.get(status, '')} WHERE id = ?", [status, release_id])
            if decision is not None:
                self._db.execute("UPDATE releases SET decision = ? WHERE id = ?",
                                 [json.dumps(decision, default=str), release_id])
            coordination.notify(self._db, "release", release_id)
        return self.get(release_id)

    # ---- evaluation results

    def add_eval_results(
        self, subject: str, suite: str, metrics: dict[str, float], *, job_id: str | None = None,
        details: dict | None = None,
    ) -> None:
        with self._db.transaction():
            self._db.executemany(
                "INSERT INTO eval_results (id, job_id, subject, suite, metric, value, details) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [[new_id(), job_id, subject, suite, name, float(value), json.dumps(details or {}, default=str)]
                 for name, value in metrics.items()],
            )

    def eval_results(self, subject: str) -> dict[str, dict[str, float]]:
        """Latest value of each (suite, metric) for a subject."""
        rows = self._db.read(
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
