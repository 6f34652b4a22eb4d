"""The data layer: every turn, rating, mined feedback event, job, training run, evaluation,
release, session and audit entry, behind one typed API, grouped by aggregate.

    from store import Store, NotFound, Message
    with Store(path) as store:            # a DuckDB file (the default), or
    with Store("postgresql://…") as store:  # a PostgreSQL database several replicas share
        conv, question = store.conversations.start(user_id, "How do I ...?")
        store.jobs.claim(job_id)

`Store` holds one repository per aggregate, each over the same `Database`:
- `users`: users, training consent and its history, web sessions, log-in attempts (`users`);
- `conversations`: conversations, messages (with generation metadata), ratings, kept siblings;
- `events`: mined feedback events, extraction watermarks, operators' reviews of events;
- `jobs`: jobs and their leases, training runs, coordination between replicas (`coordination`);
- `releases`: releases, the gate's decisions, evaluation results;
- `audit`: the operator audit log;
- `privacy`: a person's data across the others: their copy, forgetting, retention, exports written;
- `safety`: operators' marks on the safety guard's refusals.
The top level keeps the lifecycle: open (migrations run on open), `close`, `transaction`,
`schema_version`, `stats`, and `path` / `dialect` / `shared`.

Layout:
- `db`: the backend-neutral `Database` — `transaction()`, migrations (`migrations`, with each
  one's SQL per dialect in `sql_duckdb` / `sql_postgres`), and the SQL helpers the repositories
  go through — over an engine: `duck` (the DuckDB file: a held lock becomes `StoreLocked` naming
  the holder) or `pg` (PostgreSQL: a pool, commit-safe seq bounds), with `mirror` (DuckDB
  analytics over PostgreSQL data) and `coordination` (leader lock, notifications).
- `records`: the frozen records, the errors, `clean_text` and `new_id`; `attributes` and
  `taxonomy`: the vocabularies stored with answers and mined events.
- Read-only functions for bulk readers: `reports` (the operator's numbers), `analytics`
  (extraction windows, training-set material, exports, the trainer's trigger), `outcomes` (the
  canary's per-answer outcomes) and `safety`'s guard decisions. Their SQL is DuckDB's analytics
  dialect; the repositories' SQL is portable to PostgreSQL.

Design choices:
- Composition, not inheritance: a repository is a class holding the shared `Database` (and the
  repositories it calls: conversations ensure their user; privacy spans users and
  conversations), so each aggregate's SQL lives in one module and each API is small enough to
  read. Callers still pass one `Store` around. A method does not repeat its repository's noun:
  `store.releases.get(id)`, `store.jobs.create(...)`, `store.audit.record(...)`.
- No public raw-SQL entry point: the `Database` is private to the package (`Store._db`), callers
  get typed functions and records, so the backend can change under them. `transaction()` groups
  typed calls of any repositories; it hands out nothing.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

from store import reports
from store.audit import Audit, AuditEntry
from store.conversations import Conversations
from store.db import Database
from store.events import VERDICTS, EventReview, Events, ReviewedEvent
from store.jobs import Jobs
from store.privacy import ExportRecord, Privacy
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
from store.safety import SafetyMark, SafetyMarks
from store.users import Session, Users


class Store:
    """Typed read/write API over one DuckDB file or a PostgreSQL database, one repository per
    aggregate. Safe for many threads of one process; on PostgreSQL also for many processes.
    `options` are PostgreSQL's (`pg.PostgresEngine`)."""

    def __init__(self, target: str | Path, **options: Any):
        self._db = Database(target, **options)
        self.path = self._db.path  # a file, or the URL without its password
        self.dialect: str = self._db.dialect
        self.users = Users(self._db)
        self.conversations = Conversations(self._db, self.users)
        self.events = Events(self._db)
        self.jobs = Jobs(self._db)
        self.releases = Releases(self._db)
        self.audit = Audit(self._db)
        self.privacy = Privacy(self._db, self.users, self.conversations)
        self.safety = SafetyMarks(self._db, self.conversations)

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self.jobs.close()  # stop renewing job leases before the connections go
        self._db.close()

    @property
    def shared(self) -> bool:
        """True when other processes may use the same database (PostgreSQL)."""
        return self._db.shared

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One write transaction around typed calls of any repositories; commits on success,
        rolls back on any error. Inside another transaction of this thread it joins that one."""
        with self._db.transaction():
            yield

    def schema_version(self) -> int:
        """The newest migration applied (they all are, on open)."""
        return self._db.schema_version()

    def stats(self) -> dict[str, Any]:
        """Rows per table, likes/dislikes, schema version, live release (`reports.stats`)."""
        return reports.stats(self)


__all__ = [
    "MAX_MESSAGE_CHARS", "VERDICTS", "AuditEntry", "EventReview", "ExportRecord", "ReviewedEvent", "Conversation",
    "FeedbackEvent", "GenerationMeta", "InvalidInput", "Job", "Message", "MessageNode", "NotFound", "Rating",
    "Release", "SafetyMark", "Session", "Store", "StoreError", "StoreLocked", "TrainingRun", "User",
    "clean_text", "new_id",
]
