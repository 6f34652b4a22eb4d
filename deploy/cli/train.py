"""`advisor dataset build`, `advisor train` and `advisor runs`: training from the command line.

Direct-database mode: these commands open the store themselves, so they work when no service
holds it (otherwise the store's error says to use the service). `advisor train` builds the set,
snapshots it into `<data_dir>/runs/<run_id>/`, records the run and starts the training
subprocess; `--wait` closes the database while it draws a live progress bar from the run's
progress.jsonl, then reopens it to record the outcome. Ctrl-C stops the watching, not the run.
Both `dataset build` and `train` filter the set with the harmlessness moderator
(`deploy.loop.safety.make_safety_filter`); `--no-safety-filter` switches it off, and the dataset card
says which filter ran and how many examples it removed.

Starting and cancelling a run are written to the audit log (`deploy.audit`), the OS user as actor.
"""

from __future__ import annotations

import json
import time
from enum import Enum
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn
from rich.table import Table

from deploy.audit import audited, cli_actor
from deploy.cli.common import open_store, settings_of
from deploy.cli.options import with_options
from deploy.loop.privacy import training_data_rules
from deploy.loop.safety import make_safety_filter, safety_anchors
from deploy.loop.training import launch_request, training_base_model
from deploy.settings import Settings
from feedback.datasets import DatasetError, build_dataset
from store import NotFound, Store, StoreError
from trainer.config import ConfigError, TrainingKnobs
from trainer.launch import TrainingBusy, cancel_training, launch_training, poll_training, resume_training
from trainer.process import RunError
from trainer.rundir import read_progress, run_state

err = Console(stderr=True)


SAFETY_HELP = ("Switch off the training-set safety filter (the harmlessness moderator); the dataset card then "
               "names the accept-everything filter.")


class Kind(str, Enum):
    sft = "sft"
    kto = "kto"
    dpo = "dpo"


def resolve_base_model(settings: Settings, override: str | None) -> str:
    """The weights to train: --base-model, else the configured backend's local model."""
    if override:
        return override
    if settings.backend.kind in ("builtin", "pretrained"):
        err.print(f"[dim]using the {settings.backend.kind} model (making it first if needed)…[/dim]")
    try:
        return training_base_model(settings)
    except ValueError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None


def dataset_build(
    ctx: typer.Context,
    kind: Kind = typer.Option(..., "--kind", "-k", help="sft (attribute-conditioned), kto (unpaired) or dpo (pairs)."),
    out: Path = typer.Option(..., "--out", "-o", help="Directory for train/eval Parquet and the dataset card."),
    eval_fraction: float = typer.Option(0.1, "--eval-fraction", help="Share of conversations held out."),
    as_json: bool = typer.Option(False, "--json", help="Print the dataset card as JSON."),
    no_safety_filter: bool = typer.Option(False, "--no-safety-filter", help=SAFETY_HELP),
) -> None:
    """Build a training set from the feedback store."""
    settings = settings_of(ctx)
    with open_store(settings) as store:
        try:
            card = build_dataset(store, kind.value, out, safety_filter=make_safety_filter(settings, not no_safety_filter),
                                 eval_fraction=eval_fraction, **training_data_rules(settings),
                                 anchors=safety_anchors(settings, kind.value))
        except DatasetError as exc:
            err.print(f"[red]{exc}[/red]")
            raise typer.Exit(2) from None
    if as_json:
        print(json.dumps(card.to_json(), indent=2))
        return
    print(card.markdown())
    err.print(f"wrote {card.n_train} train + {card.n_eval} eval rows to {out}")


def _watch(run_dir: Path) -> str:
    """A live progress bar until the run's process exits; returns its final status."""
    columns = [TextColumn("[bold]{task.description}"), BarColumn(), TextColumn("{task.completed}/{task.total}"),
               TextColumn("{task.fields[stats]}"), TimeElapsedColumn(), TextColumn("eta {task.fields[eta]}")]
    with Progress(*columns, console=err, transient=False) as bar:
        task = bar.add_task("starting", total=None, stats="", eta="?")
        while True:
            state = run_state(run_dir)
            last = next((r for r in reversed(read_progress(run_dir)) if r.get("loss") is not None), {})
            stats = " ".join(f"{k.split('/')[-1]} {last[k]:.4f}" for k in ("loss", "rewards/margins") if k in last)
            eta = f"{state.eta_s:.0f}s" if state.eta_s is not None else "?"
            bar.update(task, description=state.status, completed=state.step, total=state.max_steps,
                       stats=stats, eta=eta)
            if not state.alive and state.status != "queued":
                return state.status
            time.sleep(0.5)


def _record_outcome(settings: Settings, run_id: str) -> str | None:
    try:
        with Store(settings.store_target, **settings.store_options) as store:
            status = poll_training(store, run_id)
    except StoreError as exc:
        err.print(f"[yellow]could not record the outcome in the database ({exc}); the service will.[/yellow]")
        return None
    if status.run.error:
        err.print(f"[red]{status.run.error}[/red]")
    return status.run.status


@with_options(TrainingKnobs)
def train(
    ctx: typer.Context,
    method: Optional[Kind] = typer.Option(None, "--method", "-m", help="sft, kto or dpo."),
    wait: bool = typer.Option(False, "--wait", "-w", help="Show live progress until the run ends."),
    base_model: Optional[str] = typer.Option(None, "--base-model", help="Model directory to train (default: the configured backend's)."),
    from_base: bool = typer.Option(False, "--from-base", help="Start from the base model, not the live release's adapter."),
    eval_fraction: float = typer.Option(0.1, "--eval-fraction", help="Share of conversations held out."),
    resume: Optional[str] = typer.Option(None, "--resume", help="Restart a crashed run from its last checkpoint."),
    cancel: Optional[str] = typer.Option(None, "--cancel", help="Cancel a running run."),
    no_safety_filter: bool = typer.Option(False, "--no-safety-filter", help=SAFETY_HELP),
    knobs: TrainingKnobs = TrainingKnobs(),
) -> None:
    """Train an adapter on the feedback so far (SFT, KTO or DPO), one run at a time."""
    settings = settings_of(ctx)
    overrides = knobs.as_overrides()
    with open_store(settings) as store:
        try:
            if cancel:
                with audited(store, cli_actor(), "cancel", cancel, surface="cli") as entry:
                    status = cancel_training(store, cancel)
                    entry.details["status"] = status.run.status
                err.print(f"run {cancel}: {status.run.status}")
                return
            if method is None and not resume:
                err.print("[red]Say what to train: --method sft|kto|dpo (or --resume / --cancel RUN_ID).[/red]")
                raise typer.Exit(2)
            with audited(store, cli_actor(), "train", resume or "", surface="cli", resume=bool(resume),
                         method=method.value if method else None, overrides=overrides,
                         safety_filter=not no_safety_filter) as entry:
                if resume:
                    run = resume_training(store, resume)
                else:
                    request, note = launch_request(
                        store, settings, method=method.value, base_model=resolve_base_model(settings, base_model),
                        from_base=from_base, overrides=overrides, trigger="cli", eval_fraction=eval_fraction,
                        safety_filter=make_safety_filter(settings, not no_safety_filter))
                    if note:
                        err.print(f"[yellow]{note}[/yellow]")
                    run = launch_training(store, request)
                entry.target = run.id
                entry.details["status"] = run.status
        except (TrainingBusy, RunError, ConfigError, DatasetError, NotFound) as exc:
            err.print(f"[red]{exc}[/red]")
            raise typer.Exit(1) from None
    if run.status == "failed":
        err.print(f"[red]{run.error}[/red]")
        raise typer.Exit(1)
    err.print(f"training run [bold]{run.id}[/bold] ({run.method}) started in {run.run_dir}")
    if not wait:
        err.print(f"follow it with `advisor runs` or {Path(run.run_dir) / 'progress.jsonl'}")
        return
    try:
        final = _watch(Path(run.run_dir))
    except KeyboardInterrupt:
        err.print(f"\nstopped watching; run {run.id} goes on in the background (`advisor train --cancel {run.id}`)")
        raise typer.Exit(130) from None
    recorded = _record_outcome(settings, run.id) or final
    colour = "green" if recorded == "succeeded" else "red"
    err.print(f"run {run.id}: [{colour}]{recorded}[/{colour}]")
    if recorded != "succeeded":
        raise typer.Exit(1)


def runs(ctx: typer.Context, as_json: bool = typer.Option(False, "--json"),
         limit: int = typer.Option(20, "--limit")) -> None:
    """Recent training runs with their status, progress and outcome."""
    with open_store(settings_of(ctx)) as store:
        statuses = [poll_training(store, r.id) for r in store.jobs.list_training_runs(limit=limit)]
    if as_json:
        print(json.dumps([{"id": s.run.id, "method": s.run.method, "status": s.run.status, "step": s.state.step,
                           "max_steps": s.state.max_steps, "loss": s.state.loss, "error": s.run.error,
                           "run_dir": s.run.run_dir, "metrics": s.run.metrics} for s in statuses], indent=2,
                         default=str))
        return
    table = Table("run", "method", "status", "step", "loss", "started", "note")
    for s in statuses:
        step = f"{s.state.step}/{s.state.max_steps}" if s.state.max_steps else "-"
        loss = f"{s.state.loss:.4f}" if s.state.loss is not None else "-"
        table.add_row(s.run.id, s.run.method, s.run.status, step, loss, f"{s.run.created_at:%Y-%m-%d %H:%M}",
                      (s.run.error or "")[:80])
    Console().print(table)


def register(app: typer.Typer) -> None:
    dataset_app = typer.Typer(help="Training sets from the feedback store.", no_args_is_help=True)
    dataset_app.command("build")(dataset_build)
    app.add_typer(dataset_app, name="dataset")
    app.command("train")(train)
    app.command("runs")(runs)
