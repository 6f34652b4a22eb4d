"""Accounts and sessions under `/api`: sign up, log in, log out (here or everywhere), change the password.

  POST /api/signup | /api/login        {"name", "password"} → a new session (its cookie is set)
  POST /api/logout[?everywhere=true]   end this session (with everywhere: every session of mine);
                                       the browser gets a fresh guest cookie
  POST /api/me/password                {"old_password", "new_password"}: my other sessions end, this one stays

Design choices:
- A failed log-in answers 401 "Wrong user name or password." whatever the name; a throttled one
  429 with `Retry-After` and a sentence saying how long (`deploy.service.throttle`). Neither tells
  whether the name exists.
- After signing out the browser holds a fresh guest cookie straight away (as on a first visit), so
  its next request is a stranger's rather than an error.
- Bearer callers (admin token, API keys) have no session: signing out ends nothing for them, and
  they cannot change a password here.
"""

from __future__ import annotations

from fastapi import APIRouter, Depends, Query, Request
from fastapi.responses import JSONResponse
from pydantic import BaseModel, Field

from deploy.service.auth import AuthError, Identity
from deploy.service.caller import adopt_guest_data, identity_of, set_session, user_agent
from deploy.service.deps import me, services_of
from deploy.service.errors import ApiError, error_response
from deploy.service.shapes import Credentials, me_dict
from deploy.service.state import Services
from deploy.service.throttle import LoginThrottled

router = APIRouter(prefix="/api")


class PasswordChange(BaseModel):
    old_password: str = Field(min_length=1, max_length=1000)
    new_password: str = Field(min_length=1, max_length=1000)


def throttled(exc: LoginThrottled) -> JSONResponse:
    return error_response(429, str(exc), code="login_throttled", headers={"Retry-After": str(exc.retry_after_s)})


def _signed_in(sign_in, body: Credentials, request: Request, services: Services, status: int, code: str):
    try:
        ident = sign_in(body.name, body.password, user_agent(request))
    except LoginThrottled as exc:
        return throttled(exc)
    except AuthError as exc:
        raise ApiError(status, str(exc), code=code) from None
    adopt_guest_data(services, identity_of(request), ident, surface="api")
    response = JSONResponse(me_dict(ident))
    set_session(response, services.auth, ident, request)
    return response


@router.post("/signup")
def signup(body: Credentials, request: Request, services: Services = Depends(services_of)):
    return _signed_in(services.auth.register, body, request, services, 400, "signup_failed")


@router.post("/login")
def login(body: Credentials, request: Request, services: Services = Depends(services_of)):
    return _signed_in(services.auth.login, body, request, services, 401, "login_failed")


@router.post("/logout")
def logout(request: Request, everywhere: bool = Query(False, description="End every session of this user."),
           ident: Identity = Depends(me), services: Services = Depends(services_of)):
    ended = services.auth.logout(ident, everywhere=everywhere)
    fresh = services.auth.new_anonymous()
    response = JSONResponse({**me_dict(fresh), "ended_elsewhere": ended})
    set_session(response, services.auth, fresh, request)
    return response


@router.post("/me/password")
def change_password(body: PasswordChange, ident: Identity = Depends(me),
                    services: Services = Depends(services_of)):
    """Change my password (the old one is checked, throttled like a log-in); my other sessions end."""
    try:
        ended = services.auth.change_password(ident, body.old_password, body.new_password)
    except LoginThrottled as exc:
        return throttled(exc)
    except AuthError as exc:
        raise ApiError(400, str(exc), code="password_not_changed") from None
    return {"changed": True, "ended_elsewhere": ended}
