"""Where exports were written: one row per export written to a file (or to stdout), so that
forgetting a user can name the copies it cannot reach.

Design choices:
- A row records who (the audit actor), when, the path and what was written (format, and whether
  it was redacted for sharing), nothing of the contents: the row itself holds no person's data.
- Forgetting purges the copies under the data directory (`feedback.purge`); an export written
  elsewhere, or to stdout, is out of its reach, and `exports_since` is how it finds them to name.
- Append-only, like the audit log; portable SQL (PostgreSQL runs this module unchanged).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from store.db import Database
from store.records import new_id

STDOUT = "stdout"


@dataclass(frozen=True)
class ExportRecord:
    id: str
    actor: str
    what: str
    path: str
    row_count: int
    created_at: datetime


_COLUMNS = "id, actor, what, path, row_count, created_at"


class Exports(Database):
    def record_export(self, actor: str, what: str, path: str, row_count: int) -> ExportRecord:
        """Remember that `actor` wrote an export (`what`: its format) to `path` (absolute, or
        "stdout")."""
        export_id = new_id()
        with self.transaction():
            self._execute("INSERT INTO exports (id, actor, what, path, row_count) VALUES (?, ?, ?, ?, ?)",
                          [export_id, actor, what, path, int(row_count)])
        return ExportRecord(*self._read_one(f"SELECT {_COLUMNS} FROM exports WHERE id = ?", [export_id]))

    def exports_since(self, since: datetime) -> list[ExportRecord]:
        """Exports written at or after `since`, oldest first."""
        rows = self._read(f"SELECT {_COLUMNS} FROM exports WHERE created_at >= ? ORDER BY created_at, id", [since])
        return [ExportRecord(*r) for r in rows]
