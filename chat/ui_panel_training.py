"""Operator panel "Training": the current (or latest) training run — status, step/total, loss,
ETA — and its loss curve from the run's progress.jsonl.

Design choices:
- The panel only shows; the numbers come from `TrainingPanelDeps.status()`, which the service
  wires to the trainer's own run-directory reader (`deploy.panel_training`), so `chat` never
  reads run directories or imports the trainer. "Train now" is the job button of the tab.
- It refreshes with the tab and, while a run is active, on a `gr.Timer` every few seconds; the
  timer switches itself off when the run ends so an idle tab costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import gradio as gr
import pandas as pd

from chat.ui_operator import PanelBuilder, PanelContext

TICK_S = 3.0


@dataclass
class TrainingPanelDeps:
    # {} before the first run; else {"run_id", "method", "status", "step", "max_steps", "loss",
    # "eta_s", "error", "active", "created_at", "points": [{"step", "loss", "series"}]}
    status: Callable[[], dict]


def status_markdown(s: dict) -> str:
    if not s:
        return "**Training:** no run yet. \"Train now\" starts one on the feedback so far."
    step = f"{s.get('step', 0)}/{s['max_steps']}" if s.get("max_steps") else str(s.get("step", 0))
    parts = [f"**Training run** `{s['run_id']}` ({s.get('method')}) — **{s.get('status')}**, step {step}"]
    if s.get("loss") is not None:
        parts.append(f"loss {s['loss']:.4f}")
    if s.get("active") and s.get("eta_s") is not None:
        parts.append(f"about {s['eta_s']:.0f}s left")
    text = ", ".join(parts)
    if s.get("error"):
        text += f"\n\n⚠️ {s['error']}"
    return text


def loss_frame(s: dict) -> pd.DataFrame:
    return pd.DataFrame(s.get("points") or [], columns=["step", "loss", "series"])


def build_training_panel(deps: TrainingPanelDeps) -> PanelBuilder:
    def build(ctx: PanelContext) -> None:
        gr.Markdown("#### Training")
        summary = gr.Markdown(elem_id="training-status")
        plot = gr.LinePlot(x="step", y="loss", color="series", title="Loss", height=240, elem_id="training-loss")
        timer = gr.Timer(TICK_S, active=False)

        def load(request: gr.Request) -> list[Any]:
            if not ctx.is_admin(request):
                return ["", None, gr.Timer(active=False)]
            s = deps.status()
            return [status_markdown(s), loss_frame(s), gr.Timer(active=bool(s.get("active")))]

        outputs = [summary, plot, timer]
        ctx.on_refresh(load, outputs)
        timer.tick(load, [], outputs, api_visibility="undocumented")

    return build
