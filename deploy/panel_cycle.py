"""Operator panel "Last cycle": the latest `cycle` job row, its step rows and its report, for
`chat.ui_panel_cycle`."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chat.ui_operator import PanelBuilder
from deploy.cycle import last_cycle
from deploy.report import read_report
from feedback.store import Job, Store


def _job(job: Job) -> dict[str, Any]:
    return {"id": job.id, "kind": job.kind, "status": job.status, "trigger": job.trigger, "error": job.error,
            "created_at": job.created_at, "started_at": job.started_at, "finished_at": job.finished_at,
            "note": job.result.get("note") or job.result.get("progress") or ""}


def cycle_view(store: Store) -> dict[str, Any]:
    cycle, steps = last_cycle(store)
    if cycle is None:
        return {}
    report_dir = cycle.result.get("report_dir")
    notes = {s.get("job_id"): s.get("note", "") for s in cycle.result.get("steps", [])}
    rows = [{**_job(s), "note": notes.get(s.id) or _job(s)["note"]} for s in steps]
    html = Path(report_dir) / "report.html" if report_dir else None
    return {"cycle": _job(cycle), "steps": rows, "report": read_report(report_dir) or cycle.result,
            "report_html": str(html) if html and html.exists() else None}


def operator_panel(services: Any) -> PanelBuilder:
    from chat.ui_panel_cycle import CyclePanelDeps, build_cycle_panel

    return build_cycle_panel(CyclePanelDeps(last_cycle=lambda: cycle_view(services.store)))
