"""What every `advisor` command shares: the loaded settings, a console for messages, opening the
store directly, and calling a running service when it holds the store (`--url`).

Messages for people go to stderr (`err`); results go to stdout, so scripts can pipe them.
"""

from __future__ import annotations

import json

import typer
from rich.console import Console

from deploy.settings import Settings, load_settings
from store import Store, StoreError

err = Console(stderr=True)


def settings_of(ctx: typer.Context) -> Settings:
    """The loaded settings, from the root callback."""
    root = ctx.find_root()
    if not isinstance(root.obj, Settings):
        root.obj = load_settings()
    return root.obj


def call_service(url: str, token: str | None, path: str, body: dict | None = None, timeout: float = 120) -> dict:
    """POST to a running service's admin API (the `--url` of commands whose work the service
    must do because it holds the database); a refusal or an unreachable service exits with the
    reason."""
    import httpx

    try:
        r = httpx.post(f"{url.rstrip('/')}{path}", json=body, headers={"Authorization": f"Bearer {token or ''}"},
                       timeout=timeout)
    except httpx.HTTPError as exc:
        err.print(f"[red]Cannot reach the service at {url}: {exc}[/red]")
        raise typer.Exit(1) from None
    if r.status_code >= 400:
        err.print(f"[red]The service refused ({r.status_code}): {r.text[:500]}[/red]")
        raise typer.Exit(1)
    return r.json()


def start_service_job(url: str, token: str | None, kind: str, params: dict, *, as_json: bool = False,
                      what: str | None = None, timeout: float = 120) -> dict:
    """Start a registered job in the running service (`POST /api/admin/jobs/{kind}/run`) and say
    so: its id as one JSON line with `as_json`, else a sentence naming `what` it does."""
    body = call_service(url, token, f"/api/admin/jobs/{kind}/run", {"params": params}, timeout=timeout)
    if as_json:
        print(json.dumps(body))
    else:
        err.print(f"started {what or kind} job {body.get('job_id')} in the service; follow it in the operator screen "
                  "or GET /api/admin/jobs")
    return body


def open_store(settings: Settings) -> Store:
    """Open the configured database or exit with the store's own explanation (e.g. who holds the lock)."""
    try:
        return Store(settings.store_target, **settings.store_options)
    except StoreError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(1) from None
