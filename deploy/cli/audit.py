"""`advisor audit [--json] [--limit N] [--action A] [--url URL]`: the operator audit log, newest first.

On the database directly, or with `--url` from the running service (`GET /api/admin/audit`), which
holds the database while it runs. `--json` prints one entry a line (JSON Lines), for other tools.
"""

from __future__ import annotations

import json
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from deploy.cli.common import err, open_store, settings_of


def _from_service(url: str, token: str | None, limit: int, action: str | None) -> list[dict]:
    import httpx

    params = {"format": "json", "limit": limit, **({"action": action} if action else {})}
    try:
        r = httpx.get(f"{url.rstrip('/')}/api/admin/audit", params=params,
                      headers={"Authorization": f"Bearer {token or ''}"}, timeout=60)
    except httpx.HTTPError as exc:
        err.print(f"[red]Cannot reach the service at {url}: {exc}[/red]")
        raise typer.Exit(1) from None
    if r.status_code >= 400:
        err.print(f"[red]The service refused ({r.status_code}): {r.text[:500]}[/red]")
        raise typer.Exit(1)
    return r.json()["entries"]


def audit(
    ctx: typer.Context,
    as_json: bool = typer.Option(False, "--json", help="One JSON entry a line (JSON Lines)."),
    limit: int = typer.Option(200, "--limit", min=1, help="How many entries, newest first."),
    action: Optional[str] = typer.Option(None, "--action", help="Only this action (promote, rollback, job, forget…)."),
    url: Optional[str] = typer.Option(None, "--url", help="Read it from the running service."),
    token: Optional[str] = typer.Option(None, "--token", help="Admin token for --url (default: server.admin_token)."),
) -> None:
    """Who did what to the loop and to people's data, and when."""
    settings = settings_of(ctx)
    if url:
        entries = _from_service(url, token or settings.server.admin_token, limit, action)
    else:
        with open_store(settings) as store:
            entries = [e.as_dict() for e in store.audit.list(limit=limit, action=action)]
    if as_json:
        for entry in entries:
            print(json.dumps(entry, default=str))
        return
    table = Table("time", "actor", "action", "target", "outcome", "details")
    for e in entries:
        details = {k: v for k, v in e["details"].items() if k not in ("outcome", "surface")}
        table.add_row((e["time"] or "")[:19].replace("T", " "), e["actor"], e["action"], e["target"],
                      e["details"].get("outcome", ""), json.dumps(details, default=str)[:120])
    Console().print(table)


def register(app: typer.Typer) -> None:
    app.command("audit")(audit)
