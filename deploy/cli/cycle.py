"""`advisor cycle`: one learning cycle from the command line, on the database directly.

extract → build sets → train (waits) → evaluate + gate → promote or reject, each step a job row,
then a report under `<data_dir>/reports/cycle-<id>/`. Like `advisor train`, it opens the store
itself, so it runs when no service holds the database; with a service running, use its "Start
cycle" button (or `POST /api/admin/jobs/cycle/run`), which also hot-swaps the promoted adapter.
Exit status: 0 when the cycle ran to a decision (promoted, rejected or passed), 1 when a step failed.
A direct run is written to the audit log (`deploy.audit`), the OS user as actor.
"""

from __future__ import annotations

import json
from enum import Enum
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from deploy.audit import audited, cli_actor
from deploy.cli.common import settings_of
from deploy.cli.options import with_options
from deploy.loop.cycle import CycleConfig, report_path, run_recorded_cycle
from store import Store, StoreError
from trainer.config import TrainingKnobs

err = Console(stderr=True)


class Method(str, Enum):
    kto = "kto"
    dpo = "dpo"
    sft = "sft"


@with_options(TrainingKnobs)
def cycle(
    ctx: typer.Context,
    method: Optional[Method] = typer.Option(None, "--method", "-m", help="kto, dpo or sft (default: schedule.train_method)."),
    no_safety_filter: bool = typer.Option(False, "--no-safety-filter",
                                          help="Keep what the moderator flags in the training set (demonstrations only)."),
    as_json: bool = typer.Option(False, "--json", help="Print the cycle's outcome as one JSON line."),
    url: Optional[str] = typer.Option(None, "--url", help="Start it in the service that holds the database instead."),
    token: Optional[str] = typer.Option(None, "--token", help="Admin token for --url (default: server.admin_token)."),
    cancel: Optional[str] = typer.Option(None, "--cancel", help="With --url: cancel the running cycle or training "
                                         "job with this id (it stops at its next check; no half release)."),
    knobs: TrainingKnobs = TrainingKnobs(),
) -> None:
    """Run one learning cycle: extract, build sets, train, gate, then a canary (or promote) or reject."""
    settings = settings_of(ctx)
    overrides = knobs.as_overrides()
    if cancel:
        from deploy.cli.common import call_service

        if not url:
            err.print("[red]--cancel needs --url: cycles and training jobs run in the service.[/red]")
            raise typer.Exit(2)
        body = call_service(url, token or settings.server.admin_token, f"/api/admin/jobs/{cancel}/cancel")
        print(json.dumps(body)) if as_json else err.print(f"cancelling {body['kind']} {cancel}")
        return
    if url:
        from deploy.cli.common import start_service_job

        params = {k: v for k, v in {"method": method.value if method else None,
                                    "safety_filter": False if no_safety_filter else None,
                                    "overrides": overrides or None}.items() if v is not None}
        start_service_job(url, token or settings.server.admin_token, "cycle", params, as_json=as_json)
        return
    config = CycleConfig.from_settings(settings, method=method.value if method else None,
                                       safety_filter=False if no_safety_filter else None, overrides=overrides)
    try:
        store = Store(settings.store_target, **settings.store_options)
    except StoreError as exc:
        err.print(f"[red]{exc}[/red]\nWith the service running, start the cycle there: `advisor cycle --url URL`, "
                  "or the operator screen's \"Start cycle\" button.")
        raise typer.Exit(1) from None
    with store:
        if not as_json:
            err.print(f"cycle: {config.method}, safety filter {'on' if config.safety_filter else 'OFF'}; "
                      "training waits for its run (Ctrl-C stops watching, not the run)…")
        with audited(store, cli_actor(), "cycle", "", surface="cli", method=config.method,
                     safety_filter=config.safety_filter, overrides=overrides) as entry:
            result = run_recorded_cycle(store, settings, config, trigger="cli")
            entry.target = result.cycle_id
            entry.details.update(status=result.status, message=result.message, release=result.release_id)
    if as_json:
        print(json.dumps(result.as_dict(), default=str))
    else:
        table = Table("step", "status", "note")
        for step in result.steps:
            table.add_row(step["step"], step["status"], (step.get("error") or step.get("note") or "")[:160])
        Console().print(table)
        colour = {"promoted": "green", "canary": "green", "failed": "red", "rejected": "yellow"}.get(result.status, "white")
        err.print(f"[{colour}]{result.status}[/{colour}]: {result.message}")
        if report_path(result):
            err.print(f"report: {report_path(result)}")
    if result.status == "failed":
        raise typer.Exit(1)


def register(app: typer.Typer) -> None:
    app.command("cycle")(cycle)
