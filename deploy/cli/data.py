"""`advisor db stats | export | forget`: the store's contents, and the right to be forgotten.

`export` and `forget` are written to the audit log (`deploy.audit`) with the OS user as actor;
`forget --url` asks the running service instead, which records the admin token as actor. Every
export is also recorded with its path (`note_export`), and `forget` names the recorded exports
outside the data directory that may still hold the user's data (it purges those inside).
"""

from __future__ import annotations

import json
import sys
from enum import Enum
from pathlib import Path
from typing import Optional
from urllib.parse import quote

import typer
from rich.console import Console
from rich.table import Table

from deploy.audit import audited, cli_actor, note_export
from deploy.cli.common import call_service, err, open_store, settings_of
from deploy.loop.privacy import forget_everywhere, training_data_rules, unreached_sentence
from feedback.export import SharingRules, export_jsonl, export_parquet
from store.privacy import STDOUT


class ExportFormat(str, Enum):
    jsonl = "jsonl"
    parquet = "parquet"


def db_stats(ctx: typer.Context, as_json: bool = typer.Option(False, "--json")) -> None:
    """Row counts, schema version and the live release."""
    with open_store(settings_of(ctx)) as store:
        stats = store.stats()
    if as_json:
        print(json.dumps(stats, indent=2, default=str))
        return
    table = Table("table", "rows")
    for name, count in stats["rows"].items():
        table.add_row(name, f"{count:,}")
    Console().print(table)
    Console().print(
        f"schema v{stats['schema_version']} · likes {stats['likes']} · dislikes {stats['dislikes']} · "
        f"live release {stats['live_release'] or '(base model)'} · {stats['path']}"
    )


def export(
    ctx: typer.Context,
    fmt: ExportFormat = typer.Option(ExportFormat.jsonl, "--format", "-f", help="jsonl (one conversation a line) or parquet (one message a row)."),
    out: Optional[Path] = typer.Option(None, "--out", "-o", help="Output file; default: stdout for jsonl, <data_dir>/export.parquet for parquet."),
    for_sharing: bool = typer.Option(False, "--for-sharing", help="Leave out users who did not consent and replace "
                                     "personal data by placeholders (jsonl only)."),
) -> None:
    """Export every conversation with its messages, generation metadata and ratings."""
    settings = settings_of(ctx)
    sharing = None
    if for_sharing:
        if fmt is ExportFormat.parquet:
            err.print("[red]--for-sharing writes JSON lines: use --format jsonl.[/red]")
            raise typer.Exit(2)
        sharing = SharingRules(**training_data_rules(settings))
    actor, what = cli_actor(), fmt.value + (" for sharing" if for_sharing else "")
    with open_store(settings) as store, audited(store, actor, "export", fmt.value, surface="cli",
                                                 for_sharing=for_sharing) as entry:
        if fmt is ExportFormat.parquet:
            path = out or settings.data_path / "export.parquet"
            n = export_parquet(store, path)
            err.print(f"wrote {n:,} messages to {path}")
        elif out is None:
            from feedback.export import iter_conversation_records

            path, n = STDOUT, 0
            for record in iter_conversation_records(store, sharing=sharing):
                sys.stdout.write(json.dumps(record, default=str, ensure_ascii=False) + "\n")
                n += 1
            err.print(f"exported {n:,} conversations")
        else:
            path, n = out, export_jsonl(store, out, sharing=sharing)
            err.print(f"wrote {n:,} conversations to {out}")
        where = note_export(store, entry, actor, what, path, n)
    err.print(f"recorded this export ({where}): forgetting a user later names it when it lies outside "
              f"the data directory ({settings.data_path}), which forgetting cannot purge")


def forget(
    ctx: typer.Context,
    user: str = typer.Argument(..., help="The user id (see `advisor export`) or user name."),
    yes: bool = typer.Option(False, "--yes", "-y", help="Do not ask for confirmation."),
    url: Optional[str] = typer.Option(None, "--url", help="Ask the running service (it holds the database)."),
    token: Optional[str] = typer.Option(None, "--token", help="Admin token for --url (default: server.admin_token)."),
) -> None:
    """Delete everything a user wrote and everything derived from it, every copy under the data
    directory (their sessions end too)."""
    settings = settings_of(ctx)
    copies = None
    if url:
        if not yes and not typer.confirm(f"Delete all data of user {user}?"):
            raise typer.Exit(1)
        path = f"/api/admin/users/{quote(user, safe='')}/forget?confirm=true"
        body = call_service(url, token or settings.server.admin_token, path)
        user_id, counts, copies, unreached = (body["user_id"], body["deleted"], body.get("copies"),
                                              body.get("unreached_exports", []))
    else:
        with open_store(settings) as store:
            named = store.users.get_by_name(user)
            user_id = named.id if named else user
            if not yes and not typer.confirm(f"Delete all data of user {user_id}?"):
                raise typer.Exit(1)
            with audited(store, cli_actor(), "forget", user_id, surface="cli") as entry:
                out = forget_everywhere(store, settings, user_id)
                counts, copies, unreached = out["deleted"], out["copies"], out["unreached_exports"]
                entry.details.update(deleted=counts, unreached_exports=unreached)
    total = sum(v for k, v in counts.items() if k != "users")
    err.print(f"deleted {total:,} rows of user {user_id}: " + ", ".join(f"{k} {v}" for k, v in counts.items()))
    if copies:
        err.print(f"copies under the data directory: {copies['rows_removed']} row(s) removed and "
                  f"{copies['texts_replaced']} text(s) replaced in {copies['files_changed']} file(s)"
                  + (f"; could not read: {copies['errors']}" if copies["errors"] else ""))
    err.print(unreached_sentence(unreached))


def register(app: typer.Typer) -> None:
    db_app = typer.Typer(help="The conversation store.", no_args_is_help=True)
    db_app.command("stats")(db_stats)
    app.add_typer(db_app, name="db")
    app.command("export")(export)
    app.command("forget")(forget)
