"""Sessions that can end: the signed cookie names a server-side session row, and that row decides.

Cookie (signed with itsdangerous, HTTP-only, SameSite=Lax): `{"s": token, "u": user id, "g": 1 for
a guest, "t": minted at}`. The token is 24 random bytes; the row's id is its SHA-256, so the table
holds nothing that signs anyone in. A forged cookie fails the signature; a copied one stops working
as soon as its row is revoked.

Resolving a cookie (every request, so kept cheap):
- A valid session is cached in this process for `CACHE_TTL_S` (1 s), at most `CACHE_MAX` of them.
  Revocations made here (sign-out, password change, forgetting) drop the entries at once; one made
  by another process (another replica, the CLI on PostgreSQL) takes effect within the TTL.
- A cache miss reads the row (joined with the user's name). `last_seen_at` is written at most once
  a minute per session (`TOUCH_EVERY`), so a busy session costs one read a second and one write a
  minute; that write also slides a non-admin session's expiry.
- Expiry: an admin session ends `server.admin_session_hours` after sign-in, however busy; any other
  session `server.session_days` after its last use. The row decides; the browser keeps the cookie
  for a year (`COOKIE_MAX_AGE_S`; an admin's for its hours) so that an active guest keeps their
  history.

Guests: minting a guest's cookie writes nothing (crawlers, health probes and visitors who never chat
leave no row). Their cookie is valid by its signature until `t` + session_days, unless a row says
otherwise. The row is written lazily, by the first check after the guest's user row exists, i.e.
after their first write (the Gradio UI checks on every event, so that is the next event; a one-shot
API client may never get one, which costs only the operator's view of it). Revoking a rowless
guest session writes a revoked row, so revocation always sticks.

Cookies from before server-side sessions (salt v1: `{"u", "n", "a"}`, minted once and valid for a
year) are still read for anonymous users, so an active guest does not lose their conversations on
upgrade: the v1 token maps to a fixed session id (its hash), and once the guest has a row it lives
by the same idle rule as any session. v1 cookies of named users and admins are refused (sign in
again); no v1 cookie works beyond its old year.

Rows are pruned (hourly) a year and a day after they expire, not sooner: a rowless guest cookie is
valid by its age, so its row, revoked or expired, must outlive that age or it would come back.
"""

from __future__ import annotations

import hashlib
import secrets
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, replace
from datetime import UTC, datetime, timedelta

from itsdangerous import BadSignature, URLSafeSerializer, URLSafeTimedSerializer

from deploy.settings import ServerSettings
from store import Store

COOKIE_MAX_AGE_S = 365 * 24 * 3600
CACHE_TTL_S = 1.0
CACHE_MAX = 10_000
TOUCH_EVERY = timedelta(minutes=1)
PRUNE_EVERY = timedelta(hours=1)
LEGACY_MAX_AGE = timedelta(seconds=COOKIE_MAX_AGE_S)  # what a v1 cookie was valid for
PRUNE_AFTER = LEGACY_MAX_AGE + timedelta(days=1)  # longer than any rowless cookie can live
_SALT = "advisor-session-v2"
_LEGACY_SALT = "advisor-session-v1"


def row_id(token: str) -> str:
    """The session row's id: a hash of the cookie's token, never the token itself."""
    return hashlib.sha256(token.encode()).hexdigest()


@dataclass(frozen=True)
class Identity:
    """Who is calling: a guest, a named user, the admin, or an API-key user."""

    user_id: str
    name: str | None = None
    is_admin: bool = False
    via: str = "cookie"  # cookie | new (a guest minted by this request) | admin-token | api-key
    session: str | None = None  # the cookie's session token (never for bearer callers)


@dataclass(frozen=True)
class Claim:
    """What a correctly signed cookie says; the row (or, for a rowless guest, its age) decides."""

    token: str
    user_id: str
    guest: bool
    minted: datetime
    legacy: bool = False  # a v1 cookie (before server-side sessions)


@dataclass
class _Cached:
    deadline: float  # time.monotonic() after which the row is read again
    identity: Identity
    expires_at: datetime


class SessionManager:
    """Mints, resolves, caches and revokes sessions. `clock` (an aware UTC datetime) is what
    every expiry is measured with; tests move it."""

    def __init__(self, settings: ServerSettings, store: Store, secret: str,
                 clock: Callable[[], datetime] | None = None) -> None:
        self.settings, self.store = settings, store
        self.clock = clock or (lambda: datetime.now(UTC))
        self._codec = URLSafeSerializer(secret, salt=_SALT)
        self._legacy = URLSafeTimedSerializer(secret, salt=_LEGACY_SALT)
        self._cache: dict[str, _Cached] = {}
        self._lock = threading.Lock()
        self._pruned_at: datetime | None = None

    # ---- lifetimes and cookies

    def lifetime(self, is_admin: bool) -> timedelta:
        s = self.settings
        return timedelta(hours=s.admin_session_hours) if is_admin else timedelta(days=s.session_days)

    def max_age_s(self, identity: Identity) -> int:
        return int(self.lifetime(True).total_seconds()) if identity.is_admin else COOKIE_MAX_AGE_S

    def cookie(self, identity: Identity) -> str:
        guest = identity.name is None and not identity.is_admin
        return self._codec.dumps({"s": identity.session, "u": identity.user_id, "g": int(guest),
                                  "t": int(self.clock().timestamp())})

    def parse(self, value: str) -> Claim | None:
        """The claim of a correctly signed cookie (current or v1 anonymous), else None."""
        try:
            data = self._codec.loads(value)
        except BadSignature:
            return self._parse_legacy(value)
        if not (isinstance(data, dict) and isinstance(data.get("s"), str) and isinstance(data.get("u"), str)
                and isinstance(data.get("t"), int)):
            return None
        return Claim(data["s"], data["u"], bool(data.get("g")), datetime.fromtimestamp(data["t"], UTC))

    def _parse_legacy(self, value: str) -> Claim | None:
        try:
            data, minted = self._legacy.loads(value, return_timestamp=True)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("u"), str) or data.get("n") or data.get("a"):
            return None  # a v1 cookie of a named user or an admin: sign in again
        token = "v1:" + hashlib.sha256(value.encode()).hexdigest()
        return Claim(token, data["u"], True, minted.astimezone(UTC), legacy=True)

    # ---- starting and resolving

    def start(self, identity: Identity, user_agent: str = "") -> Identity:
        """A new session row for a signed-in user; returns the identity that carries its token."""
        token, now = secrets.token_urlsafe(24), self.clock()
        self.store.users.create_session(row_id(token), identity.user_id, is_admin=identity.is_admin, now=now,
                                        expires_at=now + self.lifetime(identity.is_admin), user_agent=user_agent)
        return replace(identity, via="cookie", session=token)

    def resolve(self, value: str, user_agent: str = "") -> Identity | None:
        """The identity a session cookie stands for now, or None (forged, revoked, expired, forgotten)."""
        claim = self.parse(value)
        if claim is None:
            return None
        key, now = row_id(claim.token), self.clock()
        with self._lock:
            hit = self._cache.get(key)
        if hit is not None and hit.deadline > time.monotonic():
            return hit.identity if hit.expires_at > now else None
        found = self._load(claim, key, now, user_agent)
        with self._lock:
            if found is None:
                self._cache.pop(key, None)
                return None
            if len(self._cache) >= CACHE_MAX:
                self._cache.clear()  # a burst of distinct sessions: start over rather than track ages
            self._cache[key] = _Cached(time.monotonic() + CACHE_TTL_S, *found)
        return found[0]

    def _load(self, claim: Claim, key: str, now: datetime, user_agent: str) -> tuple[Identity, datetime] | None:
        self._maybe_prune(now)
        row = self.store.users.get_session(key)
        if row is None:
            return self._rowless_guest(claim, key, now, user_agent)
        if row.revoked_at is not None or row.expires_at <= now or row.user_id != claim.user_id:
            return None
        expires = row.expires_at
        if now - row.last_seen_at >= TOUCH_EVERY:
            expires = expires if row.is_admin else now + self.lifetime(False)
            self.store.users.touch_session(key, now=now, expires_at=expires)
        name = row.user_name or (self.settings.admin_user or "admin" if row.is_admin else None)
        return Identity(row.user_id, name, row.is_admin, "cookie", claim.token), expires

    def _rowless_guest(self, claim: Claim, key: str, now: datetime,
                       user_agent: str) -> tuple[Identity, datetime] | None:
        expires = claim.minted + (LEGACY_MAX_AGE if claim.legacy else self.lifetime(False))
        if not claim.guest or expires <= now:
            return None  # a signed-in session always has its row; a guest's cookie has its age
        exists, forgotten = self.store.users.session_owner(claim.user_id)
        if forgotten:
            return None
        if exists:  # the guest has written something: their session gets its row now
            created = now if claim.legacy else claim.minted  # an upgraded v1 cookie: idle rule from today
            expires = created + self.lifetime(False)
            self.store.users.create_session(key, claim.user_id, created_at=created, expires_at=expires, now=now,
                                            user_agent=user_agent)
        return Identity(claim.user_id, None, False, "cookie", claim.token), expires

    def _maybe_prune(self, now: datetime) -> None:
        if self._pruned_at is not None and now - self._pruned_at < PRUNE_EVERY:
            return
        self._pruned_at = now
        self.store.users.prune_sessions(before=now - PRUNE_AFTER)

    # ---- ending

    def end(self, identity: Identity) -> None:
        """Revoke the session this identity came with (none for bearer callers)."""
        if not identity.session:
            return
        key = row_id(identity.session)
        self.store.users.revoke_session(key, user_id=identity.user_id, now=self.clock(),
                                        expires_at=self.clock() + self.lifetime(identity.is_admin))
        with self._lock:
            self._cache.pop(key, None)

    def end_all(self, user_id: str, *, keep: Identity | None = None) -> int:
        """Revoke every session of a user (but `keep`'s); returns how many rows were revoked."""
        n = self.store.users.revoke_user_sessions(user_id, now=self.clock(),
                                                  keep=row_id(keep.session) if keep and keep.session else None)
        self.drop_user(user_id, keep=keep)
        return n

    def drop_user(self, user_id: str, *, keep: Identity | None = None) -> None:
        """Forget this process's cached sessions of a user (after a revocation or forgetting)."""
        kept = row_id(keep.session) if keep and keep.session else None
        with self._lock:
            for key in [k for k, c in self._cache.items() if c.identity.user_id == user_id and k != kept]:
                del self._cache[key]
