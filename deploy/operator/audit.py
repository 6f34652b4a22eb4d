"""Operator panel "Audit log": who did what to the loop and to people's data, and when — newest
first, with an action filter.

Design choices:
- The panel only shows; the rows come from the store's `audit.list`, the same read behind
  `GET /api/admin/audit` and `advisor audit`, which are also how to export it (JSON / JSON Lines).
- Admin is checked on the server on every load and filter change, like every panel.
- Details are shown as compact JSON without the columns of their own (outcome, surface), cut to
  a line: the full entry is one API call away.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import gradio as gr
import pandas as pd

from deploy.audit import ACTIONS
from deploy.operator.screen import PanelBuilder, PanelContext
from store import AuditEntry

COLUMNS = ["time", "actor", "action", "target", "outcome", "via", "details"]
ALL = "all actions"
LIMIT = 200


def audit_frame(entries: list[AuditEntry]) -> pd.DataFrame:
    rows = []
    for e in entries:
        rest = {k: v for k, v in e.details.items() if k not in ("outcome", "surface")}
        rows.append({"time": f"{e.created_at:%Y-%m-%d %H:%M:%S}" if e.created_at else "", "actor": e.actor,
                     "action": e.action, "target": e.target, "outcome": e.details.get("outcome", ""),
                     "via": e.details.get("surface", ""), "details": json.dumps(rest, default=str)[:200]})
    return pd.DataFrame(rows, columns=COLUMNS)


def build_audit_panel(entries: Callable[[str | None], list[AuditEntry]]) -> PanelBuilder:
    """`entries(action or None)`: the latest entries, newest first."""

    def build(ctx: PanelContext) -> None:
        gr.Markdown("#### Audit log\nExport: `GET /api/admin/audit?format=jsonl` or `advisor audit --json`.")
        action = gr.Dropdown([ALL, *ACTIONS], value=ALL, label="Action", elem_id="audit-action")
        table = gr.Dataframe(interactive=False, wrap=True, elem_id="audit-table", max_height=360)

        def load(chosen: str | None, request: gr.Request) -> Any:
            if not ctx.is_admin(request):
                return pd.DataFrame(columns=COLUMNS)
            return audit_frame(entries(None if chosen in (None, ALL) else chosen))

        ctx.on_refresh(load, [table], inputs=[action])
        action.change(load, [action], [table], api_visibility="undocumented")

    return build


# --------------------------------------------------------------------------- wiring

def operator_panel(services: Any) -> PanelBuilder:
    return build_audit_panel(lambda action: services.store.audit.list(limit=LIMIT, action=action))
