"""The sign-in and sign-out pages (plain HTML forms; the chat UI links to them).

`GET /signout` ends this browser's session; the sign-in page's "Sign out everywhere" button posts
to `POST /signout` with `everywhere=1`, which ends every session of the account (a POST, so a
cross-site page cannot trigger it: the cookie is SameSite=Lax). A throttled sign-in answers 429
with the throttle's sentence (`deploy.service.throttle`).
"""

from __future__ import annotations

from html import escape

from fastapi import APIRouter, Form, Request
from fastapi.responses import HTMLResponse, RedirectResponse

from chat.notices import privacy_notice
from deploy.service.auth import AuthError
from deploy.service.caller import adopt_guest_data, identity_of, set_session, user_agent
from deploy.service.state import Services
from deploy.service.throttle import LoginThrottled

router = APIRouter(include_in_schema=False)

_SIGNIN_HTML = """<!doctype html><html lang="en"><head><meta charset="utf-8"><title>Sign in · Advisor</title>
<meta name="viewport" content="width=device-width, initial-scale=1">
<style>body{{font-family:system-ui,sans-serif;max-width:26rem;margin:4rem auto;padding:0 1rem;color:#222}}
label{{display:block;margin:.8rem 0 .2rem}}input{{width:100%;padding:.5rem;font-size:1rem;box-sizing:border-box}}
button{{margin-top:1rem;padding:.5rem 1.2rem;font-size:1rem}}.err{{color:#b00020}}.muted{{color:#666;font-size:.9rem}}
fieldset{{border:1px solid #ddd;border-radius:8px;margin:1rem 0;padding:0 1rem 1rem}}</style></head><body>
<h1>Advisor</h1>{error}
<form method="post" action="/signin"><fieldset><legend>Sign in</legend>
<label for="name">User name</label><input id="name" name="name" autocomplete="username">
<label for="password">Password</label><input id="password" name="password" type="password" autocomplete="current-password">
<label><input type="checkbox" name="create" value="1" style="width:auto"> Create this account</label>
<p class="muted">Operators: sign in as the admin user, or paste the admin token below.</p>
<label for="token">Admin token (optional)</label><input id="token" name="token" type="password">
<button type="submit">Continue</button></fieldset></form>
<form method="post" action="/signout"><input type="hidden" name="everywhere" value="1">
<button type="submit" id="signout-everywhere">Sign out everywhere</button>
<span class="muted">ends every session of your account, on every device, this one included</span></form>
<p class="muted"><a href="/">Back to the chat</a> — you can also chat without an account; what you did as a
guest moves to the account you sign in to.</p>
<section aria-labelledby="privacy"><h2 id="privacy" style="font-size:1.05rem">Your data</h2>{privacy}</section>
</body></html>"""


def _page(services: Services, error: str = "") -> str:
    from html import escape

    p = services.settings.privacy
    notice = privacy_notice(retention_days=p.retention_days, training_default=p.training_default)
    return _SIGNIN_HTML.format(error=error, privacy="".join(f'<p class="muted">{escape(s)}</p>' for s in notice))


@router.get("/signin")
def signin_page(request: Request) -> HTMLResponse:
    return HTMLResponse(_page(request.app.state.services))


@router.post("/signin")
def signin_submit(request: Request, name: str = Form(""), password: str = Form(""), token: str = Form(""),
                  create: str = Form("")):
    services: Services = request.app.state.services
    agent = user_agent(request)
    try:
        if token.strip():
            ident = services.auth.admin_by_token(token.strip(), agent)
        elif create:
            ident = services.auth.register(name, password, agent)
        else:
            ident = services.auth.login(name, password, agent)
    except (AuthError, LoginThrottled) as exc:
        status, headers = (429, {"Retry-After": str(exc.retry_after_s)}) if isinstance(exc, LoginThrottled) else (401, None)
        return HTMLResponse(_page(services, f'<p class="err" role="alert">{escape(str(exc))}</p>'),
                            status_code=status, headers=headers)
    if not ident.is_admin:
        adopt_guest_data(services, identity_of(request), ident, surface="ui")
    response = RedirectResponse("/", status_code=303)
    set_session(response, services.auth, ident, request)
    return response


def _signed_out(request: Request, everywhere: bool) -> RedirectResponse:
    services: Services = request.app.state.services
    services.auth.logout(identity_of(request), everywhere=everywhere)
    response = RedirectResponse("/", status_code=303)
    set_session(response, services.auth, services.auth.new_anonymous(), request)
    return response


@router.get("/signout")
def signout(request: Request):
    return _signed_out(request, everywhere=False)


@router.post("/signout")
def signout_post(request: Request, everywhere: str = Form("")):
    return _signed_out(request, everywhere=bool(everywhere))
