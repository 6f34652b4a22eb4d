"""`advisor release list | gate RUN | promote ID | rollback`.

Direct mode changes the store only; the service picks the live release up when it starts. With
`--url` the running service does it (`POST /api/admin/releases/{id}/promote`,
`/api/admin/releases/rollback`), hot-swapping the adapter without dropping chats.

`gate RUN` measures a training run's adapter against the live release (`deploy.release.evaluate`) and
stores the decision: on the database directly (the service stopped), or with `--url` as the
service's "gate" job. It never promotes: `promote ID` does, after reading the decision.

Direct-mode promote, rollback and gate are written to the audit log (`deploy.audit`) with the OS
user as actor; with `--url` the service records them (actor: the admin token).
"""

from __future__ import annotations

import json
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from deploy.audit import audited, cli_actor
from deploy.cli.common import call_service, open_store, settings_of, start_service_job
from deploy.release.registry import ReleaseError, promote, rollback

err = Console(stderr=True)
release_app = typer.Typer(help="Releases: list, gate, promote, roll back.", no_args_is_help=True)


@release_app.command("list")
def list_releases(ctx: typer.Context, as_json: bool = typer.Option(False, "--json")) -> None:
    """Every release with its status and the gate's summary."""
    with open_store(settings_of(ctx)) as store:
        releases = store.releases.list(limit=200)
        forgotten = store.privacy.forgotten_users_per_release()
    if as_json:
        print(json.dumps([{**r.__dict__, "forgotten_users": forgotten.get(r.id, 0)} for r in releases], default=str))
        return
    table = Table("id", "status", "run", "created", "promoted", "gate", "note")
    for r in releases:
        note = (f"trained on data of {forgotten[r.id]} user(s) since deleted" if forgotten.get(r.id) else "")
        table.add_row(r.id, r.status, r.run_id or "", f"{r.created_at:%Y-%m-%d %H:%M}",
                      f"{r.promoted_at:%Y-%m-%d %H:%M}" if r.promoted_at else "", r.decision.get("summary", ""), note)
    Console().print(table)


def _fmt(axis: str, value: float | None) -> str:
    if value is None:
        return "—"
    return f"{value:.3f}" if axis == "self_bleu" else f"{100 * value:.1f}%"


@release_app.command("gate")
def gate_cmd(
    ctx: typer.Context,
    run_id: str = typer.Argument(..., help="Training run id (see `advisor runs`)."),
    as_json: bool = typer.Option(False, "--json", help="Print the outcome as one line of JSON."),
    url: Optional[str] = typer.Option(None, "--url", help="Gate it in the running service (its job)."),
    token: Optional[str] = typer.Option(None, "--token", help="Admin token for --url."),
) -> None:
    """Measure a training run's adapter against the live release and store the gate's decision."""
    from deploy.release.evaluate import gate_candidate
    from store import NotFound

    settings = settings_of(ctx)
    if url:
        start_service_job(url, token or settings.server.admin_token, "gate", {"run_id": run_id}, as_json=as_json)
        return
    with open_store(settings) as store:
        try:
            with (err.status("Gating: answering the gate's prompts with the candidate and the live release…") as status,
                  audited(store, cli_actor(), "gate", run_id, surface="cli") as entry):
                outcome = gate_candidate(store, settings, run_id, progress=lambda m: status.update(f"Gating: {m}"))
                entry.details.update(release=outcome.release_id, promote=outcome.decision.promote)
        except (ReleaseError, NotFound) as exc:
            err.print(f"[red]{exc}[/red]")
            raise typer.Exit(1) from None
    if as_json:
        print(json.dumps(outcome.as_dict(), default=str, separators=(",", ":")))
        return
    table = Table("axis", "candidate", "live", "result", "reason", title=f"Gate: release {outcome.release_id} "
                  f"vs {outcome.live_release_id or 'the base model'}")
    for a in outcome.decision.axes:
        table.add_row(a.axis, _fmt(a.axis, a.candidate), _fmt(a.axis, a.live),
                      "[green]pass[/green]" if a.passed else "[red]fail[/red]", a.reason)
    Console().print(table)
    verdict = "[green]passes[/green]" if outcome.decision.promote else "[red]rejected[/red]"
    Console().print(f"{verdict}: {outcome.decision.summary()}")
    if outcome.decision.promote:
        Console().print(f"Promote it with `advisor release promote {outcome.release_id}` "
                        "(add --url to hot-swap a running service).")


@release_app.command("promote")
def promote_cmd(
    ctx: typer.Context,
    release_id: str = typer.Argument(..., help="Release id (see `advisor release list`)."),
    force: bool = typer.Option(False, "--force", help="Promote even a release the gate rejected."),
    url: Optional[str] = typer.Option(None, "--url", help="Do it in the running service (hot swap)."),
    token: Optional[str] = typer.Option(None, "--token", help="Admin token for --url."),
) -> None:
    """Make a release live."""
    settings = settings_of(ctx)
    if url:
        body = call_service(url, token or settings.server.admin_token,
                        f"/api/admin/releases/{release_id}/promote" + ("?force=true" if force else ""))
        err.print(f"live: {body.get('id', release_id)}")
        return
    with open_store(settings) as store:
        try:
            with audited(store, cli_actor(), "promote", release_id, surface="cli", force=force):
                release = promote(store, None, release_id, force=force)
        except ReleaseError as exc:
            err.print(f"[red]{exc}[/red]")
            raise typer.Exit(1) from None
    err.print(f"live: {release.id} (a running service picks it up on restart; use --url to hot-swap)")


@release_app.command("rollback")
def rollback_cmd(
    ctx: typer.Context,
    url: Optional[str] = typer.Option(None, "--url", help="Do it in the running service (hot swap)."),
    token: Optional[str] = typer.Option(None, "--token", help="Admin token for --url."),
) -> None:
    """Make the previously live release live again."""
    settings = settings_of(ctx)
    if url:
        body = call_service(url, token or settings.server.admin_token, "/api/admin/releases/rollback")
        err.print(f"live: {body.get('id')}")
        return
    with open_store(settings) as store:
        try:
            with audited(store, cli_actor(), "rollback", "", surface="cli") as entry:
                release = rollback(store, None)
                entry.target = release.id
        except ReleaseError as exc:
            err.print(f"[red]{exc}[/red]")
            raise typer.Exit(1) from None
    err.print(f"live: {release.id}")


def register(app: typer.Typer) -> None:
    from deploy.cli.canary import canary_app

    release_app.add_typer(canary_app, name="canary")
    app.add_typer(release_app, name="release")
