"""Wires the operator tab's "Serving" panel (`chat.ui_panel_serving`) to the running service.

`serving_state(services)` gathers what the panel shows from the backend's `health()` (which, for
vLLM, lists the loaded adapters and re-loads a live one a restarted server forgot) and the
service's live release. The panel is shown for every backend kind: health and the live release
matter everywhere; the server URL and adapters appear only where they exist.
"""

from __future__ import annotations

from typing import Any

from chat.backends import BackendError


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
    from chat.ui_panel_serving import ServingPanel

    return ServingPanel(load=lambda: serving_state(services))
