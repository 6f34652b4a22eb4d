"""The conversation store: every turn, rating, mined feedback event, job, training run, evaluation
and release, behind one typed API.

    from store import Store, NotFound, Message
    with Store(path) as store:            # a DuckDB file (the default), or
    with Store("postgresql://…") as store:  # a PostgreSQL database several replicas share
        conv, question = store.start_conversation(user_id, "How do I ...?")

Layout:
- `db`: the backend-neutral `Database` — `transaction()`, migrations (`migrations`, with each
  one's SQL per dialect in `sql_duckdb` / `sql_postgres`), and the private SQL helpers the rest
  of the package goes through — over an engine: `duck` (the DuckDB file: a held lock becomes
  `StoreLocked` naming the holder) or `pg` (PostgreSQL: a pool, commit-safe seq bounds), with
  `mirror` (DuckDB analytics over PostgreSQL data) and `coordination` (leader lock, notifications).
- `records`: the frozen records, the errors, `clean_text` and `new_id`.
- One module per aggregate, each a mixin of `Store`: `users`, `conversations` (and messages),
  `ratings` (and sibling choices), `events` (mined feedback, watermarks), `jobs`, `runs`,
  `evaluations`, `releases`, `privacy` (forgetting a user), `sessions` (server-side sessions and
  log-in attempts), `audit` (the operator audit log), `reviews` (operators' verdicts on mined
  feedback events), `exports` (where exports were written), `safety` (operators' marks on the
  safety guard's refusals, and its decisions).
- Read-only functions for bulk readers: `reports` (the operator's numbers) and `analytics`
  (extraction windows, training-set material, exports, the trainer's trigger). Their SQL is
  DuckDB's analytics dialect; the aggregates' SQL is portable to PostgreSQL.

Design choices:
- No public raw-SQL entry point: callers outside this package get typed functions and records,
  so the backend can change under them. `transaction()` groups typed calls; it hands out nothing.
- Mixins rather than one class per table behind a facade: callers keep one `Store` to pass
  around, and each aggregate's SQL still lives in one module of its own.
"""

from __future__ import annotations

from typing import Any

from store import reports
from store.audit import Audit, AuditEntry
from store.evaluations import Evaluations
from store.events import Events
from store.exports import ExportRecord, Exports
from store.jobs import Jobs
from store.privacy import Privacy
from store.ratings import Ratings
from store.records import (
    MAX_MESSAGE_CHARS,
    Conversation,
    FeedbackEvent,
    GenerationMeta,
    InvalidInput,
    Job,
    Message,
    MessageNode,
    NotFound,
    Rating,
    Release,
    StoreError,
    StoreLocked,
    TrainingRun,
    User,
    clean_text,
    new_id,
)
from store.releases import Releases
from store.reviews import VERDICTS, EventReview, ReviewedEvent, Reviews
from store.runs import Runs
from store.safety import SafetyMark, SafetyMarks
from store.sessions import Session, Sessions


class Store(Privacy, Ratings, Events, Jobs, Runs, Evaluations, Releases, Sessions, Audit, Reviews, Exports, SafetyMarks):
    """Typed read/write API over one DuckDB file or a PostgreSQL database. Safe for many threads
    of one process; on PostgreSQL also for many processes."""

    def stats(self) -> dict[str, Any]:
        """Rows per table, likes/dislikes, schema version, live release (`reports.stats`)."""
        return reports.stats(self)


__all__ = [
    "MAX_MESSAGE_CHARS", "VERDICTS", "AuditEntry", "EventReview", "ExportRecord", "ReviewedEvent", "Conversation", "FeedbackEvent", "GenerationMeta", "InvalidInput", "Job", "Message",
    "MessageNode", "NotFound", "Rating", "Release", "SafetyMark", "Session", "Store", "StoreError", "StoreLocked", "TrainingRun", "User",
    "clean_text", "new_id",
]
