"""A person's data: their own copy, and deleting it: a user (forgetting), one conversation, or
everything past retention; and where exports were written. It spans the aggregates, so it holds
the users and conversations repositories.

Design choices:
- One statement list, `_delete_conversations`, for all three: a set of conversations (a subquery)
  and everything derived from them go — ratings and sibling choices on their messages, mined
  feedback events and operators' reviews of them, operators' marks on the guard's refusals, the messages (generation metadata lives on the answers' rows and goes with
  them). Counts per table come back for the person who asked and for the job row.
- One transaction each: a crash leaves the data wholly there or wholly gone.
- Forgetting also deletes the user row and remembers the id in `forgotten_users`, so no later
  write (a stale session, an import) can bring the user back, and training-set builds skip any
  row of theirs that got in regardless.
- What was deleted can survive in two places the rows do not reach: the database's freed space
  (`reclaim_space`: DuckDB does not overwrite freed blocks, so its file is rewritten; PostgreSQL
  runs VACUUM on the tables deletes touched), and copies outside the store (training snapshots,
  exports: `feedback.purge`, given the `Footprint` taken before; exports written elsewhere are
  known from `exports` and named to the operator).
- A person's own copy (`subject_data`) and forgetting them cover the same tables: every table
  with a user_id column is in `EXPORTED_TABLES` or in `NOT_EXPORTED` with the reason, and the
  tests fail when a new one is in neither. Sessions are exported without their id, a hash of
  the cookie's token.
- Releases trained on a forgotten user's conversations are known from `run_users`: weights
  cannot be un-trained, so the registry marks them and the operator decides.
- Exports written to a file (or to stdout) are recorded, one row each (who, when, the path, the
  format and whether it was redacted; nothing of the contents), so forgetting a user can name the
  copies it cannot reach: it purges those under the data directory (`feedback.purge`), and
  `exports_since` finds the others to name. Append-only, like the audit log.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import datetime

from store.conversations import Conversations
from store.db import Database
from store.records import new_id
from store.users import Users

# (what is counted, the statement); `{convs}` is the subquery naming the conversations.
_DERIVED = [
    ("ratings", "DELETE FROM ratings WHERE message_id IN (SELECT id FROM messages WHERE conversation_id IN ({convs}))"),
    ("sibling_choices", "DELETE FROM sibling_choices WHERE conversation_id IN ({convs})"),
    ("event_reviews", "DELETE FROM event_reviews WHERE event_id IN "
                      "(SELECT id FROM feedback_events WHERE conversation_id IN ({convs}))"),
    ("feedback_events", "DELETE FROM feedback_events WHERE conversation_id IN ({convs})"),
    ("safety_marks", "DELETE FROM safety_marks WHERE message_id IN "
                     "(SELECT id FROM messages WHERE conversation_id IN ({convs}))"),
    # Generation metadata lives on the answers' rows: counted here, deleted with them.
    ("generations", "SELECT count(*) FROM messages WHERE generation IS NOT NULL AND conversation_id IN ({convs})"),
    ("messages", "DELETE FROM messages WHERE conversation_id IN ({convs})"),
    ("conversations", "DELETE FROM conversations WHERE id IN ({convs})"),
]
# Every table deletes touch, for `reclaim_space` (the DELETE statements above, and forget_user's).
DELETED_TABLES = tuple(dict.fromkeys(
    [t for t, sql in _DERIVED if sql.startswith("DELETE")] + ["sessions", "consent_changes", "users"]))

# Every table with a user_id column whose rows go into the person's own export: conversations
# (with their messages, feedback events and generation metadata, `feedback.export`) and the
# sections of `subject_data`: (section, columns, FROM … WHERE, the user id bound once per `?`).
EXPORTED_TABLES = ("conversations", "ratings", "sibling_choices", "sessions", "consent_changes", "run_users")
_SUBJECT_SECTIONS = [
    ("ratings", "message_id, value, reasons, comment, created_at",
     "FROM ratings WHERE user_id = ? ORDER BY created_at, id"),
    ("sibling_choices", "conversation_id, parent_id, message_id, created_at",
     "FROM sibling_choices WHERE user_id = ? ORDER BY created_at, id"),
    ("feedback_events", "conversation_id, message_id, target_message_id, category, span, span_start, span_end, "
                        "extractor, extractor_version, created_at",
     "FROM feedback_events WHERE conversation_id IN (SELECT id FROM conversations WHERE user_id = ?) "
     "ORDER BY created_at, id"),
    ("sessions", "created_at, expires_at, last_seen_at, revoked_at, is_admin, user_agent",
     "FROM sessions WHERE user_id = ? ORDER BY created_at"),
    ("consent_history", "old_value, new_value, reason, created_at",
     "FROM consent_changes WHERE user_id = ? ORDER BY created_at, id"),
    ("training_runs", "run_id", "FROM run_users WHERE user_id = ? ORDER BY run_id"),
]
# Tables with a user_id column that the person's export leaves out, and why (the export says so).
NOT_EXPORTED = {
    "forgotten_users": "ids of users already deleted: a user who can ask for their data has no row there",
}
# Texts shorter than this are not searched for in copies: "thanks" is everybody's.
MIN_NEEDLE_CHARS = 24

STDOUT = "stdout"


@dataclass(frozen=True)
class ExportRecord:
    id: str
    actor: str
    what: str
    path: str
    row_count: int
    created_at: datetime


_EXPORT_COLUMNS = "id, actor, what, path, row_count, created_at"


@dataclass
class Footprint:
    """What identifies a set of conversations in copies outside the store."""

    user_ids: set[str] = field(default_factory=set)
    conversation_ids: set[str] = field(default_factory=set)
    message_ids: set[str] = field(default_factory=set)
    texts: set[str] = field(default_factory=set)  # the user's distinctive messages (≥ MIN_NEEDLE_CHARS)

    @property
    def ids(self) -> set[str]:
        return self.user_ids | self.conversation_ids | self.message_ids

    def __bool__(self) -> bool:
        return bool(self.ids)


class Privacy:
    """A person's data across the aggregates: their own copy, forgetting them, deleting a
    conversation or everything past retention, and where exports were written."""

    def __init__(self, db: Database, users: Users, conversations: Conversations):
        self._db, self._users, self._conversations = db, users, conversations

    def _footprint(self, convs: str, params: Sequence) -> Footprint:
        rows = self._db.read(f"SELECT c.user_id, c.id, m.id, m.content, m.role FROM conversations c "
                             f"LEFT JOIN messages m ON m.conversation_id = c.id WHERE c.id IN ({convs})", params)
        fp = Footprint()
        for user_id, conv_id, msg_id, content, role in rows:
            fp.user_ids.add(user_id)
            fp.conversation_ids.add(conv_id)
            if msg_id is not None:
                fp.message_ids.add(msg_id)
            # The person's own words only: a model gives the same answer to many people.
            if role == "user" and content and len(content.strip()) >= MIN_NEEDLE_CHARS:
                fp.texts.add(content.strip())
        return fp

    def _delete_conversations(self, convs: str, params: Sequence) -> dict[str, int]:
        """Delete the conversations the subquery names and everything derived from them; call
        inside a transaction."""
        counts: dict[str, int] = {}
        for table, template in _DERIVED:
            sql = template.format(convs=convs)
            args = list(params) * template.count("{convs}")
            if sql.startswith("SELECT"):
                row = self._db.read_one(sql, args)
                counts[table] = int(row[0]) if row else 0
            else:
                counts[table] = self._db.execute(sql, args)
        return counts

    def user_footprint(self, user_id: str) -> Footprint:
        fp = self._footprint("SELECT id FROM conversations WHERE user_id = ?", [user_id])
        fp.user_ids.add(user_id)
        return fp

    def forget_user(self, user_id: str) -> dict[str, int]:
        """Delete everything the user wrote and everything derived from it, in one transaction,
        and remember the id so it can never be written again. Returns rows deleted per table."""
        with self._db.transaction():
            self._users._uncache(user_id)
            counts = self._delete_conversations("SELECT id FROM conversations WHERE user_id = ?", [user_id])
            # Rows the user left outside their own conversations (none today; cheap insurance).
            counts["ratings"] += self._db.execute("DELETE FROM ratings WHERE user_id = ?", [user_id])
            counts["sibling_choices"] += self._db.execute("DELETE FROM sibling_choices WHERE user_id = ?", [user_id])
            counts["sessions"] = self._db.execute("DELETE FROM sessions WHERE user_id = ?", [user_id])
            counts["consent_changes"] = self._db.execute("DELETE FROM consent_changes WHERE user_id = ?", [user_id])
            counts["users"] = self._db.execute("DELETE FROM users WHERE id = ?", [user_id])
            self._db.execute("INSERT INTO forgotten_users (user_id) VALUES (?) ON CONFLICT DO NOTHING", [user_id])
        return counts

    def first_activity(self, user_id: str) -> datetime | None:
        """When the user's oldest conversation began (None: they have none): an export written
        before then cannot hold their conversations."""
        row = self._db.read_one("SELECT min(created_at) FROM conversations WHERE user_id = ?", [user_id])
        return row[0] if row else None

    def reclaim_space(self, *, full: bool = False) -> None:
        """After deleting people's rows: reclaim the space they held, the database's way
        (`Database.compact`; `full`: PostgreSQL rewrites the tables too)."""
        self._db.compact(DELETED_TABLES, full=full)

    def subject_data(self, user_id: str) -> dict[str, list[dict]]:
        """The person's rows outside their conversation trees, section by section (see
        `_SUBJECT_SECTIONS`): ratings, sibling choices, mined feedback events, sessions (no id),
        consent history, and the training runs that used their conversations."""
        out = {}
        for section, columns, source in _SUBJECT_SECTIONS:
            names = [c.strip() for c in columns.split(",")]
            rows = self._db.read(f"SELECT {columns} {source}", [user_id] * source.count("?"))
            out[section] = [dict(zip(names, row)) for row in rows]
        return out

    def conversation_footprint(self, conversation_id: str, user_id: str) -> Footprint:
        return self._footprint("SELECT id FROM conversations WHERE id = ? AND user_id = ?",
                               [conversation_id, user_id])

    def delete_conversation(self, conversation_id: str, user_id: str) -> dict[str, int]:
        """Delete one of the user's conversations and what was derived from it (NotFound if it is
        not theirs)."""
        self._conversations.get(conversation_id, user_id=user_id)
        with self._db.transaction():
            return self._delete_conversations("SELECT id FROM conversations WHERE id = ? AND user_id = ?",
                                              [conversation_id, user_id])

    def expired_footprint(self, before: datetime) -> Footprint:
        return self._footprint("SELECT id FROM conversations WHERE updated_at < ?", [before])

    def delete_conversations_before(self, before: datetime) -> dict[str, int]:
        """Retention: delete every conversation last active before `before`, and its derived rows."""
        with self._db.transaction():
            return self._delete_conversations("SELECT id FROM conversations WHERE updated_at < ?", [before])

    def record_run_users(self, run_id: str, user_ids: Sequence[str]) -> None:
        """Remember whose conversations a training run's set was built from."""
        if user_ids:
            with self._db.transaction():
                self._db.executemany("INSERT INTO run_users (run_id, user_id) VALUES (?, ?) ON CONFLICT DO NOTHING",
                                     [[run_id, u] for u in sorted(set(user_ids))])

    def forgotten_users_per_release(self) -> dict[str, int]:
        """Release id → how many users whose data its adapter was trained on have since been forgotten."""
        rows = self._db.read(
            "SELECT r.id, count(DISTINCT f.user_id) FROM releases r JOIN run_users u ON u.run_id = r.run_id "
            "JOIN forgotten_users f ON f.user_id = u.user_id GROUP BY r.id")
        return {release_id: int(n) for release_id, n in rows}

    # ---- where exports were written

    def record_export(self, actor: str, what: str, path: str, row_count: int) -> ExportRecord:
        """Remember that `actor` wrote an export (`what`: its format) to `path` (absolute, or
        "stdout")."""
        export_id = new_id()
        with self._db.transaction():
            self._db.execute("INSERT INTO exports (id, actor, what, path, row_count) VALUES (?, ?, ?, ?, ?)",
                             [export_id, actor, what, path, int(row_count)])
        return ExportRecord(*self._db.read_one(f"SELECT {_EXPORT_COLUMNS} FROM exports WHERE id = ?", [export_id]))

    def exports_since(self, since: datetime) -> list[ExportRecord]:
        """Exports written at or after `since`, oldest first."""
        rows = self._db.read(f"SELECT {_EXPORT_COLUMNS} FROM exports WHERE created_at >= ? ORDER BY created_at, id", [since])
        return [ExportRecord(*r) for r in rows]
