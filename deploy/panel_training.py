"""Operator panel "Training": wires the trainer's run state into `chat.ui_panel_training`.

The latest run is reconciled with `poll_training` on the way (a finished run's outcome lands in
the store as soon as someone looks), and its loss curve is read from progress.jsonl: the train
loss of every logged step, plus the eval loss where the run evaluated.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from chat.ui_operator import PanelBuilder
from feedback.store import Store
from trainer.launch import active_run, latest_run, poll_training
from trainer.rundir import read_progress


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
    from chat.ui_panel_training import TrainingPanelDeps, build_training_panel

    return build_training_panel(TrainingPanelDeps(status=lambda: training_status(services.store)))
