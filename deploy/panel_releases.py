"""Operator panel "Releases": wires the running service's promote / roll back into
`chat.ui_panel_releases` (the Gradio side), so the buttons do exactly what
`POST /api/admin/releases/{id}/promote` and `/api/admin/releases/rollback` do: a hot swap that
leaves answers in flight on the adapter they started with."""

from __future__ import annotations

from typing import Any

from chat.ui_operator import PanelBuilder


def operator_panel(services: Any) -> PanelBuilder:
    from chat.ui_panel_releases import ReleasesPanelDeps, build_releases_panel
    from deploy.registry import promote_in_service, rollback_in_service

    return build_releases_panel(ReleasesPanelDeps(
        serving=lambda: {"release": services.release_id, "warning": services.release_warning},
        promote=lambda release_id, force: promote_in_service(services, release_id, force=force),
        rollback=lambda: rollback_in_service(services),
    ))
