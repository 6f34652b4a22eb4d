"""Sessions and sign-in attempts: the server side of a session cookie, and what the log-in
throttle remembers.

Design choices:
- One row per session, keyed by a hash of the cookie's session token (the service hashes it, this
  module never sees the token): reading the table (a backup, a support query) hands out nothing
  that signs anyone in.
- The caller passes every time (`now`, `expires_at`); the database's clock is never asked. The
  service decides expiry with one clock, and tests can move that clock.
- Revoking is an upsert: a guest's session has no row until the guest first writes something (the
  service creates it lazily), and a revocation must stick all the same, so it writes a revoked row.
  A revoked row keeps its `expires_at` (the cookie's own end), so pruning expired rows can never
  bring a revoked cookie back.
- Changing a password and revoking the user's other sessions is one transaction: there is no
  moment where the new password is set and a thief's session still counts.
- Forgetting a user deletes their sessions (`privacy._STEPS`), in the same transaction as the rest.
- Log-in attempts are keyed by the lower-cased name tried, whether or not such a user exists, so
  the throttle answers the same for unknown names (no user enumeration).
- Portable SQL only (`?`, ON CONFLICT): PostgreSQL runs this module unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from store.db import Database
from store.records import new_id


@dataclass(frozen=True)
class Session:
    id: str  # the hash of the cookie's token
    user_id: str
    is_admin: bool
    created_at: datetime
    expires_at: datetime
    last_seen_at: datetime
    revoked_at: datetime | None
    user_agent: str
    user_name: str | None  # joined from users: None for guests and for the settings' admin


_SESSION_COLUMNS = ("s.id, s.user_id, s.is_admin, s.created_at, s.expires_at, s.last_seen_at, s.revoked_at, "
                    "s.user_agent, u.name")
_SESSION_FROM = "FROM sessions s LEFT JOIN users u ON u.id = s.user_id"


class Sessions(Database):
    # ---- sessions

    def create_session(self, session_id: str, user_id: str, *, expires_at: datetime, now: datetime,
                       created_at: datetime | None = None, is_admin: bool = False, user_agent: str = "") -> bool:
        """Write a session row; False when one with this id exists already (left as it is)."""
        with self.transaction():
            return self._execute(
                "INSERT INTO sessions (id, user_id, is_admin, created_at, expires_at, last_seen_at, user_agent) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                [session_id, user_id, is_admin, created_at or now, expires_at, now, user_agent[:200]],
            ) > 0

    def get_session(self, session_id: str) -> Session | None:
        row = self._read_one(f"SELECT {_SESSION_COLUMNS} {_SESSION_FROM} WHERE s.id = ?", [session_id])
        return Session(*row) if row else None

    def list_sessions(self, user_id: str, *, now: datetime | None = None) -> list[Session]:
        """The user's sessions, newest first; with `now`, only those still valid at that time."""
        live = " AND s.revoked_at IS NULL AND s.expires_at > ?" if now is not None else ""
        rows = self._read(f"SELECT {_SESSION_COLUMNS} {_SESSION_FROM} WHERE s.user_id = ?{live} "
                          "ORDER BY s.created_at DESC", [user_id, *([now] if now is not None else [])])
        return [Session(*r) for r in rows]

    def touch_session(self, session_id: str, *, now: datetime, expires_at: datetime | None = None) -> None:
        """Stamp `last_seen_at` (and slide `expires_at` when given) on a session still in force."""
        with self.transaction():
            self._execute("UPDATE sessions SET last_seen_at = ?, expires_at = coalesce(?, expires_at) "
                          "WHERE id = ? AND revoked_at IS NULL", [now, expires_at, session_id])

    def revoke_session(self, session_id: str, *, user_id: str, now: datetime, expires_at: datetime) -> None:
        """End one session for good. `expires_at` is only used when no row exists yet (a guest's)."""
        with self.transaction():
            self._execute(
                "INSERT INTO sessions (id, user_id, created_at, expires_at, last_seen_at, revoked_at) "
                "VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET revoked_at = coalesce(sessions.revoked_at, excluded.revoked_at)",
                [session_id, user_id, now, expires_at, now, now],
            )

    def revoke_user_sessions(self, user_id: str, *, now: datetime, keep: str | None = None) -> int:
        """End every session of a user, except `keep` (a session id) if given; returns how many."""
        with self.transaction():
            return self._execute("UPDATE sessions SET revoked_at = ? WHERE user_id = ? AND revoked_at IS NULL "
                                 "AND id <> ?", [now, user_id, keep or ""])

    def change_password(self, user_id: str, password_hash: str, *, now: datetime, keep: str | None) -> int:
        """Set a new password hash and end the user's other sessions, in one transaction; returns
        how many sessions ended."""
        with self.transaction():
            self._execute("UPDATE users SET password_hash = ? WHERE id = ?", [password_hash, user_id])
            return self.revoke_user_sessions(user_id, now=now, keep=keep)

    def session_owner(self, user_id: str) -> tuple[bool, bool]:
        """(the user has a row, the user was forgotten), in one read: what a guest's first
        session check needs to know."""
        row = self._read_one("SELECT (SELECT count(*) FROM users WHERE id = ?), "
                             "(SELECT count(*) FROM forgotten_users WHERE user_id = ?)", [user_id, user_id])
        return (bool(row[0]), bool(row[1])) if row else (False, False)

    def prune_sessions(self, *, before: datetime) -> int:
        """Delete sessions that ended before `before` (expired; a revoked one once it would have expired)."""
        with self.transaction():
            return self._execute("DELETE FROM sessions WHERE expires_at < ?", [before])

    # ---- log-in attempts

    def record_login_attempt(self, name: str, ok: bool, *, now: datetime) -> None:
        with self.transaction():
            self._execute("INSERT INTO login_attempts (id, name, ok, created_at) VALUES (?, ?, ?, ?)",
                          [new_id(), name.lower(), ok, now])

    def login_attempts(self, name: str, *, since: datetime) -> list[tuple[bool, datetime]]:
        """(ok, when) of the attempts at a name since a time, oldest first."""
        rows = self._read("SELECT ok, created_at FROM login_attempts WHERE name = ? AND created_at >= ? "
                          "ORDER BY created_at", [name.lower(), since])
        return [(bool(ok), at) for ok, at in rows]

    def prune_login_attempts(self, *, before: datetime) -> int:
        with self.transaction():
            return self._execute("DELETE FROM login_attempts WHERE created_at < ?", [before])
