"""The caller of each request: who they are, their session cookie, and what a guest brings along.

- `IdentityMiddleware` (pure ASGI, so streamed answers pass untouched) resolves the caller once
  per request: a bearer token, else the signed session cookie (checked against its server-side
  session), else a new anonymous id whose cookie is set on the response. It also refuses bodies
  over `MAX_BODY_BYTES` on /api and /v1 before any JSON is parsed.
- The Gradio UI resolves the same cookie with the same `Auth.from_cookies`, so a browser is one
  user across UI and API, and a revoked session ends in both.
- `cookie_header` / `set_session` write the cookie; `identity_of` and `user_agent` read a request;
  `adopt_guest_data` moves a guest's conversations to the account they sign in to.
"""

from __future__ import annotations

from fastapi import Request
from fastapi.responses import JSONResponse, Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from deploy.audit import record
from deploy.service.auth import COOKIE_NAME, Auth, Identity
from deploy.service.state import Services

# Largest request body accepted by /api and /v1 (a message is at most max_message_chars; this
# only stops abuse before JSON parsing).
MAX_BODY_BYTES = 1_000_000
_COOKIE_PREFIX = f"{COOKIE_NAME}=".encode()


class IdentityMiddleware:
    """Puts the caller's `Identity` on `request.state.identity`; mints an anonymous session cookie
    when there is none (or it is invalid, or names a user who deleted their data)."""

    def __init__(self, app: ASGIApp, services: Services) -> None:
        self.app = app
        self.services = services

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or self.services.auth is None:
            await self.app(scope, receive, send)
            return
        request = Request(scope)
        identity = self.services.auth.resolve(request.headers, request.cookies)
        fresh = identity is None
        if fresh:
            identity = self.services.auth.new_anonymous()
        scope.setdefault("state", {})["identity"] = identity
        too_big = _declared_length(request) > MAX_BODY_BYTES and scope["path"].startswith(("/api/", "/v1/"))
        if too_big:
            resp = JSONResponse({"error": {"message": f"The request is larger than {MAX_BODY_BYTES:,} bytes.",
                                           "type": "invalid_request_error", "code": "too_large"}}, status_code=413)
            await resp(scope, receive, send)
            return

        async def send_wrapper(message: Message) -> None:
            if fresh and message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                # A route that set the session itself (a sign-in as the first request) wins: the
                # browser keeps the last cookie of a name, so ours must not come after it.
                if not any(k.lower() == b"set-cookie" and v.startswith(_COOKIE_PREFIX) for k, v in headers):
                    headers.append((b"set-cookie", cookie_header(self.services.auth, identity, scope).encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_wrapper)


def _declared_length(request: Request) -> int:
    try:
        return int(request.headers.get("content-length") or 0)
    except ValueError:
        return 0


def cookie_header(auth: Auth, identity: Identity, scope: Scope | None = None) -> str:
    """A Set-Cookie value: HTTP-only (no script can read it), SameSite=Lax (no cross-site POSTs),
    Secure when the request came over HTTPS; an admin's lives only as long as its session."""
    secure = "; Secure" if scope is not None and scope.get("scheme") == "https" else ""
    return (f"{COOKIE_NAME}={auth.sign(identity)}; Path=/; Max-Age={auth.max_age_s(identity)}; HttpOnly; "
            f"SameSite=Lax{secure}")


def set_session(response: Response, auth: Auth, identity: Identity, request: Request) -> None:
    response.headers.append("set-cookie", cookie_header(auth, identity, request.scope))


def user_agent(request: Request) -> str:
    return request.headers.get("user-agent") or ""


def identity_of(request: Request) -> Identity:
    return request.state.identity


def adopt_guest_data(services: Services, before: Identity | None, after: Identity, *, surface: str) -> dict:
    """A guest who signs up or signs in keeps what they did as a guest: their conversations,
    ratings, choices and consent history move to the account (one transaction in the store). Only
    an anonymous browser session is adopted — never an API key's user, another account or the
    admin. When the account's training consent changes (the guest's opt-out is kept), the audit
    log says so: whose, old and new value, and why."""
    if before is None or before.name is not None or before.is_admin or before.via not in ("cookie", "new") \
            or before.user_id == after.user_id:
        return {}
    moved = services.store.users.move_user_data(before.user_id, after.user_id)
    if "consent" in moved:
        record(services.store, after.user_id, "consent", after.user_id,
               {**moved["consent"], "guest": before.user_id, "surface": surface, "outcome": "ok"})
    return moved
