"""Operator-tab panels, collected the way jobs are (`deploy.jobs.JOB_MODULES`).

Each module in `PANEL_MODULES` defines `operator_panel(services) -> PanelBuilder | None`: the
composition root hands it the running service's objects, and it returns a builder for
`chat.ui_operator` (None when the panel has nothing to show in this configuration, e.g. the
serving panel without vLLM). A panel's Gradio code lives in `chat/`; the module here only wires
service callables into it, so `chat` never imports `deploy`.
"""

from __future__ import annotations

from typing import Any

from chat.ui_operator import PanelBuilder
from deploy.modules import listed_modules

# Modules that add operator panels; each defines `operator_panel(services)`. Missing ones are skipped.
PANEL_MODULES: list[str] = ["deploy.panel_serving", "deploy.panel_releases", "deploy.panel_training", "deploy.panel_cycle"]


def operator_panels(services: Any) -> list[PanelBuilder]:
    builders = []
    for module in listed_modules(PANEL_MODULES):
        builder = module.operator_panel(services)
        if builder is not None:
            builders.append(builder)
    return builders
