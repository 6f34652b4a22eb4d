"""`advisor simulate`: simulated users chat with a running service and react to its answers.

    advisor simulate --users 8 --turns 10 [--url URL] [--prefer short|long|steps] [--seed S]
                     [--admin-token T --extract] [--verbosity V ...] [--rate NAME=P ...]
                     [--concurrency K] [--json]

Design choices:
- Always through the service's REST API (`deploy.loop.simulate`): the simulator needs the service
  running (`advisor serve`) and never opens the database, so it can run beside the chat.
- `--url` defaults to the configured server (`http://{server.host}:{server.port}`; a wildcard
  host means this machine). `--extract` then asks the service to mine the new feedback at once
  (needs the admin token, default `server.admin_token`), so `advisor train` can follow directly.
- Service errors are part of the summary, not a crash; the exit code is 1 when every turn failed.
"""

from __future__ import annotations

import json
from dataclasses import fields, replace
from enum import Enum
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from deploy.cli.common import settings_of
from deploy.loop.simulate import Preference, ReactionRates, SimulationConfig, SimulationError, simulate
from deploy.settings import Settings

err = Console(stderr=True)


class Prefer(str, Enum):
    short = "short"
    long = "long"
    steps = "steps"


def service_url(settings: Settings) -> str:
    host = settings.server.host
    host = "127.0.0.1" if host in ("0.0.0.0", "::", "") else host
    return f"http://{host}:{settings.server.port}"


def parse_rates(items: list[str]) -> ReactionRates:
    """`NAME=P` pairs over the default reaction weights; a bad item raises SimulationError."""
    names = {f.name for f in fields(ReactionRates)} - {"max_follow_ups"}
    changes: dict[str, float] = {}
    for item in items:
        name, _, value = item.partition("=")
        name = name.strip().replace("-", "_")
        try:
            p = float(value)
        except ValueError:
            p = -1.0
        if name not in names or not 0.0 <= p <= 1.0:
            raise SimulationError(f"--rate {item!r}: expected NAME=P with P between 0 and 1 and NAME one of "
                                  f"{', '.join(sorted(names))}")
        changes[name] = p
    return replace(ReactionRates(), **changes)


def simulate_cmd(
    ctx: typer.Context,
    users: int = typer.Option(4, "--users", "-u", min=1, help="Simulated users (each its own anonymous session)."),
    turns: int = typer.Option(6, "--turns", "-t", min=1, help="Answers each user asks for."),
    url: Optional[str] = typer.Option(None, "--url", help="Service address (default: the configured server)."),
    prefer: Prefer = typer.Option(Prefer.short, "--prefer", help="What the users want: short, long or steps."),
    length_words: int = typer.Option(35, "--length-words", min=1, help="Short/long threshold in words."),
    seed: int = typer.Option(0, "--seed", help="Seed of every choice the users make (and of sampling)."),
    admin_token: Optional[str] = typer.Option(None, "--admin-token", help="Operator token (default: server.admin_token)."),
    extract: bool = typer.Option(False, "--extract", help="Start the service's extraction job at the end and wait."),
    verbosity: Optional[list[int]] = typer.Option(
        None, "--verbosity", min=0, max=4,
        help="Verbosity slider value(s) the users chat with; repeat for several (default: 0-4 at random)."),
    rate: Optional[list[str]] = typer.Option(
        None, "--rate", help="Change a reaction weight, e.g. --rate regenerate=0.6 (repeat; names: "
                             "like, thanks, correct, rephrase, regenerate, clarify, dislike, dislike_too)."),
    concurrency: int = typer.Option(1, "--concurrency", min=1, help="Users chatting at the same time."),
    max_new_tokens: Optional[int] = typer.Option(None, "--max-new-tokens", min=1, help="Answer length cap."),
    phrasing: str = typer.Option("real", "--phrasing", help="What users say: 'real' (people's feedback from the "
                                 "gold set's test split) or 'templates' (phrases the fast extractor is known to read)."),
    as_json: bool = typer.Option(False, "--json", help="Print the summary as one line of JSON."),
) -> None:
    """Simulated users chat with the service and react naturally (thank, correct, rephrase, rate)."""
    settings = settings_of(ctx)
    try:
        config = SimulationConfig(
            url=url or service_url(settings), users=users, turns=turns,
            preference=Preference(prefer.value, length_words=length_words), seed=seed,
            admin_token=admin_token or settings.server.admin_token, extract=extract,
            concurrency=concurrency, max_new_tokens=max_new_tokens, rates=parse_rates(rate or []), phrasing=phrasing,
            **({"verbosities": tuple(verbosity)} if verbosity else {}),
        )
        if not as_json:
            err.print(f"simulating {users} user(s) × {turns} turn(s) preferring {prefer.value} answers at {config.url}…")
        summary = simulate(config)
    except SimulationError as exc:
        err.print(f"[red]{exc}[/red]")
        raise typer.Exit(2) from None
    if as_json:
        print(json.dumps(summary.as_dict(), default=str))
    else:
        _print(summary)
    if summary.turns == 0:
        err.print("[red]No turn succeeded; see the errors above.[/red]")
        raise typer.Exit(1)


def _print(summary) -> None:
    data = summary.as_dict()
    fit = f"{summary.fitting}/{summary.judged}" if summary.judged else "0"
    err.print(f"{data['users']} users, {data['conversations']} conversations, {data['turns']} answers "
              f"({fit} fitted the preference) in {data['seconds']}s")
    table = Table("reaction", "count")
    for kind, n in data["reactions"].items():
        table.add_row(kind, str(n))
    Console().print(table)
    if data["errors"]:
        err.print("[yellow]errors: " + ", ".join(f"{k} {v}" for k, v in data["errors"].items()) + "[/yellow]")
        for sample in data["error_samples"][:3]:
            err.print(f"  [dim]{sample}[/dim]")
    else:
        err.print("errors: none")
    if data["extraction"]:
        job = data["extraction"]
        err.print(f"extraction job {job.get('id')}: {job.get('status')} {job.get('result') or job.get('error') or ''}")


def register(app: typer.Typer) -> None:
    app.command("simulate")(simulate_cmd)
