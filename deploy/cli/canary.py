"""`advisor release canary status | start ID | check | promote | rollback | stop`.

With `--url` the running service does it (`/api/admin/canary…`): routing changes at once and a
promotion hot-swaps the adapter. Without it the store is changed directly (the service stopped);
a service picks the canary up when it starts. `status` prints both arms side by side with the
rule's current verdict; `check` judges now and acts on the verdict (promote, roll back, or at
the deadline end it inconclusive: live stays, the release stays a candidate).
"""

from __future__ import annotations

import json
from typing import Optional

import httpx
import typer
from rich.console import Console
from rich.table import Table

from deploy.audit import audited, cli_actor
from deploy.cli.common import call_service, open_store, settings_of
from deploy.release.registry import ReleaseError

err = Console(stderr=True)
canary_app = typer.Typer(help="The canary: a gated release serving a share of users, judged online.",
                         no_args_is_help=True)
URL = typer.Option(None, "--url", help="Do it in the running service.")
TOKEN = typer.Option(None, "--token", help="Admin token for --url.")


def _print(overview: dict, as_json: bool) -> None:
    if as_json:
        print(json.dumps(overview, default=str))
        return
    canary, verdict = overview.get("canary"), overview.get("verdict") or {}
    if not canary:
        err.print("No canary has run yet.")
        return
    err.print(f"canary {canary['release_id']} ({canary.get('state')}), share {canary.get('share')}, "
              f"started {canary.get('started_at')}, against live {canary.get('live_release')}")
    arms = verdict.get("arms") or {}
    table = Table("rate", *arms)
    for rate in ("answers", "users", "conversations"):
        table.add_row(rate, *[str(arms[a][rate]) for a in arms])
    for rate in next(iter(arms.values()), {}).get("rates", {}):
        table.add_row(rate, *[_pct(arms[a]["rates"].get(rate)) for a in arms])
    Console().print(table)
    err.print(f"rule: {verdict.get('action', '—')}: {verdict.get('reason', '')}")
    if canary.get("outcome"):
        err.print(f"ended ({canary.get('ended_by')}, {canary.get('state')}): {canary['outcome']}")


def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


@canary_app.command("status")
def status_cmd(ctx: typer.Context, url: Optional[str] = URL, token: Optional[str] = TOKEN,
               as_json: bool = typer.Option(False, "--json")) -> None:
    """The running (or last) canary: both arms' online rates and the rule's verdict now."""
    from deploy.release.canary import canary_overview

    settings = settings_of(ctx)
    if url:
        r = httpx.get(f"{url.rstrip('/')}/api/admin/canary", timeout=60,
                      headers={"Authorization": f"Bearer {token or settings.server.admin_token}"})
        if r.status_code >= 400:
            err.print(f"[red]The service refused ({r.status_code}): {r.text[:300]}[/red]")
            raise typer.Exit(1)
        _print(r.json(), as_json)
        return
    with open_store(settings) as store:
        _print(canary_overview(store, settings), as_json)


@canary_app.command("start")
def start_cmd(ctx: typer.Context, release_id: str = typer.Argument(..., help="A candidate that passed the gate."),
              force: bool = typer.Option(False, "--force", help="Start even without a passing gate decision."),
              url: Optional[str] = URL, token: Optional[str] = TOKEN) -> None:
    """Make a gated candidate the canary."""
    from deploy.release.canary import start_canary

    settings = settings_of(ctx)
    if url:
        body = call_service(url, token or settings.server.admin_token,
                            f"/api/admin/canary/start/{release_id}" + ("?force=true" if force else ""))
        err.print(f"canary: {body['id']} serves {100 * body['canary']['share']:.0f}% of users")
        return
    with open_store(settings) as store:
        try:
            with audited(store, cli_actor(), "canary", release_id, surface="cli", step="start", force=force):
                release = start_canary(store, None, release_id, settings, force=force)
        except ReleaseError as exc:
            err.print(f"[red]{exc}[/red]")
            raise typer.Exit(1) from None
    err.print(f"canary: {release.id} (a running service picks it up within seconds of its next restart; "
              "use --url to start it in a running service)")


def _end(ctx: typer.Context, action: str, url: Optional[str], token: Optional[str]) -> None:
    from deploy.release.canary import check_canary, finish, running_canary

    settings = settings_of(ctx)
    if url:
        body = call_service(url, token or settings.server.admin_token, f"/api/admin/canary/{action}")
        err.print(json.dumps(body, default=str) if action == "check" else f"{body['id']}: {body['status']}")
        return
    with open_store(settings) as store:
        canary = running_canary(store)
        if canary is None:
            err.print("[red]No canary is running.[/red]")
            raise typer.Exit(1)
        with audited(store, cli_actor(), "canary", canary.id, surface="cli", step=action):
            if action == "check":
                result = check_canary(store, settings, lambda c, verdict: finish(
                    store, None, store.releases.get(c.id), verdict.action, verdict.reason))
                err.print(f"{result['action']}: {result['reason']}")
                return
            release = finish(store, None, canary, action, f"{action} by the operator", by="operator")
    err.print(f"{release.id}: {release.status}")


@canary_app.command("check")
def check_cmd(ctx: typer.Context, url: Optional[str] = URL, token: Optional[str] = TOKEN) -> None:
    """Judge the canary now by the rule and act on the verdict (continue, promote, roll back or inconclusive)."""
    _end(ctx, "check", url, token)


@canary_app.command("promote")
def promote_cmd(ctx: typer.Context, url: Optional[str] = URL, token: Optional[str] = TOKEN) -> None:
    """End the canary by making it live."""
    _end(ctx, "promote", url, token)


@canary_app.command("rollback")
def rollback_cmd(ctx: typer.Context, url: Optional[str] = URL, token: Optional[str] = TOKEN) -> None:
    """End the canary and reject its release; everyone gets the live release again."""
    _end(ctx, "rollback", url, token)


@canary_app.command("stop")
def stop_cmd(ctx: typer.Context, url: Optional[str] = URL, token: Optional[str] = TOKEN) -> None:
    """End the canary without a verdict; the release stays a candidate."""
    _end(ctx, "stop", url, token)
