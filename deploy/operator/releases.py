"""Operator panel "Releases": what is live, the gate's last decision with its reasons, and a
release chooser with Promote and Roll back.

Design choices:
- The panel only shows and asks; promoting and rolling back are the service's callables
  (`ReleasesPanelDeps`, wired by `deploy.operator.releases`), the same ones behind
  `POST /api/admin/releases/...`, so the UI and the API cannot drift apart.
- Admin is checked on the server on every click, not only when the screen loads: a button that is
  visible is not a permission.
- A refusal (rejected by the gate, nothing to roll back to, adapter fails to load) is shown as
  the reason in words; the live release is left as it was.
- "Last gate decision" is the release whose decision was written last by the gate (`gated_at`),
  not simply the newest release: a release made by hand has no gate decision.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr

from deploy.operator.screen import PanelBuilder, PanelContext
from deploy.release.registry import promote_in_service, rollback_in_service
from store import Release


@dataclass
class ReleasesPanelDeps:
    serving: Callable[[], dict]  # {"release": id or None, "warning": str or None}
    promote: Callable[[str, bool], Release]  # (release id, force) -> the live release; raises with the reason
    rollback: Callable[[], Release]


def last_gated(releases: list[Release]) -> Release | None:
    gated = [r for r in releases if r.decision.get("gated_at")]
    return max(gated, key=lambda r: r.decision["gated_at"]) if gated else None


def status_markdown(releases: list[Release], serving: dict) -> str:
    live = next((r for r in releases if r.status == "live"), None)
    if live is None:
        lines = ["**Live:** no release is live yet (the service answers with its base model)."]
    else:
        what = f"adapter `{live.adapter_path}`" if live.adapter_path else "the base model, no adapter"
        since = f", live since {live.promoted_at:%Y-%m-%d %H:%M}" if live.promoted_at else ""
        lines = [f"**Live:** `{live.id}` ({what}{since})"]
    if serving.get("release") and live is not None and serving["release"] != live.id:
        lines.append(f"⚠️ The service is still serving `{serving['release']}`; press Refresh in a moment.")
    if serving.get("warning"):
        lines.append(f"⚠️ {serving['warning']}")
    gated = last_gated(releases)
    if gated is None:
        lines.append("**Last gate decision:** none yet (no training run has been gated).")
    else:
        d = gated.decision
        verdict = "passed" if d.get("promote") else "rejected"
        against = d.get("live_release") or "the base model"
        lines.append(f"**Last gate decision:** `{gated.id}` {verdict} against `{against}` "
                     f"({str(d.get('gated_at', ''))[:16].replace('T', ' ')} UTC), now {gated.status}.")
        reasons = [f"- {'✅' if a.get('passed') else '❌'} {a.get('reason', '')}" for a in d.get("axes", [])]
        if reasons:
            lines.append("\n".join(reasons))
    return "\n\n".join(lines)


def choices(releases: list[Release], forgotten: dict[str, int] | None = None) -> list[tuple[str, str]]:
    out = []
    for r in releases:
        summary = r.decision.get("summary", "")
        label = f"{r.id} · {r.status}" + (f" · {summary[:70]}" if summary else "")
        if (forgotten or {}).get(r.id):
            label += f" · ⚠ trained on data of {forgotten[r.id]} user(s) since deleted"
        out.append((label, r.id))
    return out


class ReleasesPanel:
    """The panel builder (called with the screen's `PanelContext`); its handlers are methods so
    they can be exercised without a browser."""

    def __init__(self, deps: ReleasesPanelDeps) -> None:
        self.deps = deps

    def view(self, ctx: PanelContext) -> tuple[str, Any]:
        store = ctx.store()
        releases = store.releases.list(limit=200)
        forgotten = store.privacy.forgotten_users_per_release()
        text = status_markdown(releases, self.deps.serving())
        marked = [r for r in releases if forgotten.get(r.id) and r.status in ("live", "candidate")]
        if marked:
            text += "\n\n" + "\n".join(
                f"⚠️ `{r.id}` ({r.status}) was trained on data of {forgotten[r.id]} user(s) who have since asked to be "
                "forgotten: roll it back or retire it, or start a cycle (it trains without them)." for r in marked)
        return text, gr.update(choices=choices(releases, forgotten))

    def load(self, ctx: PanelContext, request: Any) -> tuple[str, Any]:
        if not ctx.is_admin(request):
            return "", gr.update(choices=[], value=None)
        return self.view(ctx)

    def _act(self, ctx: PanelContext, fn: Callable[[], Release], done: str, request: Any, action: str,
             target: str = "", **details: Any) -> tuple:
        if not ctx.is_admin(request):  # checked on every click, not only when the screen loads
            return ctx.denied, "", gr.update(choices=[], value=None)
        try:
            with ctx.audited(request, action, target, **details) as entry:  # the audit log, with its outcome
                entry.target = fn().id
            message = done.format(id=entry.target)
        except Exception as exc:  # the reason, in words; the live release is unchanged
            message = f"❌ Not done: {exc}"
        return (message, *self.view(ctx))

    def promote(self, ctx: PanelContext, release_id: str | None, force: bool, request: Any) -> tuple:
        if not release_id:
            return ("Choose a release first.", *self.load(ctx, request))
        return self._act(ctx, lambda: self.deps.promote(release_id, bool(force)),
                         "✅ `{id}` is live: new answers use it; answers already streaming finish on theirs.", request,
                         "promote", release_id, force=bool(force))

    def rollback(self, ctx: PanelContext, request: Any) -> tuple:
        return self._act(ctx, self.deps.rollback, "✅ Rolled back: `{id}` is live again.", request, "rollback")

    def __call__(self, ctx: PanelContext) -> None:
        gr.Markdown("#### Release control")
        status = gr.Markdown(elem_id="releases-status")
        with gr.Row():
            chooser = gr.Dropdown(choices=[], label="Release", elem_id="releases-chooser", scale=4)
            force = gr.Checkbox(False, label="Even if the gate rejected it", elem_id="releases-force", scale=1)
            promote = gr.Button("Promote", variant="primary", elem_id="releases-promote", scale=1)
            rollback = gr.Button("Roll back", elem_id="releases-rollback", scale=1)
        note = gr.Markdown(elem_id="releases-note")

        def on_load(request: gr.Request):
            return self.load(ctx, request)

        def on_promote(release_id: str | None, force_value: bool, request: gr.Request):
            return self.promote(ctx, release_id, force_value, request)

        def on_rollback(request: gr.Request):
            return self.rollback(ctx, request)

        outputs = [note, status, chooser]
        promote.click(on_promote, [chooser, force], outputs, api_visibility="undocumented")
        rollback.click(on_rollback, [], outputs, api_visibility="undocumented")
        ctx.on_refresh(on_load, [status, chooser])


def build_releases_panel(deps: ReleasesPanelDeps) -> PanelBuilder:
    return ReleasesPanel(deps)


# --------------------------------------------------------------------------- wiring
# Operator panel "Releases": wires the running service's promote / roll back into
# `deploy.operator.releases` (the Gradio side), so the buttons do exactly what
# `POST /api/admin/releases/{id}/promote` and `/api/admin/releases/rollback` do: a hot swap that
# leaves answers in flight on the adapter they started with.

def operator_panel(services: Any) -> PanelBuilder:
    return build_releases_panel(ReleasesPanelDeps(
        serving=lambda: {"release": services.release_id, "warning": services.release_warning},
        promote=lambda release_id, force: promote_in_service(services, release_id, force=force),
        rollback=lambda: rollback_in_service(services),
    ))
