"""Operator panel "Training": the current (or latest) training run — status, step/total, loss,
ETA — and its loss curve from the run's progress.jsonl.

Design choices:
- The panel only shows; the numbers come from `TrainingPanelDeps.status()`, which the service
  wires to the trainer's own run-directory reader (`deploy.operator.training`), so `chat` never
  reads run directories or imports the trainer. "Train now" is the screen's job button.
- It refreshes with the screen and, while a run is active, on a `gr.Timer` every few seconds; the
  timer switches itself off when the run ends so an idle tab costs nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import gradio as gr
import pandas as pd

from deploy.operator.screen import PanelBuilder, PanelContext
from store import Store
from trainer.launch import active_run, latest_run, poll_training
from trainer.rundir import read_progress

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


# --------------------------------------------------------------------------- wiring
# Operator panel "Training": wires the trainer's run state into `deploy.operator.training`.
#
# The latest run is reconciled with `poll_training` on the way (a finished run's outcome lands in
# the store as soon as someone looks), and its loss curve is read from progress.jsonl: the train
# loss of every logged step, plus the eval loss where the run evaluated.

def training_status(store: Store) -> dict[str, Any]:
    run = active_run(store) or latest_run(store)
    if run is None:
        return {}
    status = poll_training(store, run.id)
    points = []
    for record in read_progress(Path(run.run_dir)):
        for key, series in (("loss", "train"), ("eval_loss", "eval")):
            if record.get(key) is not None and record.get("step") is not None:
                points.append({"step": record["step"], "loss": record[key], "series": series})
    state = status.state
    return {"run_id": run.id, "method": run.method, "status": status.run.status, "step": state.step,
            "max_steps": state.max_steps, "loss": state.loss, "eta_s": state.eta_s, "error": status.run.error,
            "active": status.run.status in ("queued", "running"), "points": points}


def operator_panel(services: Any) -> PanelBuilder:
    return build_training_panel(TrainingPanelDeps(status=lambda: training_status(services.store)))
