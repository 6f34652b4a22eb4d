"""Users: anonymous ones made on first sight, named ones with a password hash, forgotten ones.

Design choices:
- `ensure_user` runs on every new conversation, so the ids known to exist are cached in the
  process: the turn path (benchmarked) skips two lookups. `forget_user` removes an id from the
  cache before deleting, under the write lock, so a forgotten user cannot slip back in. On a
  shared (PostgreSQL) store another replica may forget the user, which this process's cache would
  not hear of, so there every call checks (two lookups per new conversation, not per turn).
- A forgotten id stays in `forgotten_users` forever; writing for it again is refused.
- Training consent is a column on the user (what training-set builds read) plus a history row per
  change (`consent_changes`: old value, new value, why), written in the same transaction, so the
  person's export can show when and why it changed. `stricter_consent` is the one rule for
  merging two choices: opted out beats the default, which beats opted in.
"""

from __future__ import annotations

from datetime import datetime
from pathlib import Path
from typing import Any

from store.db import Database
from store.records import USER_COLUMNS, InvalidInput, NotFound, User, clean_text, new_id


class Users(Database):
    def __init__(self, path: str | Path, **options: Any):
        # Users whose row is known to exist (see the module docstring).
        self._known_users: set[str] = set()
        super().__init__(path, **options)

    def ensure_user(self, user_id: str, *, name: str | None = None) -> None:
        """Create the user row on first sight (anonymous users get one per session cookie)."""
        if user_id in self._known_users and not self.shared:
            return
        with self.transaction():
            if self._read_one("SELECT 1 FROM forgotten_users WHERE user_id = ?", [user_id]):
                # A forgotten user id never comes back; the caller must mint a new one.
                raise InvalidInput("This user's data was deleted; start a new session.")
            if not self._read_one("SELECT 1 FROM users WHERE id = ?", [user_id]):
                # ON CONFLICT: the same user's first two requests may reach two replicas at once.
                self._execute("INSERT INTO users (id, name) VALUES (?, ?) ON CONFLICT (id) DO NOTHING", [user_id, name])
        self._known_users.add(user_id)

    def create_user(self, name: str, *, password_hash: str | None = None, is_admin: bool = False) -> User:
        name = clean_text(name, what="user name", max_chars=100)
        if self.get_user_by_name(name):
            raise InvalidInput(f"A user named {name!r} already exists.")
        user_id = new_id()
        with self.transaction():
            self._execute(
                "INSERT INTO users (id, name, password_hash, is_admin) VALUES (?, ?, ?, ?)",
                [user_id, name, password_hash, is_admin],
            )
        return self.get_user(user_id)

    def get_user(self, user_id: str) -> User:
        row = self._read_one(f"SELECT {USER_COLUMNS} FROM users WHERE id = ?", [user_id])
        if row is None:
            raise NotFound(f"No user {user_id!r}.")
        return User(*row)

    def get_user_by_name(self, name: str) -> User | None:
        row = self._read_one(f"SELECT {USER_COLUMNS} FROM users WHERE name = ?", [name])
        return User(*row) if row else None

    def is_forgotten(self, user_id: str) -> bool:
        return self._read_one("SELECT 1 FROM forgotten_users WHERE user_id = ?", [user_id]) is not None

    def set_training_consent(self, user_id: str, consent: bool | None, *, reason: str = "set by the user") -> None:
        """Record whether the user's conversations may train the advisor (None: the default), and
        the change in the user's consent history (nothing when the value stays the same)."""
        with self.transaction():
            self.ensure_user(user_id)
            self._change_consent(user_id, consent, reason)

    def _change_consent(self, user_id: str, consent: bool | None, reason: str) -> bool | None:
        """Set the column and append the history row, inside the caller's transaction; returns the
        old value."""
        old = self.training_consent(user_id)
        if old != consent:
            self._execute("UPDATE users SET training_consent = ? WHERE id = ?", [consent, user_id])
            self._execute("INSERT INTO consent_changes (id, user_id, old_value, new_value, reason) "
                          "VALUES (?, ?, ?, ?, ?)", [new_id(), user_id, old, consent, reason])
        return old

    def consent_history(self, user_id: str) -> list[tuple[bool | None, bool | None, str, datetime]]:
        """(old value, new value, reason, when) of every change of the user's consent, oldest first."""
        return [tuple(r) for r in self._read(  # type: ignore[misc]
            "SELECT old_value, new_value, reason, created_at FROM consent_changes WHERE user_id = ? "
            "ORDER BY created_at, id", [user_id])]

    def training_consent(self, user_id: str) -> bool | None:
        row = self._read_one("SELECT training_consent FROM users WHERE id = ?", [user_id])
        return row[0] if row else None


def stricter_consent(a: bool | None, b: bool | None) -> bool | None:
    """The stricter of two consent choices, whatever the deployment's default: an opt-out (False)
    wins, then no choice (None: the default, which may be "no"), then an opt-in (True)."""
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True
