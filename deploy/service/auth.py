"""Who is asking: one resolver shared by the REST API, the OpenAI API and the Gradio UI.

Design choices:
- Anonymous by default. Every browser gets a signed (itsdangerous), HTTP-only, SameSite=Lax
  session cookie naming a random user id; the user row is created lazily on the first write, so
  a visit that never chats stores nothing. The cookie carries only the id, a name and an admin
  flag; the signature is what makes it trustworthy, so the secret must stay stable across
  restarts (settings `server.session_secret`, else a random one kept in the data directory).
- The UI and the API resolve identity from the SAME cookie with the SAME function
  (`Auth.from_cookies`), so a browser tab and a `fetch('/api/...')` from it are one user.
- Bearer tokens: the admin token makes the caller the admin. Any other bearer value is treated
  as an API key naming a pseudonymous API user (`key-` + keyed hash of the value): no key
  registry to run, different keys are isolated from each other, one key always reaches its own
  conversations. This is what the OpenAI client sends (`api_key=`). A bearer wins over a cookie.
- Named users (optional): password hashed with scrypt (stdlib), verified in constant time.
  The operator may also log in as `server.admin_user` / `server.admin_password`.
- A user who deleted their data is never resurrected: a cookie naming a forgotten id is treated
  as absent and a fresh anonymous id is minted.
"""

from __future__ import annotations

import base64
import hashlib
import hmac
import os
import secrets
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from itsdangerous import BadSignature, URLSafeTimedSerializer

from deploy.settings import ServerSettings
from feedback.store import InvalidInput, Store

COOKIE_NAME = "advisor_session"
COOKIE_MAX_AGE_S = 365 * 24 * 3600
_SALT = "advisor-session-v1"
_SCRYPT = {"n": 2**14, "r": 8, "p": 1}


class AuthError(Exception):
    """Login or registration failed; the message can be shown to the user."""


@dataclass(frozen=True)
class Identity:
    user_id: str
    name: str | None = None
    is_admin: bool = False
    via: str = "cookie"  # cookie | new | admin-token | api-key

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
    """Resolves an `Identity` from cookies and headers; mints and signs session cookies."""

    def __init__(self, settings: ServerSettings, store: Store, secret: str):
        self.settings = settings
        self.store = store
        self._secret = secret
        self._serializer = URLSafeTimedSerializer(secret, salt=_SALT)

    # ---- cookies

    def sign(self, identity: Identity) -> str:
        return self._serializer.dumps({"u": identity.user_id, "n": identity.name, "a": identity.is_admin})

    def new_anonymous(self) -> Identity:
        return Identity(user_id=secrets.token_hex(16), via="new")

    def from_cookies(self, cookies: Mapping[str, str]) -> Identity | None:
        """The identity a signed session cookie names, or None (absent, tampered, expired, forgotten)."""
        token = cookies.get(COOKIE_NAME) if cookies else None
        if not token:
            return None
        try:
            data = self._serializer.loads(token, max_age=COOKIE_MAX_AGE_S)
        except BadSignature:
            return None
        if not isinstance(data, dict) or not isinstance(data.get("u"), str):
            return None
        if self.store.is_forgotten(data["u"]):
            return None
        return Identity(user_id=data["u"], name=data.get("n"), is_admin=bool(data.get("a")), via="cookie")

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
        return self.from_cookies(cookies)

    # ---- named users

    def register(self, name: str, password: str) -> Identity:
        if len(password or "") < 8:
            raise AuthError("Choose a password of at least 8 characters.")
        if name.strip() == (self.settings.admin_user or "").strip():
            raise AuthError("That user name is reserved.")
        try:
            user = self.store.create_user(name, password_hash=hash_password(password))
        except InvalidInput as exc:
            raise AuthError(str(exc)) from None
        return Identity(user_id=user.id, name=user.name, is_admin=user.is_admin, via="cookie")

    def login(self, name: str, password: str) -> Identity:
        name = (name or "").strip()
        s = self.settings
        if s.admin_password and name == s.admin_user:
            if hmac.compare_digest(password.encode(), s.admin_password.encode()):
                return Identity(user_id="admin", name=name, is_admin=True, via="cookie")
            raise AuthError("Wrong user name or password.")
        user = self.store.get_user_by_name(name) if name else None
        if user is None or not verify_password(password, user.password_hash):
            raise AuthError("Wrong user name or password.")
        return Identity(user_id=user.id, name=user.name, is_admin=user.is_admin, via="cookie")
