"""Operator panel "Last cycle": its steps with status and notes, the gate's decision with its
reasons, what the safety filter removed, and the metrics across releases from the cycle's report.

Design choices:
- The data comes from `CyclePanelDeps.last_cycle()` (wired by `deploy.operator.cycle` to the cycle
  job rows and the report's JSON), so `chat` reads no report files and imports no `deploy`.
- The metrics plot is a Gradio LinePlot over the report's per-release values (x = release order,
  oldest first), the same numbers the report's SVG plots draw; the report's HTML page, with
  those plots, is named by path for sharing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from deploy.loop.cycle import last_cycle
from deploy.loop.report import read_report
from deploy.operator.screen import PanelBuilder, PanelContext
from store import Job, Store

STEP_COLUMNS = ["step", "status", "started", "finished", "note / error"]


@dataclass
class CyclePanelDeps:
    # {} before the first cycle; else {"cycle": {id, status, trigger, created_at, error},
    # "steps": [{kind, status, started_at, finished_at, note, error}], "report": report.json, "report_html": path}
    last_cycle: Callable[[], dict]


def cycle_markdown(data: dict) -> str:
    if not data:
        return "**Last cycle:** none yet. \"Start cycle\" runs extract → sets → train → gate → canary (or promote) or reject."
    cycle, report = data["cycle"], data.get("report") or {}
    status = report.get("status") or cycle.get("status")
    lines = [f"**Last cycle** `{cycle['id'][:12]}` ({cycle.get('trigger')}, {str(cycle.get('created_at', ''))[:16]}"
             f") — **{status}**", report.get("message") or cycle.get("error") or ""]
    gate = report.get("gate") or {}
    axes = (gate.get("decision") or {}).get("axes") or []
    if axes:
        lines.append("**Gate decision** on `{}`:\n".format(gate.get("release_id"))
                     + "\n".join(f"- {'✅' if a.get('passed') else '❌'} {a.get('reason', '')}" for a in axes))
    card = report.get("dataset") or {}
    if card:
        lines.append(f"**Training set:** {card.get('n_train', 0)} train + {card.get('n_eval', 0)} eval rows; "
                     f"the safety filter ({card.get('safety_filter')}) removed {card.get('removed_by_filter', 0)}.")
    if data.get("report_html"):
        lines.append(f"Report: `{data['report_html']}`")
    return "\n\n".join(line for line in lines if line)


def steps_frame(data: dict) -> pd.DataFrame:
    return pd.DataFrame([
        {"step": s["kind"].removeprefix("cycle."), "status": s["status"],
         "started": str(s.get("started_at") or "")[:19], "finished": str(s.get("finished_at") or "")[:19],
         "note / error": (s.get("error") or s.get("note") or "")[:200]}
        for s in data.get("steps", [])
    ], columns=STEP_COLUMNS)


def metrics_frame(data: dict) -> pd.DataFrame:
    rows = []
    for i, release in enumerate((data.get("report") or {}).get("releases", []), start=1):
        for metric, value in release.get("metrics", {}).items():
            rows.append({"release #": i, "value": value, "metric": metric, "release": release["id"][:12]})
    return pd.DataFrame(rows, columns=["release #", "value", "metric", "release"])


def build_cycle_panel(deps: CyclePanelDeps) -> PanelBuilder:
    def build(ctx: PanelContext) -> None:
        gr.Markdown("#### Last cycle")
        summary = gr.Markdown(elem_id="cycle-summary")
        steps = gr.Dataframe(interactive=False, wrap=True, elem_id="cycle-steps")
        plot = gr.LinePlot(x="release #", y="value", color="metric", tooltip=["release", "metric", "value"],
                           title="Metrics across releases", height=260, elem_id="cycle-metrics")

        def load(request: gr.Request) -> list[Any]:
            if not ctx.is_admin(request):
                return ["", pd.DataFrame(columns=STEP_COLUMNS), None]
            data = deps.last_cycle()
            return [cycle_markdown(data), steps_frame(data), metrics_frame(data)]

        ctx.on_refresh(load, [summary, steps, plot])

    return build


# --------------------------------------------------------------------------- wiring
# Operator panel "Last cycle": the latest `cycle` job row, its step rows and its report, for
# `deploy.operator.cycle`.

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
    return build_cycle_panel(CyclePanelDeps(last_cycle=lambda: cycle_view(services.store)))
