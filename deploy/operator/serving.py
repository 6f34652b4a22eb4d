"""Operator panel "Serving": what answers the chat right now, and whether it is up.

Design choices:
- Shown for every backend, with what applies: kind, model, health (ok, or down with the error)
  and the live release for all; the server URL and the LoRA adapters loaded in it (vLLM's
  `/v1/models`) for an OpenAI-compatible server; the device for the transformers ones. An
  operator looking at a transformers deployment still wants to know it is healthy.
- The panel gets one callable, `load() -> dict` (the state gathered by `deploy.operator.serving`),
  so this module never imports `deploy`; `serving_markdown(state)` is a pure function, testable
  without a browser.
- A live adapter the server does not list is flagged: that is the one state where answers would
  silently come from the base model (or fail) after a vLLM restart.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr

from chat.backends import BackendError
from deploy.operator.screen import PanelContext


def serving_markdown(state: dict) -> str:
    """The panel's text for a state dict: kind, model, base_url, device, health, release, adapter."""
    health = state.get("health") or {}
    lines = ["#### Serving"]
    where = f" · **server** `{state['base_url']}`" if state.get("base_url") else ""
    device = f" · **device** {health['device']}" if health.get("device") else ""
    lines.append(f"**Backend** {state.get('kind', '?')} · **model** `{state.get('model') or '?'}`{where}{device}")
    if health.get("ok"):
        status = "✅ ok"
        if health.get("reloaded"):
            status += f" (re-loaded adapter `{health['reloaded']}` into a restarted server)"
    else:
        status = f"❌ down — {health.get('error') or 'no answer'}"
    lines.append(f"**Health** {status}")
    release, adapter = state.get("release"), state.get("adapter")
    live = f"`{release}`" if release else "none applied"
    if adapter:
        live += f", adapter `{adapter}`"
    elif release:
        live += " (the base model, no adapter)"
    lines.append(f"**Live release** {live}")
    if state.get("warning"):
        lines.append(f"⚠️ {state['warning']}")
    adapters = health.get("adapters")
    if adapters is not None and health.get("ok"):
        if adapter and adapter not in adapters:
            lines.append(f"⚠️ The live adapter `{adapter}` is not loaded in the server.")
        if adapters:
            rows = "\n".join(f"| `{name}` | `{path}` | {'live' if name == adapter else ''} |"
                             for name, path in sorted(adapters.items()))
            lines.append("| loaded adapter | path | |\n|---|---|---|\n" + rows)
        else:
            lines.append("No LoRA adapters loaded in the server.")
    return "\n\n".join(lines)


@dataclass
class ServingPanel:
    """The panel builder (`deploy.operator.screen.PanelBuilder`): `load()` gathers the state."""

    load: Callable[[], dict]

    def __call__(self, ctx: PanelContext) -> None:
        with gr.Accordion("Serving", open=True):
            text = gr.Markdown(elem_id="operator-serving")

        def refresh(request: gr.Request) -> Any:
            if not ctx.is_admin(request):
                return ""
            try:
                return serving_markdown(self.load())
            except Exception as exc:  # a status panel must never break the screen
                return f"#### Serving\n\nCould not read the serving state: {exc}"

        ctx.on_refresh(refresh, [text])


# --------------------------------------------------------------------------- wiring
# Wires the operator screen's "Serving" panel (`deploy.operator.serving`) to the running service.
#
# `serving_state(services)` gathers what the panel shows from the backend's `health()` (which, for
# vLLM, lists the loaded adapters and re-loads a live one a restarted server forgot) and the
# service's live release. The panel is shown for every backend kind: health and the live release
# matter everywhere; the server URL and adapters appear only where they exist.

def serving_state(services: Any) -> dict:
    backend = services.backend
    if backend is None:
        return {"kind": services.settings.backend.kind, "health": {"ok": False, "error": "the service is starting"}}
    try:
        health = backend.health()
    except Exception as exc:  # a broken backend is exactly what this panel must show, not hide
        health = {"ok": False, "error": str(exc)}
    try:
        model = health.get("model") or backend.model
    except BackendError:  # a server that is down cannot name its model
        model = services.settings.backend.model or None
    return {
        "kind": backend.kind,
        "model": model,
        "base_url": getattr(backend, "base_url", None),
        "health": health,
        "release": services.release_id,
        "adapter": backend.active_adapter,
        "warning": services.release_warning,
    }


def operator_panel(services: Any):
    return ServingPanel(load=lambda: serving_state(services))
