"""`advisor extract reviews export | precision`: what operators' reviews of mined feedback say.

    advisor extract reviews export --out FILE [--extractor fast|llm]   gold JSON lines
    advisor extract reviews precision [--extractor ...] [--json]       per category and week

Design choices:
- The export is the operator's own file, like `advisor export`: user text as written (no PII
  redaction; the reviews' gold file is for measuring extractors here, not for sharing). It is
  audited as `export` with target "reviews-gold", like every export.
- The file loads with `feedback.extract.gold.load_gold`, so `advisor extract eval --gold FILE`
  scores any extractor on what people reviewed (the reviewed messages only).
- These commands open the database: while the service holds it, read the same numbers from
  `GET /api/admin/feedback/precision`.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from deploy.cli.common import open_store, settings_of

err = Console(stderr=True)


def export_cmd(
    ctx: typer.Context,
    out: Path = typer.Option(..., "--out", "-o", help="The gold file to write (JSON lines)."),
    extractor: Optional[str] = typer.Option(None, "--extractor", "-e", help="Only events of this extractor."),
) -> None:
    """Write reviewed events as gold JSON lines: each reviewed user message with its conversation."""
    from deploy.audit import audited, cli_actor, note_export
    from feedback.extract.reviews import export_gold

    settings, actor = settings_of(ctx), cli_actor()
    with open_store(settings) as store, audited(store, actor, "export", "reviews-gold", surface="cli",
                                                extractor=extractor) as entry:
        n = export_gold(store, out, extractor=extractor)
        note_export(store, entry, actor, "reviews-gold", out, n)
    err.print(f"wrote {n:,} reviewed messages to {out} (recorded: `advisor forget` names this file if it "
              "lies outside the data directory)")


def precision_cmd(
    ctx: typer.Context,
    extractor: Optional[str] = typer.Option(None, "--extractor", "-e", help="Only events of this extractor."),
    as_json: bool = typer.Option(False, "--json", help="Print one JSON object."),
) -> None:
    """Estimated precision per category (reviewed events called correct), Wilson 95% intervals."""
    from feedback.extract.reviews import precision

    with open_store(settings_of(ctx)) as store:
        result = precision(store.events.reviewed_events(extractor=extractor))
    if as_json:
        print(json.dumps(result))
        return
    table = Table("week", "category", "reviewed", "precision", "95% interval")
    rows = [*result["weeks"], *({"week": "all", "category": c, **v} for c, v in result["overall"].items())]
    for r in rows:
        if r["reviewed"]:
            table.add_row(r["week"], r["category"], str(r["reviewed"]), f"{r['precision']:.2f}",
                          f"{r['low']:.2f} – {r['high']:.2f}")
    Console().print(table)


def register(extract_group: typer.Typer) -> None:
    group = typer.Typer(help="Operators' reviews of mined feedback: export as gold, estimated precision.")
    group.command("export")(export_cmd)
    group.command("precision")(precision_cmd)
    extract_group.add_typer(group, name="reviews")
