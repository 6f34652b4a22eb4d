"""The operator screen at `/operator`, a Gradio page of its own: the loop's health at a glance (admin only).

Its overview: a summary line (counts, serving backend, live release), counts over time
(conversations, turns, likes, dislikes) and ratings by reason as plots, the latest turns with
their ratings, the jobs table and the releases table. The panels below it are built elsewhere.

Design choices:
- Admin is checked on the server at every call (`PanelContext.is_admin`), not only by who can
  open the page: the page is a convenience, not a permission.
- The numbers come from `store.reports`, the same functions behind `/api/admin/*`.
- Action buttons come from `OperatorDeps.buttons()`: (job kind, label) pairs that the service's
  job registry collects from jobs registered with a `button=` label ("Run extraction now",
  "Start cycle"); a click calls `run_job(kind)`. Gradio cannot add components after the page is
  built, so `MAX_BUTTONS` slots are made up front and shown as needed.
- Panels (feedback, reviews, serving, releases, canary, run controls, training, cycle, audit)
  are builders in `OperatorDeps.panels`, listed by the composition root
  (`deploy.wiring.operator_panels`). Each is called with a `PanelContext`, builds its components
  and hooks its loader with `ctx.on_refresh`; the page load, Refresh and the bucket radio run the
  overview's loader and then every panel's, in order.
- Every action a click starts (a job button, a panel's promote or roll back) goes through
  `audited` with the signed-in admin as actor, so the audit log names who did it and the outcome.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import gradio as gr
import pandas as pd

from deploy.audit import actor_of, audited
from store import Store
from store.reports import (
    counts_over_time,
    jobs_table,
    latest_turns,
    overview,
    ratings_by_reason,
    releases_table,
)

MAX_BUTTONS = 6  # button slots made up front; Gradio cannot add components after build


@dataclass
class PanelContext:
    """What a panel builder gets: the store, the admin check and the screen's refresh hook."""

    store: Callable[[], Store]
    identify: Callable[[Any], Any]
    denied: str
    refresh_triggers: list[Any]  # hooks that chain a loader to the screen's refresh

    def is_admin(self, request: Any) -> bool:
        ident = self.identify(request)
        return ident is not None and bool(ident.is_admin)

    def audited(self, request: Any, action: str, target: str = "", **details: Any):
        """`deploy.audit.audited` for a click on this screen: the signed-in admin is the actor."""
        return audited(self.store(), actor_of(self.identify(request)), action, target, surface="operator", **details)

    def on_refresh(self, fn: Callable, outputs: list[Any], inputs: list[Any] | None = None) -> None:
        """Run `fn(*inputs, request)` whenever the screen refreshes (page load, Refresh, bucket change).
        `fn` must check `self.is_admin(request)` itself and return empty values if not."""
        for trigger in self.refresh_triggers:
            trigger(fn, inputs or [], outputs, api_visibility="undocumented")


PanelBuilder = Callable[[PanelContext], None]


@dataclass
class OperatorDeps:
    store: Callable[[], Store]
    buttons: Callable[[], list[tuple[str, str]]] = lambda: []  # (job kind, label)
    run_job: Callable[[str], str] = lambda kind: f"No job runner for {kind}."
    status: Callable[[], dict] = lambda: {}
    panels: list[PanelBuilder] = field(default_factory=list)


def _short(text: Any, n: int = 80) -> str:
    text = "" if text is None else str(text)
    return text if len(text) <= n else text[: n - 1] + "…"


def _frames(store: Store, bucket: str) -> dict[str, pd.DataFrame]:
    days = {"hour": 2, "day": 30, "week": 182}[bucket]
    counts = pd.DataFrame(counts_over_time(store, days=days, bucket=bucket), columns=["time", "series", "count"])
    if not counts.empty:
        counts["time"] = pd.to_datetime(counts["time"], utc=True)
    reasons = pd.DataFrame(ratings_by_reason(store, days=90), columns=["rating", "reason", "count"])
    turns = pd.DataFrame([
        {"time": t["time"][:19].replace("T", " "), "question": _short(t["question"]), "answer": _short(t["answer"]),
         "status": t["status"], "verb.": t["verbosity"], "compl.": t["complexity"],
         "rating": {1: "like", -1: "dislike"}.get(t["rating"], ""), "reasons": ", ".join(t["reasons"]),
         "comment": _short(t["comment"], 60), "latency ms": t["latency_ms"], "tokens": t["tokens"],
         "release": (t["release"] or "base")[:10]}
        for t in latest_turns(store, limit=50)
    ], columns=["time", "question", "answer", "status", "verb.", "compl.", "rating", "reasons", "comment",
                "latency ms", "tokens", "release"])
    jobs = pd.DataFrame([
        {"kind": j["kind"], "status": j["status"], "trigger": j["trigger"],
         "started": (j["started_at"] or "")[:19].replace("T", " "),
         "finished": (j["finished_at"] or "")[:19].replace("T", " "),
         "result / error": _short(j["error"] or json.dumps(j["result"], default=str), 120)}
        for j in jobs_table(store, limit=50)
    ], columns=["kind", "status", "trigger", "started", "finished", "result / error"])
    releases = pd.DataFrame([
        {"release": r["id"][:12], "status": r["status"], "base model": r["base_model"],
         "created": (r["created_at"] or "")[:19].replace("T", " "),
         "promoted": (r["promoted_at"] or "")[:19].replace("T", " "),
         "decision": _short(json.dumps(r["decision"], default=str), 120)}
        for r in releases_table(store, limit=50)
    ], columns=["release", "status", "base model", "created", "promoted", "decision"])
    return {"counts": counts, "reasons": reasons, "turns": turns, "jobs": jobs, "releases": releases}


def _summary(store: Store, status: dict) -> str:
    s = overview(store)
    rows = s["rows"]
    backend = status.get("backend") or {}
    release = status.get("release") or "base model (no live release)"
    warning = f"\n\n⚠️ {status['warning']}" if status.get("warning") else ""
    return (
        f"**Conversations** {rows['conversations']:,} · **answers** {rows['generations']:,} · "
        f"**likes** {s['rated_liked']:,} · **dislikes** {s['rated_disliked']:,} · "
        f"**mined feedback** {rows['feedback_events']:,} · **jobs** {rows['jobs']:,}\n\n"
        f"Serving **{backend.get('model', '?')}** ({backend.get('kind', '?')}), release **{release}**{warning}"
    )


def build_operator(deps: OperatorDeps, identify: Callable[[Any], Any]) -> list[dict]:
    """Build the screen's contents (inside the caller's `gr.Blocks`); returns the kwargs of the
    refresh events (the overview's, then each panel's) that the page load chains to, in order."""
    denied = "This page is for operators. Sign in as the admin at [/signin](/signin)."
    summary = gr.Markdown(elem_id="operator-summary")
    with gr.Row():
        bucket = gr.Radio(["hour", "day", "week"], value="day", label="Bucket", scale=2, elem_id="operator-bucket")
        refresh = gr.Button("Refresh", scale=1, elem_id="operator-refresh")
    with gr.Row():
        action_buttons = [gr.Button(visible=False, elem_id=f"operator-action-{i}") for i in range(MAX_BUTTONS)]
    action_kinds = gr.State([])
    action_note = gr.Markdown(elem_id="operator-action-note")
    with gr.Row():
        counts_plot = gr.LinePlot(x="time", y="count", color="series", title="Counts over time",
                                  elem_id="operator-counts", height=280)
        reasons_plot = gr.BarPlot(x="reason", y="count", color="rating", title="Ratings by reason",
                                  elem_id="operator-reasons", height=280)
    gr.Markdown("#### Latest turns")
    turns_table = gr.Dataframe(interactive=False, wrap=True, elem_id="operator-turns", max_height=420)
    with gr.Row():
        with gr.Column():
            gr.Markdown("#### Jobs")
            jobs_df = gr.Dataframe(interactive=False, wrap=True, elem_id="operator-jobs", max_height=300)
        with gr.Column():
            gr.Markdown("#### Releases")
            releases_df = gr.Dataframe(interactive=False, wrap=True, elem_id="operator-releases", max_height=300)
    panel_loads: list[dict] = []

    def hook(fn, inputs, outputs, api_visibility="undocumented"):
        panel_loads.append({"fn": fn, "inputs": inputs, "outputs": outputs, "api_visibility": api_visibility})

    ctx = PanelContext(store=deps.store, identify=identify, denied=denied, refresh_triggers=[hook])
    for panel in deps.panels:
        panel(ctx)

    outputs = [summary, counts_plot, reasons_plot, turns_table, jobs_df, releases_df, action_kinds, *action_buttons]

    def load(bucket_value: str, request: gr.Request):
        ident = identify(request)
        if ident is None or not ident.is_admin:
            empty = pd.DataFrame()
            return [denied, None, None, empty, empty, empty, [],
                    *[gr.update(visible=False) for _ in action_buttons]]
        store = deps.store()
        frames = _frames(store, bucket_value or "day")
        buttons = deps.buttons()[:MAX_BUTTONS]
        updates = [gr.update(visible=i < len(buttons), value=buttons[i][1] if i < len(buttons) else "")
                   for i in range(MAX_BUTTONS)]
        return [_summary(store, deps.status()), frames["counts"], frames["reasons"], frames["turns"],
                frames["jobs"], frames["releases"], [k for k, _ in buttons], *updates]

    kwargs = {"fn": load, "inputs": [bucket], "outputs": outputs, "api_visibility": "undocumented"}
    for event in (refresh.click, bucket.change):
        dep = event(**kwargs)
        for panel_load in panel_loads:
            dep.then(**panel_load)

    def make_action(i: int):
        def act(kinds: list[str], request: gr.Request) -> str:
            ident = identify(request)
            if ident is None or not ident.is_admin:
                return denied
            if i >= len(kinds):
                return "That action is no longer available; press Refresh."
            try:
                with audited(deps.store(), actor_of(ident), "job", kinds[i], surface="operator"):
                    return deps.run_job(kinds[i])
            except Exception as exc:  # show the reason, keep the screen alive
                return f"Could not start {kinds[i]}: {exc}"

        return act

    for i, button in enumerate(action_buttons):
        button.click(make_action(i), [action_kinds], [action_note], api_visibility="undocumented")
    return [kwargs, *panel_loads]


def build_operator_page(deps: OperatorDeps, identify: Callable[[Any], Any]) -> gr.Blocks:
    """The operator screen as a page of its own: its overview and panels refresh on page load."""
    with gr.Blocks(title="Advisor · Operator", fill_width=True) as page:
        gr.Markdown("## Advisor · operator screen  \n[Back to the chat](/) · [Sign out](/signout)")
        refreshes = build_operator(deps, identify)
        load = None
        for refresh in refreshes:
            load = page.load(**refresh) if load is None else load.then(**refresh)
    page.queue(default_concurrency_limit=16)
    return page
