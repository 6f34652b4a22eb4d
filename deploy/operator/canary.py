"""Operator panel "Canary": live and canary side by side with their online rates, the rule's
verdict with its intervals, and Check now / Promote / Roll back / Stop.

Design choices:
- The numbers are `deploy.release.canary.canary_overview`, the same as `GET /api/admin/canary`
  and `advisor release canary status`: judged afresh while the canary runs (nothing is acted on
  by looking), as last judged once it has ended.
- The buttons are the service's own (`check_in_service`, `finish_in_service`), as the admin API's
  `POST /api/admin/canary/{check|promote|rollback|stop}`; admin is checked on every click.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr
import pandas as pd

from deploy.operator.screen import PanelBuilder, PanelContext

ROWS = (("answers", "answers"), ("users", "users"), ("conversations", "conversations"),
        ("like", "like rate"), ("dislike", "dislike rate"), ("positive", "mined positive feedback"),
        ("rephrase", "rephrase rate"), ("correction", "correction rate"), ("continued", "conversation continued"),
        ("good", "good (like or positive)"), ("bad", "bad (dislike, rephrase or correction)"))


@dataclass
class CanaryPanelDeps:
    overview: Callable[[], dict]
    act: Callable[[str], Any]  # "check" | "promote" | "rollback" | "stop"


def arms_frame(verdict: dict | None) -> pd.DataFrame:
    arms = (verdict or {}).get("arms") or {}
    rows = []
    for key, label in ROWS:
        row = {"measure": label}
        for arm in ("live", "canary"):
            stats = arms.get(arm) or {}
            value = stats.get(key) if key in ("answers", "users", "conversations") else (stats.get("rates") or {}).get(key)
            row[arm] = "—" if value is None else (str(value) if isinstance(value, int) else f"{100 * value:.1f}%")
        rows.append(row)
    return pd.DataFrame(rows, columns=["measure", "live", "canary"])


def status_markdown(overview: dict) -> str:
    canary, verdict = overview.get("canary"), overview.get("verdict") or {}
    if not canary:
        return "**Canary:** none yet. A release that passes the gate serves a share of users first."
    lines = [f"**Canary** `{canary['release_id']}` — **{canary.get('state')}**, {100 * canary.get('share', 0):.0f}% of "
             f"users since {str(canary.get('started_at', ''))[:16].replace('T', ' ')} UTC, against live "
             f"`{canary.get('live_release') or 'base'}`; ends after {canary.get('max_conversations')} canary "
             f"conversations or at {str(canary.get('ends_at', ''))[:16].replace('T', ' ')} UTC."]
    if verdict:
        lines.append(f"**Rule:** {verdict.get('action')} — {verdict.get('reason')}")
    if canary.get("state") == "inconclusive":  # not a verdict on the release: it stays a candidate
        lines.append("**Inconclusive:** by its deadline the rule showed the canary neither worse than live nor "
                     "non-inferior; live stays, the canary no longer serves anyone.")
    if canary.get("outcome"):
        lines.append(f"**Ended** by {canary.get('ended_by')}: {canary['outcome']}")
    return "\n\n".join(lines)


class CanaryPanel:
    def __init__(self, deps: CanaryPanelDeps) -> None:
        self.deps = deps

    def view(self, ctx: PanelContext, request: Any) -> tuple[str, Any]:
        if not ctx.is_admin(request):
            return "", pd.DataFrame()
        overview = self.deps.overview()
        return status_markdown(overview), arms_frame(overview.get("verdict"))

    def act(self, ctx: PanelContext, action: str, request: Any) -> tuple:
        if not ctx.is_admin(request):
            return ctx.denied, "", pd.DataFrame()
        try:
            with ctx.audited(request, "canary", "", step=action):  # the audit log, with its outcome
                self.deps.act(action)
            note = f"✅ {action} done."
        except Exception as exc:  # the reason in words; nothing changed
            note = f"❌ Not done: {exc}"
        return (note, *self.view(ctx, request))

    def __call__(self, ctx: PanelContext) -> None:
        gr.Markdown("#### Canary")
        status = gr.Markdown(elem_id="canary-status")
        table = gr.Dataframe(interactive=False, elem_id="canary-arms")
        with gr.Row():
            buttons = {a: gr.Button(label, elem_id=f"canary-{a}", variant=v) for a, label, v in (
                ("check", "Check now", "secondary"), ("promote", "Promote canary", "primary"),
                ("rollback", "Roll back canary", "stop"), ("stop", "Stop canary", "secondary"))}
        note = gr.Markdown(elem_id="canary-note")

        def handler(action: str):
            def on_click(request: gr.Request):
                return self.act(ctx, action, request)
            return on_click

        def on_load(request: gr.Request):
            return self.view(ctx, request)

        for action, button in buttons.items():
            button.click(handler(action), [], [note, status, table], api_visibility="undocumented")
        ctx.on_refresh(on_load, [status, table])


def operator_panel(services: Any) -> PanelBuilder:
    from deploy.release.canary import canary_overview, finish_in_service

    def act(action: str) -> Any:
        if action == "check":  # the "canary" job now: mine the latest feedback, judge, act on the verdict
            job = services.jobs.run_sync("canary", trigger="manual")
            if job.status == "failed":
                raise RuntimeError(job.error)
            return job
        return finish_in_service(services, action, f"{action} by the operator", by="operator")

    return CanaryPanel(CanaryPanelDeps(overview=lambda: canary_overview(services.store, services.settings), act=act))
