"""Mined natural feedback (`feedback_events`) and the named watermarks extraction runs keep.

Design choices:
- An event is unique on (message, category, offsets, extractor): inserts skip the ones already
  stored, so a rerun over the same messages adds no duplicates, and report how many were new.
- A batch goes in as one statement (`Database._insert_rows`): extraction writes thousands of
  events per chunk, and DuckDB charges milliseconds a row for row-by-row inserts. Duplicates
  inside one batch are dropped first (the first wins), because one statement may not insert the
  same key twice.
- A watermark is a named integer (`extract:<extractor>` over `messages.seq`); an extraction run
  moves it in the same transaction as the events it wrote, so a chunk is never half-applied.
  `move_watermark` is a compare-and-set (one guarded UPDATE): of two runs that read the same
  value, in one process or in two replicas sharing PostgreSQL, only the first moves it (the
  second's UPDATE waits for the first's row lock, then finds the value changed).
"""

from __future__ import annotations

from collections.abc import Sequence

from store.db import Database
from store.records import FeedbackEvent

_EVENT_COLUMNS = ("id", "conversation_id", "message_id", "target_message_id", "category", "span", "span_start",
                  "span_end", "extractor", "extractor_version", "job_id")


class Events(Database):
    def add_feedback_events(self, events: Sequence[FeedbackEvent]) -> int:
        """Insert events, skipping ones already stored (same message, category, span, extractor).
        Returns how many were new. Joins the caller's transaction if there is one."""
        unique: dict[tuple, FeedbackEvent] = {}
        for e in events:
            unique.setdefault((e.message_id, e.category, e.span_start, e.span_end, e.extractor), e)
        if not unique:
            return 0
        columns = {c: [getattr(e, c) for e in unique.values()] for c in _EVENT_COLUMNS}
        with self.transaction():
            return self._insert_rows("feedback_events", _EVENT_COLUMNS, columns, skip_conflicts=True)

    def feedback_event_counts(self, job_id: str) -> list[tuple[str, str, int]]:
        """(category, extractor, events) for the events one job inserted."""
        rows = self._read(
            "SELECT category, extractor, count(*) FROM feedback_events WHERE job_id = ? GROUP BY category, extractor",
            [job_id],
        )
        return [(category, extractor, int(n)) for category, extractor, n in rows]

    def get_watermark(self, name: str) -> int:
        row = self._read_one("SELECT value FROM watermarks WHERE name = ?", [name])
        return int(row[0]) if row else 0

    def move_watermark(self, name: str, expected: int, value: int) -> bool:
        """Set the watermark to `value` if it still holds `expected`; False when another run moved
        it. Call it first in the chunk's transaction: it takes the row's lock."""
        with self.transaction():
            self._execute("INSERT INTO watermarks (name, value) VALUES (?, 0) ON CONFLICT (name) DO NOTHING", [name])
            return self._execute("UPDATE watermarks SET value = ?, updated_at = now() WHERE name = ? AND value = ?",
                                 [value, name, expected]) == 1

    def set_watermark(self, name: str, value: int) -> None:
        with self.transaction():
            self._execute(
                "INSERT INTO watermarks (name, value) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = now()",
                [name, value],
            )
