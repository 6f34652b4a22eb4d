"""`advisor safety export`: the safety guard's refusals and the operators' marks on them, as
labelled safety data.

    advisor safety export --out FILE.jsonl [--marked-only]

One JSON object a line, newest first: {message_id, time, request, answer, verdict, score, judge,
operator_label}. `answer` is the model's text the guard withdrew (replaced answers; null when the
request was refused before the model was asked); `operator_label` is the latest mark ("wrong": it
should have been answered; "right"), or null.

Design choices:
- The operator's own file, like `advisor extract reviews export`: text as written (no redaction),
  for measuring and retraining the judge here. Audited as `export` with target "safety".
- It opens the database: while the service holds a DuckDB file, stop it or export from a copy.
"""

from __future__ import annotations

import json
from pathlib import Path

import typer
from rich.console import Console

from deploy.audit import audited, cli_actor
from deploy.cli.common import open_store, settings_of
from store.safety import labelled_safety_rows

err = Console(stderr=True)


def export_cmd(
    ctx: typer.Context,
    out: Path = typer.Option(..., "--out", "-o", help="The file to write (JSON lines)."),
    marked_only: bool = typer.Option(False, "--marked-only", help="Only refusals an operator marked."),
) -> None:
    """Write the guard's refused and replaced answers with the operators' marks (labelled safety data)."""
    settings = settings_of(ctx)
    with open_store(settings) as store, audited(store, cli_actor(), "export", "safety", surface="cli",
                                                marked_only=marked_only) as entry:
        rows = labelled_safety_rows(store, marked_only=marked_only)
        out.parent.mkdir(parents=True, exist_ok=True)
        with out.open("w", encoding="utf-8") as f:
            for row in rows:
                f.write(json.dumps(row, ensure_ascii=False) + "\n")
        entry.details.update(to=str(out), rows=len(rows))
    marked = sum(1 for r in rows if r["operator_label"])
    err.print(f"wrote {len(rows):,} guard decisions ({marked:,} marked by an operator) to {out}")


def register(app: typer.Typer) -> None:
    group = typer.Typer(help="The safety guard's decisions and the operators' marks on them.")
    group.command("export")(export_cmd)
    app.add_typer(group, name="safety")
