"""Who is asking: one resolver shared by the REST API, the OpenAI API and the Gradio UI.

Design choices:
- Anonymous by default. Every browser gets a signed (itsdangerous), HTTP-only, SameSite=Lax
  session cookie for a random guest user id; the user row is created lazily on the first write,
  so a visit that never chats stores nothing. The secret must stay stable across restarts
  (settings `server.session_secret`, else a random one kept in the data directory).
- The cookie names a server-side session (`deploy.service.sessions`: rows, expiry, the
  one-second cache, guests' lazy rows). Signing out revokes it; "sign out everywhere" revokes all
  of the user's; a password change revokes all but the current one; forgetting deletes them.
- The UI and the API resolve identity from the SAME cookie with the SAME function
  (`Auth.from_cookies`), so a browser tab and a `fetch('/api/...')` from it are one user, and a
  revoked or forged cookie is refused by both.
- Bearer tokens: the admin token makes the caller the admin. Any other bearer value is treated
  as an API key naming a pseudonymous API user (`key-` + keyed hash of the value): no key
  registry to run, different keys are isolated from each other, one key always reaches its own
  conversations. This is what the OpenAI client sends (`api_key=`). A bearer wins over a cookie,
  and bearers have no session: they stay valid as long as the token does.
- Named users (optional): password hashed with scrypt (stdlib), verified in constant time, log-ins
  throttled per name (`deploy.service.throttle`). The operator may also log in as
  `server.admin_user` / `server.admin_password`.
- A user who deleted their data is never resurrected: their sessions are deleted with them, and a
  guest cookie naming a forgotten id is refused, so a fresh anonymous id is minted.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from collections.abc import Callable, Mapping
from datetime import UTC, datetime
from functools import cache
from pathlib import Path

from deploy.service.sessions import COOKIE_MAX_AGE_S, Identity, SessionManager, row_id
from deploy.service.throttle import LoginThrottle
from deploy.settings import ServerSettings
from store import InvalidInput, Store

COOKIE_NAME = "advisor_session"
_SCRYPT = {"n": 2**14, "r": 8, "p": 1}
MIN_PASSWORD_CHARS = 8

__all__ = ["COOKIE_MAX_AGE_S", "COOKIE_NAME", "Auth", "AuthError", "Identity", "hash_password", "session_secret",
           "verify_password"]


class AuthError(Exception):
    """Sign-in, sign-up or a password change failed; the message can be shown to the user."""

# --------------------------------------------------------------------------- passwords


def hash_password(password: str) -> str:
    salt = secrets.token_bytes(16)
    digest = hashlib.scrypt(password.encode(), salt=salt, dklen=32, **_SCRYPT)
    b64 = lambda b: base64.b64encode(b).decode()  # noqa: E731
    return f"scrypt${_SCRYPT['n']}${_SCRYPT['r']}${_SCRYPT['p']}${b64(salt)}${b64(digest)}"


def verify_password(password: str, stored: str | None) -> bool:
    if not stored:
        return False
    try:
        scheme, n, r, p, salt, digest = stored.split("$")
        if scheme != "scrypt":
            return False
        got = hashlib.scrypt(
            password.encode(), salt=base64.b64decode(salt), dklen=32, n=int(n), r=int(r), p=int(p)
        )
    except (ValueError, TypeError):
        return False
    return hmac.compare_digest(got, base64.b64decode(digest))


@cache
def _decoy_hash() -> str:
    # Checked against when the name is unknown, so an unknown name costs the same scrypt as a known one.
    return hash_password(secrets.token_hex(16))


def session_secret(settings: ServerSettings, data_dir: Path) -> str:
    """The configured secret, else one made once and kept (0600) in the data directory so that
    sessions survive restarts. Replicas sharing the data directory share it: the first to start
    writes it whole and links it into place, and any other reads that one."""
    if settings.session_secret:
        return settings.session_secret
    path = data_dir / "session_secret"
    if not path.is_file():
        _create_once(path, secrets.token_urlsafe(32))
    return path.read_text().strip()


def _create_once(path: Path, text: str) -> None:
    """Write `path` unless it exists, atomically: never half a file, never two different ones."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(4)}")
    tmp.touch(mode=0o600)
    tmp.write_text(text)
    try:
        os.link(tmp, path)  # fails if another process made it first: theirs stands
    except FileExistsError:
        pass
    finally:
        tmp.unlink()


# --------------------------------------------------------------------------- the resolver


class Auth:
    """Resolves an `Identity` from cookies and headers; signs users in and out. `clock` (an aware
    UTC datetime) is what sessions and the log-in throttle measure time with; tests move it."""

    def __init__(self, settings: ServerSettings, store: Store, secret: str):
        self.settings = settings
        self.store = store
        self._secret = secret
        self.clock: Callable[[], datetime] = lambda: datetime.now(UTC)
        self.sessions = SessionManager(settings, store, secret, clock=lambda: self.clock())
        self.throttle = LoginThrottle(settings, store, clock=lambda: self.clock(), failure=AuthError)
        _decoy_hash()  # made now, so the first unknown name does not pay for it (and show it)

    # ---- cookies

    def sign(self, identity: Identity) -> str:
        """The cookie value for an identity that carries a session (a new guest, a sign-in)."""
        return self.sessions.cookie(identity)

    def max_age_s(self, identity: Identity) -> int:
        return self.sessions.max_age_s(identity)

    def new_anonymous(self) -> Identity:
        """A new guest: nothing is written until they write (see `deploy.service.sessions`)."""
        return Identity(user_id=secrets.token_hex(16), via="new", session=secrets.token_urlsafe(24))

    def from_cookies(self, cookies: Mapping[str, str], user_agent: str = "") -> Identity | None:
        """The identity a session cookie stands for, or None (absent, forged, revoked, expired, forgotten)."""
        token = cookies.get(COOKIE_NAME) if cookies else None
        return self.sessions.resolve(token, user_agent) if token else None

    # ---- bearer tokens

    def is_admin_token(self, token: str) -> bool:
        return bool(self.settings.admin_token) and hmac.compare_digest(
            token.encode(), self.settings.admin_token.encode()
        )

    def from_bearer(self, token: str) -> Identity:
        if self.is_admin_token(token):
            return Identity(user_id="admin", name=self.settings.admin_user or "admin", is_admin=True,
                            via="admin-token")
        digest = hmac.new(self._secret.encode(), token.encode(), hashlib.sha256).hexdigest()[:24]
        return Identity(user_id=f"key-{digest}", via="api-key")

    def resolve(self, headers: Mapping[str, str], cookies: Mapping[str, str]) -> Identity | None:
        """Bearer token first (explicit beats ambient), then the session cookie."""
        auth = headers.get("authorization") or headers.get("Authorization") or ""
        scheme, _, token = auth.partition(" ")
        if scheme.lower() == "bearer" and token.strip():
            return self.from_bearer(token.strip())
        return self.from_cookies(cookies, headers.get("user-agent") or "")

    # ---- signing in and out

    def register(self, name: str, password: str, user_agent: str = "") -> Identity:
        """Create a named user and start their session."""
        if len(password or "") < MIN_PASSWORD_CHARS:
            raise AuthError(f"Choose a password of at least {MIN_PASSWORD_CHARS} characters.")
        if name.strip() == (self.settings.admin_user or "").strip():
            raise AuthError("That user name is reserved.")
        try:
            user = self.store.users.create(name, password_hash=hash_password(password))
        except InvalidInput as exc:
            raise AuthError(str(exc)) from None
        return self.sessions.start(Identity(user_id=user.id, name=user.name, is_admin=user.is_admin), user_agent)

    def login(self, name: str, password: str, user_agent: str = "") -> Identity:
        """Check a name and password (throttled per name) and start a session; `AuthError` (or
        the throttle's `LoginThrottled`) says why not, the same way for every name."""
        name = (name or "").strip()
        with self.throttle.attempt(name):
            ident = self._check_password(name, password or "")
        return self.sessions.start(ident, user_agent)

    def _check_password(self, name: str, password: str) -> Identity:
        s = self.settings
        if s.admin_password and name == s.admin_user:
            if hmac.compare_digest(password.encode(), s.admin_password.encode()):
                return Identity(user_id="admin", name=name, is_admin=True)
            raise AuthError("Wrong user name or password.")
        user = self.store.users.get_by_name(name) if name else None
        stored = user.password_hash if user is not None else None
        if not verify_password(password, stored or _decoy_hash()) or user is None or not stored:
            raise AuthError("Wrong user name or password.")
        return Identity(user_id=user.id, name=user.name, is_admin=user.is_admin)

    def admin_by_token(self, token: str, user_agent: str = "") -> Identity:
        """The sign-in page's "admin token" field: an admin session (the token itself stays a bearer)."""
        if not self.is_admin_token(token):
            raise AuthError("That admin token is not valid.")
        return self.sessions.start(Identity(user_id="admin", name=self.settings.admin_user or "admin",
                                            is_admin=True), user_agent)

    def logout(self, identity: Identity, *, everywhere: bool = False) -> int:
        """End this session (and with `everywhere`, every session of the user); returns how many
        other sessions ended. Bearer callers have no session: nothing to end."""
        if identity.via in ("admin-token", "api-key", "new"):  # "new": a guest minted by this very request
            return 0
        self.sessions.end(identity)
        return self.sessions.end_all(identity.user_id) if everywhere else 0

    def change_password(self, identity: Identity, old: str, new: str) -> int:
        """Set a new password after checking the old one (throttled like a log-in); every other
        session of the user ends, this one stays. Returns how many ended."""
        if identity.via in ("admin-token", "api-key") or not identity.session or identity.name is None:
            raise AuthError("Sign in with your user name and password to change the password.")
        if identity.user_id == "admin":
            raise AuthError("The operator's password is a setting (server.admin_password); change it there.")
        if len(new or "") < MIN_PASSWORD_CHARS:
            raise AuthError(f"Choose a password of at least {MIN_PASSWORD_CHARS} characters.")
        with self.throttle.attempt(identity.name):
            try:
                self._check_password(identity.name, old or "")
            except AuthError:
                raise AuthError("The current password is not right.") from None
        n = self.store.users.change_password(identity.user_id, hash_password(new), now=self.clock(),
                                             keep=row_id(identity.session))
        self.sessions.drop_user(identity.user_id, keep=identity)
        return n

    def forgotten(self, user_id: str) -> None:
        """A user was just forgotten (their rows are gone): drop what this process cached."""
        self.sessions.drop_user(user_id)
