"""The operator audit log: who did what to the loop and to people's data, and when.

Design choices:
- Append-only: there is no update or delete here. Forgetting a user leaves the audit rows that
  name them as the target of "forget" (the id is kept in `forgotten_users` anyway); an audit
  row holds ids and operator-supplied values, never what a user wrote.
- `details` is a JSON document, like a job's result: each action records what matters for it
  (force, job id, parameters, outcome) without a migration per action.
- The vocabulary of actions and actors is the service's (`deploy.audit`); the store only keeps rows.
- Portable SQL only: PostgreSQL runs this module unchanged.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from store.db import Database
from store.records import new_id


@dataclass(frozen=True)
class AuditEntry:
    id: str
    actor: str
    action: str
    target: str
    details: dict[str, Any] = field(default_factory=dict)
    created_at: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "time": self.created_at.isoformat() if self.created_at else None,
                "actor": self.actor, "action": self.action, "target": self.target, "details": self.details}


def _entry(row: tuple) -> AuditEntry:
    details = row[4]
    if isinstance(details, str):
        details = json.loads(details)
    return AuditEntry(id=row[0], actor=row[1], action=row[2], target=row[3], details=details or {},
                      created_at=row[5])


class Audit:
    """The operator audit log (append-only)."""

    def __init__(self, db: Database):
        self._db = db

    def record(self, actor: str, action: str, target: str = "", details: dict[str, Any] | None = None) -> AuditEntry:
        """Append one entry; returns it."""
        entry_id = new_id()
        with self._db.transaction():
            self._db.execute("INSERT INTO audit_log (id, actor, action, target, details) VALUES (?, ?, ?, ?, ?)",
                             [entry_id, actor, action, target or "", json.dumps(details or {}, default=str)])
        row = self._db.read_one("SELECT id, actor, action, target, details, created_at FROM audit_log WHERE id = ?",
                                [entry_id])
        return _entry(row)

    def list(self, limit: int = 100, action: str | None = None) -> list[AuditEntry]:
        """The latest entries, newest first; only one action's with `action`."""
        where, params = ("WHERE action = ? ", [action]) if action else ("", [])
        rows = self._db.read("SELECT id, actor, action, target, details, created_at FROM audit_log "
                             f"{where}ORDER BY created_at DESC, id LIMIT ?", [*params, int(limit)])
        return [_entry(r) for r in rows]
