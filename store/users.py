"""Users and sessions: anonymous users made on first sight, named ones with a password hash,
forgotten ones; training consent and its history; a guest's data moving to their account; the
server side of session cookies, and what the log-in throttle remembers.

Design choices:
- `ensure` runs on every new conversation, so the ids known to exist are cached in the
  process: the turn path (benchmarked) skips two lookups. `Privacy.forget_user` removes an id from
  the cache before deleting, under the write lock, so a forgotten user cannot slip back in. On a
  shared (PostgreSQL) store another replica may forget the user, which this process's cache would
  not hear of, so there every call checks (two lookups per new conversation, not per turn).
- A forgotten id stays in `forgotten_users` forever; writing for it again is refused.
- Training consent is a column on the user (what training-set builds read) plus a history row per
  change (`consent_changes`: old value, new value, why), written in the same transaction, so the
  person's export can show when and why it changed. `stricter_consent` is the one rule for
  merging two choices: opted out beats the default, which beats opted in.
- Sessions: one row per session, keyed by a hash of the cookie's session token (the service
  hashes it, the store never sees the token): reading the table (a backup, a support query) hands
  out nothing that signs anyone in. The caller passes every time (`now`, `expires_at`); the
  database's clock is never asked, so the service decides expiry with one clock and tests can
  move it.
- Revoking is an upsert: a guest's session has no row until the guest first writes something (the
  service creates it lazily), and a revocation must stick all the same, so it writes a revoked row.
  A revoked row keeps its `expires_at` (the cookie's own end), so pruning expired rows can never
  bring a revoked cookie back.
- Changing a password and revoking the user's other sessions is one transaction: there is no
  moment where the new password is set and a thief's session still counts.
- Log-in attempts are keyed by the lower-cased name tried, whether or not such a user exists, so
  the throttle answers the same for unknown names (no user enumeration).
- Portable SQL only (`?`, ON CONFLICT): PostgreSQL runs this module unchanged.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Any

from store.db import Database
from store.records import USER_COLUMNS, InvalidInput, NotFound, User, clean_text, new_id

MERGED_CONSENT_REASON = "merged guest session: stricter consent kept"


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


class Users:
    """Users, their consent, their web sessions and the log-in throttle's attempts."""

    def __init__(self, db: Database):
        self._db = db
        # Users whose row is known to exist (see the module docstring).
        self._known: set[str] = set()

    def _uncache(self, user_id: str) -> None:
        """Forget that the user's row exists (`Privacy.forget_user`, before it deletes the row)."""
        self._known.discard(user_id)

    def ensure(self, user_id: str, *, name: str | None = None) -> None:
        """Create the user row on first sight (anonymous users get one per session cookie)."""
        if user_id in self._known and not self._db.shared:
            return
        with self._db.transaction():
            if self._db.read_one("SELECT 1 FROM forgotten_users WHERE user_id = ?", [user_id]):
                # A forgotten user id never comes back; the caller must mint a new one.
                raise InvalidInput("This user's data was deleted; start a new session.")
            if not self._db.read_one("SELECT 1 FROM users WHERE id = ?", [user_id]):
                # ON CONFLICT: the same user's first two requests may reach two replicas at once.
                self._db.execute("INSERT INTO users (id, name) VALUES (?, ?) ON CONFLICT (id) DO NOTHING", [user_id, name])
        self._known.add(user_id)

    def create(self, name: str, *, password_hash: str | None = None, is_admin: bool = False) -> User:
        name = clean_text(name, what="user name", max_chars=100)
        if self.get_by_name(name):
            raise InvalidInput(f"A user named {name!r} already exists.")
        user_id = new_id()
        with self._db.transaction():
            self._db.execute(
                "INSERT INTO users (id, name, password_hash, is_admin) VALUES (?, ?, ?, ?)",
                [user_id, name, password_hash, is_admin],
            )
        return self.get(user_id)

    def get(self, user_id: str) -> User:
        row = self._db.read_one(f"SELECT {USER_COLUMNS} FROM users WHERE id = ?", [user_id])
        if row is None:
            raise NotFound(f"No user {user_id!r}.")
        return User(*row)

    def get_by_name(self, name: str) -> User | None:
        row = self._db.read_one(f"SELECT {USER_COLUMNS} FROM users WHERE name = ?", [name])
        return User(*row) if row else None

    def is_forgotten(self, user_id: str) -> bool:
        return self._db.read_one("SELECT 1 FROM forgotten_users WHERE user_id = ?", [user_id]) is not None

    def set_training_consent(self, user_id: str, consent: bool | None, *, reason: str = "set by the user") -> None:
        """Record whether the user's conversations may train the advisor (None: the default), and
        the change in the user's consent history (nothing when the value stays the same)."""
        with self._db.transaction():
            self.ensure(user_id)
            self._change_consent(user_id, consent, reason)

    def _change_consent(self, user_id: str, consent: bool | None, reason: str) -> bool | None:
        """Set the column and append the history row, inside the caller's transaction; returns the
        old value."""
        old = self.training_consent(user_id)
        if old != consent:
            self._db.execute("UPDATE users SET training_consent = ? WHERE id = ?", [consent, user_id])
            self._db.execute("INSERT INTO consent_changes (id, user_id, old_value, new_value, reason) "
                             "VALUES (?, ?, ?, ?, ?)", [new_id(), user_id, old, consent, reason])
        return old

    def consent_history(self, user_id: str) -> list[tuple[bool | None, bool | None, str, datetime]]:
        """(old value, new value, reason, when) of every change of the user's consent, oldest first."""
        return [tuple(r) for r in self._db.read(  # type: ignore[misc]
            "SELECT old_value, new_value, reason, created_at FROM consent_changes WHERE user_id = ? "
            "ORDER BY created_at, id", [user_id])]

    def training_consent(self, user_id: str) -> bool | None:
        row = self._db.read_one("SELECT training_consent FROM users WHERE id = ?", [user_id])
        return row[0] if row else None

    def move_user_data(self, from_user: str, to_user: str) -> dict[str, Any]:
        """A guest signs up or signs in: their conversations, ratings, sibling choices and consent
        history become the account's, in one transaction. The account keeps the stricter of the
        two consents (`stricter_consent`: the guest's opt-out is not undone by signing in), and a
        change is written to its consent history. Returns rows moved per table, and under
        "consent" the change made ({"old", "new", "reason"}), if any."""
        if from_user == to_user:
            return {}
        with self._db.transaction():
            self.ensure(to_user)
            moved: dict[str, Any] = {
                table: self._db.execute(f"UPDATE {table} SET user_id = ? WHERE user_id = ?", [to_user, from_user])
                for table in ("conversations", "ratings", "sibling_choices", "consent_changes")}
            guest = self._db.read_one("SELECT training_consent FROM users WHERE id = ?", [from_user])
            if guest is not None:  # no row: the guest never wrote anything, so chose nothing
                kept = stricter_consent(guest[0], self.training_consent(to_user))
                old = self._change_consent(to_user, kept, MERGED_CONSENT_REASON)
                if old != kept:
                    moved["consent"] = {"old": old, "new": kept, "reason": MERGED_CONSENT_REASON}
            self._db.execute("DELETE FROM users WHERE id = ? AND name IS NULL", [from_user])
            self._known.discard(from_user)
        return moved

    # ---- sessions

    def create_session(self, session_id: str, user_id: str, *, expires_at: datetime, now: datetime,
                       created_at: datetime | None = None, is_admin: bool = False, user_agent: str = "") -> bool:
        """Write a session row; False when one with this id exists already (left as it is)."""
        with self._db.transaction():
            return self._db.execute(
                "INSERT INTO sessions (id, user_id, is_admin, created_at, expires_at, last_seen_at, user_agent) "
                "VALUES (?, ?, ?, ?, ?, ?, ?) ON CONFLICT (id) DO NOTHING",
                [session_id, user_id, is_admin, created_at or now, expires_at, now, user_agent[:200]],
            ) > 0

    def get_session(self, session_id: str) -> Session | None:
        row = self._db.read_one(f"SELECT {_SESSION_COLUMNS} {_SESSION_FROM} WHERE s.id = ?", [session_id])
        return Session(*row) if row else None

    def list_sessions(self, user_id: str, *, now: datetime | None = None) -> list[Session]:
        """The user's sessions, newest first; with `now`, only those still valid at that time."""
        live = " AND s.revoked_at IS NULL AND s.expires_at > ?" if now is not None else ""
        rows = self._db.read(f"SELECT {_SESSION_COLUMNS} {_SESSION_FROM} WHERE s.user_id = ?{live} "
                             "ORDER BY s.created_at DESC", [user_id, *([now] if now is not None else [])])
        return [Session(*r) for r in rows]

    def touch_session(self, session_id: str, *, now: datetime, expires_at: datetime | None = None) -> None:
        """Stamp `last_seen_at` (and slide `expires_at` when given) on a session still in force."""
        with self._db.transaction():
            self._db.execute("UPDATE sessions SET last_seen_at = ?, expires_at = coalesce(?, expires_at) "
                             "WHERE id = ? AND revoked_at IS NULL", [now, expires_at, session_id])

    def revoke_session(self, session_id: str, *, user_id: str, now: datetime, expires_at: datetime) -> None:
        """End one session for good. `expires_at` is only used when no row exists yet (a guest's)."""
        with self._db.transaction():
            self._db.execute(
                "INSERT INTO sessions (id, user_id, created_at, expires_at, last_seen_at, revoked_at) "
                "VALUES (?, ?, ?, ?, ?, ?) "
                "ON CONFLICT (id) DO UPDATE SET revoked_at = coalesce(sessions.revoked_at, excluded.revoked_at)",
                [session_id, user_id, now, expires_at, now, now],
            )

    def revoke_user_sessions(self, user_id: str, *, now: datetime, keep: str | None = None) -> int:
        """End every session of a user, except `keep` (a session id) if given; returns how many."""
        with self._db.transaction():
            return self._db.execute("UPDATE sessions SET revoked_at = ? WHERE user_id = ? AND revoked_at IS NULL "
                                    "AND id <> ?", [now, user_id, keep or ""])

    def change_password(self, user_id: str, password_hash: str, *, now: datetime, keep: str | None) -> int:
        """Set a new password hash and end the user's other sessions, in one transaction; returns
        how many sessions ended."""
        with self._db.transaction():
            self._db.execute("UPDATE users SET password_hash = ? WHERE id = ?", [password_hash, user_id])
            return self.revoke_user_sessions(user_id, now=now, keep=keep)

    def session_owner(self, user_id: str) -> tuple[bool, bool]:
        """(the user has a row, the user was forgotten), in one read: what a guest's first
        session check needs to know."""
        row = self._db.read_one("SELECT (SELECT count(*) FROM users WHERE id = ?), "
                                "(SELECT count(*) FROM forgotten_users WHERE user_id = ?)", [user_id, user_id])
        return (bool(row[0]), bool(row[1])) if row else (False, False)

    def prune_sessions(self, *, before: datetime) -> int:
        """Delete sessions that ended before `before` (expired; a revoked one once it would have expired)."""
        with self._db.transaction():
            return self._db.execute("DELETE FROM sessions WHERE expires_at < ?", [before])

    # ---- log-in attempts

    def record_login_attempt(self, name: str, ok: bool, *, now: datetime) -> None:
        with self._db.transaction():
            self._db.execute("INSERT INTO login_attempts (id, name, ok, created_at) VALUES (?, ?, ?, ?)",
                             [new_id(), name.lower(), ok, now])

    def login_attempts(self, name: str, *, since: datetime) -> list[tuple[bool, datetime]]:
        """(ok, when) of the attempts at a name since a time, oldest first."""
        rows = self._db.read("SELECT ok, created_at FROM login_attempts WHERE name = ? AND created_at >= ? "
                             "ORDER BY created_at", [name.lower(), since])
        return [(bool(ok), at) for ok, at in rows]

    def prune_login_attempts(self, *, before: datetime) -> int:
        with self._db.transaction():
            return self._db.execute("DELETE FROM login_attempts WHERE created_at < ?", [before])

def stricter_consent(a: bool | None, b: bool | None) -> bool | None:
    """The stricter of two consent choices, whatever the deployment's default: an opt-out (False)
    wins, then no choice (None: the default, which may be "no"), then an opt-in (True)."""
    if a is False or b is False:
        return False
    if a is None or b is None:
        return None
    return True
