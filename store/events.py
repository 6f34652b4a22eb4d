"""Mined natural feedback (`feedback_events`), the named watermarks extraction runs keep, and
operators' reviews of mined events (`event_reviews`: is this event right?).

Design choices:
- An event is unique on (message, category, offsets, extractor): inserts skip the ones already
  stored, so a rerun over the same messages adds no duplicates, and report how many were new.
- A batch goes in as one statement (`Database.insert_rows`): extraction writes thousands of
  events per chunk, and DuckDB charges milliseconds a row for row-by-row inserts. Duplicates
  inside one batch are dropped first (the first wins), because one statement may not insert the
  same key twice.
- A watermark is a named integer (`extract:<extractor>` over `messages.seq`); an extraction run
  moves it in the same transaction as the events it wrote, so a chunk is never half-applied.
  `move_watermark` is a compare-and-set (one guarded UPDATE): of two runs that read the same
  value, in one process or in two replicas sharing PostgreSQL, only the first moves it (the
  second's UPDATE waits for the first's row lock, then finds the value changed).
- Reviews: a reviewer looks at a sampled event (the user's message with the span, the answer it
  reacts to, the request before it) and says "correct", "wrong_category" (with the right
  category) or "not_feedback". What the reviews add up to (precision per category and week, a
  gold file) is computed outside the store, in `feedback.extract.reviews`.
- Reviews are append-only, like ratings: a second review of an event is a new row and the latest
  counts, so a reviewer can overrule an earlier verdict and the history stays for the audit. A
  reviewer is the audit actor of whoever reviews (`deploy.audit.actor_of`), not a free string
  from the request.
- The review sample is drawn in the database by a salted hash of the event id (`md5(id ||
  salt)`): with a seed the same sample comes back (two reviewers can split it, a test can rely on
  it); without one, a fresh salt each time. Unreviewed events only, unless asked: a review is
  most useful where none exists yet. Portable SQL (`md5`, `||`, `NOT EXISTS`).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from store.db import Database
from store.records import FeedbackEvent, InvalidInput, NotFound, new_id
from store.taxonomy import CATEGORY_IDS

_EVENT_COLUMNS = ("id", "conversation_id", "message_id", "target_message_id", "category", "span", "span_start",
                  "span_end", "extractor", "extractor_version", "job_id")

VERDICTS = ("correct", "wrong_category", "not_feedback")


@dataclass(frozen=True)
class EventReview:
    id: str
    event_id: str
    reviewer: str
    verdict: str
    corrected_category: str | None
    created_at: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "event_id": self.event_id, "reviewer": self.reviewer, "verdict": self.verdict,
                "corrected_category": self.corrected_category,
                "created_at": self.created_at.isoformat() if self.created_at else None}


@dataclass(frozen=True)
class ReviewedEvent:
    """A mined event with its latest review."""

    event_id: str
    conversation_id: str
    message_id: str
    category: str
    span: str
    span_start: int
    span_end: int
    extractor: str
    mined_at: datetime
    verdict: str
    corrected_category: str | None
    reviewer: str
    reviewed_at: datetime
    extractor_version: str | None = None  # the version of the extractor that mined it

    @property
    def true_category(self) -> str | None:
        """What the reviewer says the span is: its own category, the corrected one, or none."""
        return {"correct": self.category, "wrong_category": self.corrected_category}.get(self.verdict)


_REVIEW_COLUMNS = "id, event_id, reviewer, verdict, corrected_category, created_at"
_SAMPLE_COLUMNS = ("id", "conversation_id", "message_id", "category", "span", "span_start", "span_end", "extractor",
                   "created_at", "message", "answer", "request", "reviews")


class Events:
    """Mined feedback events, the watermarks extraction keeps, and operators' reviews of events."""

    def __init__(self, db: Database):
        self._db = db

    def add(self, events: Sequence[FeedbackEvent]) -> int:
        """Insert events, skipping ones already stored (same message, category, span, extractor).
        Returns how many were new. Joins the caller's transaction if there is one."""
        unique: dict[tuple, FeedbackEvent] = {}
        for e in events:
            unique.setdefault((e.message_id, e.category, e.span_start, e.span_end, e.extractor), e)
        if not unique:
            return 0
        columns = {c: [getattr(e, c) for e in unique.values()] for c in _EVENT_COLUMNS}
        with self._db.transaction():
            return self._db.insert_rows("feedback_events", _EVENT_COLUMNS, columns, skip_conflicts=True)

    def counts(self, job_id: str) -> list[tuple[str, str, int]]:
        """(category, extractor, events) for the events one job inserted."""
        rows = self._db.read(
            "SELECT category, extractor, count(*) FROM feedback_events WHERE job_id = ? GROUP BY category, extractor",
            [job_id],
        )
        return [(category, extractor, int(n)) for category, extractor, n in rows]

    def get_watermark(self, name: str) -> int:
        row = self._db.read_one("SELECT value FROM watermarks WHERE name = ?", [name])
        return int(row[0]) if row else 0

    def move_watermark(self, name: str, expected: int, value: int) -> bool:
        """Set the watermark to `value` if it still holds `expected`; False when another run moved
        it. Call it first in the chunk's transaction: it takes the row's lock."""
        with self._db.transaction():
            self._db.execute("INSERT INTO watermarks (name, value) VALUES (?, 0) ON CONFLICT (name) DO NOTHING", [name])
            return self._db.execute("UPDATE watermarks SET value = ?, updated_at = now() WHERE name = ? AND value = ?",
                                    [value, name, expected]) == 1

    def set_watermark(self, name: str, value: int) -> None:
        with self._db.transaction():
            self._db.execute(
                "INSERT INTO watermarks (name, value) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = now()",
                [name, value],
            )

    # ---- operators' reviews of mined events

    def add_review(self, event_id: str, reviewer: str, verdict: str,
                   corrected_category: str | None = None) -> EventReview:
        """Record a verdict on an event. `corrected_category` is required for 'wrong_category'
        (and must differ from the event's), and refused for the other verdicts."""
        if verdict not in VERDICTS:
            raise InvalidInput(f"verdict must be one of {', '.join(VERDICTS)}, got {verdict!r}")
        corrected_category = corrected_category or None
        if (verdict == "wrong_category") != (corrected_category is not None):
            raise InvalidInput("give the right category exactly when the verdict is 'wrong_category'")
        if corrected_category is not None and corrected_category not in CATEGORY_IDS:
            raise InvalidInput(f"category must be one of {', '.join(CATEGORY_IDS)}, got {corrected_category!r}")
        if not reviewer:
            raise InvalidInput("a review needs a reviewer")
        review_id = new_id()
        with self._db.transaction():
            row = self._db.read_one("SELECT category FROM feedback_events WHERE id = ?", [event_id])
            if row is None:
                raise NotFound(f"no mined feedback event {event_id!r}")
            if corrected_category == row[0]:
                raise InvalidInput(f"the event is already {corrected_category!r}; that verdict is 'correct'")
            self._db.execute("INSERT INTO event_reviews (id, event_id, reviewer, verdict, corrected_category) "
                             "VALUES (?, ?, ?, ?, ?)", [review_id, event_id, reviewer, verdict, corrected_category])
        return self.event_reviews(event_id)[-1]

    def event_reviews(self, event_id: str) -> list[EventReview]:
        """Every review of an event, oldest first (the last one counts)."""
        rows = self._db.read(f"SELECT {_REVIEW_COLUMNS} FROM event_reviews WHERE event_id = ? ORDER BY created_at, id",
                             [event_id])
        return [EventReview(*r) for r in rows]

    def review_sample(self, limit: int = 20, *, category: str | None = None, extractor: str | None = None,
                      seed: int | str | None = None, include_reviewed: bool = False) -> list[dict[str, Any]]:
        """Mined events to review, drawn at random (repeatably with `seed`), each with the user's
        message (`message[span_start:span_end]` is the span), the answer it reacts to and the
        request before that answer, and how many reviews it already has."""
        salt = str(seed) if seed is not None else secrets.token_hex(8)
        where, params = ["1 = 1"], []
        if category:
            where.append("e.category = ?")
            params.append(category)
        if extractor:
            where.append("e.extractor = ?")
            params.append(extractor)
        if not include_reviewed:
            where.append("NOT EXISTS (SELECT 1 FROM event_reviews r WHERE r.event_id = e.id)")
        rows = self._db.read(
            "SELECT e.id, e.conversation_id, e.message_id, e.category, e.span, e.span_start, e.span_end, e.extractor, "
            "e.created_at, m.content, a.content, q.content, "
            "(SELECT count(*) FROM event_reviews r WHERE r.event_id = e.id) "
            "FROM feedback_events e JOIN messages m ON m.id = e.message_id "
            "LEFT JOIN messages a ON a.id = e.target_message_id LEFT JOIN messages q ON q.id = a.parent_id "
            f"WHERE {' AND '.join(where)} ORDER BY md5(e.id || ?), e.id LIMIT ?",
            [*params, salt, int(limit)])
        return [dict(zip(_SAMPLE_COLUMNS, r)) for r in rows]

    def reviewed_events(self, *, extractor: str | None = None) -> list[ReviewedEvent]:
        """Every reviewed event with its latest review, oldest mined first."""
        where, params = ("WHERE e.extractor = ? ", [extractor]) if extractor else ("", [])
        rows = self._db.read(
            "SELECT e.id, e.conversation_id, e.message_id, e.category, e.span, e.span_start, e.span_end, e.extractor, "
            "e.created_at, r.verdict, r.corrected_category, r.reviewer, r.created_at, e.extractor_version "
            f"FROM event_reviews r JOIN feedback_events e ON e.id = r.event_id {where}"
            "ORDER BY e.created_at, e.id, r.created_at, r.id", params)
        latest: dict[str, ReviewedEvent] = {}
        for row in rows:  # ordered by review time within an event: the last one wins
            latest[row[0]] = ReviewedEvent(*row)
        return list(latest.values())
