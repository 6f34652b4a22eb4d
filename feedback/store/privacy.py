"""Forgetting a user: everything they wrote and everything derived from it goes, at once.

Design choices:
- One transaction: a crash leaves the user wholly there or wholly gone.
- Derived rows go too: ratings of their answers (by anyone), sibling choices, mined feedback
  events in their conversations; generation metadata lives on the answers' rows and goes with
  them. Counts per table come back for the person who asked.
- The id is remembered in `forgotten_users`, so no later write (a stale session, an import) can
  bring the user back, and training-set builds skip any row of theirs that got in regardless.
"""

from __future__ import annotations

from feedback.store.users import Users

_OWN_CONVERSATIONS = "SELECT id FROM conversations WHERE user_id = ?"
_OWN_MESSAGES = f"SELECT id FROM messages WHERE conversation_id IN ({_OWN_CONVERSATIONS})"
# (what is counted, the statement); every `?` is the user id. A SELECT counts, a DELETE deletes.
_STEPS = [
    ("ratings", f"DELETE FROM ratings WHERE user_id = ? OR message_id IN ({_OWN_MESSAGES})"),
    ("sibling_choices", f"DELETE FROM sibling_choices WHERE user_id = ? OR message_id IN ({_OWN_MESSAGES})"),
    ("feedback_events", f"DELETE FROM feedback_events WHERE conversation_id IN ({_OWN_CONVERSATIONS})"),
    # Generation metadata lives on the answers' rows: counted here, deleted with them.
    ("generations", "SELECT count(*) FROM messages WHERE generation IS NOT NULL "
                    f"AND conversation_id IN ({_OWN_CONVERSATIONS})"),
    ("messages", f"DELETE FROM messages WHERE conversation_id IN ({_OWN_CONVERSATIONS})"),
    ("conversations", "DELETE FROM conversations WHERE user_id = ?"),
    ("sessions", "DELETE FROM sessions WHERE user_id = ?"),  # every cookie of theirs stops working
    ("users", "DELETE FROM users WHERE id = ?"),
]


class Privacy(Users):
    def forget_user(self, user_id: str) -> dict[str, int]:
        """Delete everything the user wrote and everything derived from it, in one transaction,
        and remember the id so it can never be written again. Returns rows deleted per table."""
        counts: dict[str, int] = {}
        with self.transaction():
            self._known_users.discard(user_id)
            for table, sql in _STEPS:
                params = [user_id] * sql.count("?")
                if sql.startswith("SELECT"):
                    row = self._read_one(sql, params)
                    counts[table] = int(row[0]) if row else 0
                else:
                    counts[table] = self._execute(sql, params)
            self._execute("INSERT INTO forgotten_users (user_id) VALUES (?) ON CONFLICT DO NOTHING", [user_id])
        return counts
