"""Operator panel "Run controls": Train now / Start cycle with a method and training knobs, cancel
the running training or cycle, and gate a finished run.

Design choices:
- The knob inputs are made from `trainer.config.TrainingKnobs`, field by field (its help text is
  the input's label), the one declaration the CLI's flags and the job API's `overrides` come
  from: a knob added there appears here without touching this file. An empty input keeps the
  method's default.
- The buttons start the service's own jobs (`train`, `cycle`, `gate`) with the same `params` the
  admin API takes, so the UI and `POST /api/admin/jobs/{kind}/run` cannot drift apart; a cancel is
  `deploy.loop.cycle_jobs.cancel_run_job`, as `POST /api/admin/jobs/{id}/cancel`.
- Admin is checked on the server on every click.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any

import gradio as gr

from deploy.operator.screen import PanelBuilder, PanelContext
from trainer.config import METHODS, TrainingKnobs

KNOBS = [f for f in fields(TrainingKnobs)]


@dataclass
class ControlsDeps:
    run_job: Callable[[str, dict], str]  # (kind, params) -> the new job row's id
    cancel: Callable[[str], dict]  # job id -> what was done
    running: Callable[[], list[dict]]  # the running train/cycle jobs: {"id", "kind"}
    finished_runs: Callable[[], list[str]]  # succeeded training runs not gated yet, newest first
    default_method: str = "kto"


def knob_params(values: list[Any]) -> dict:
    """The knob inputs' values as a job's `overrides` (empty inputs left out)."""
    return {f.name: v for f, v in zip(KNOBS, values) if v not in (None, "")}


class ControlsPanel:
    def __init__(self, deps: ControlsDeps) -> None:
        self.deps = deps

    def start(self, ctx: PanelContext, kind: str, method: str, values: list[Any], request: Any) -> str:
        if not ctx.is_admin(request):
            return ctx.denied
        params = {"method": method or self.deps.default_method}
        overrides = knob_params(values)
        try:
            TrainingKnobs.from_mapping(overrides)  # a typo is told here, not in a failed job row
            if overrides:
                params["overrides"] = overrides
            job_id = self.deps.run_job(kind, params)
        except Exception as exc:  # the reason in words
            return f"❌ Not started: {exc}"
        what = "Training run" if kind == "train" else "Cycle"
        return f"✅ {what} started (job `{job_id}`, {params['method']}" + (f", {overrides}" if overrides else "") + ")."

    def cancel(self, ctx: PanelContext, request: Any) -> str:
        if not ctx.is_admin(request):
            return ctx.denied
        running = self.deps.running()
        if not running:
            return "Nothing to cancel: no training run or cycle is running."
        done = []
        for job in running:
            try:
                self.deps.cancel(job["id"])
                done.append(f"{job['kind']} `{job['id']}`")
            except Exception as exc:  # noqa: BLE001 - say which one could not be cancelled
                done.append(f"{job['kind']} `{job['id']}` (not cancelled: {exc})")
        return "⏹ Cancelling " + ", ".join(done) + ": it stops at its next check; no release is made from it."

    def gate(self, ctx: PanelContext, run_id: str | None, request: Any) -> str:
        if not ctx.is_admin(request):
            return ctx.denied
        if not run_id:
            return "Choose a finished training run first."
        try:
            job_id = self.deps.run_job("gate", {"run_id": run_id})
        except Exception as exc:
            return f"❌ Not started: {exc}"
        return f"✅ Gating run `{run_id}` (job `{job_id}`); the decision appears under Release control."

    def runs(self, ctx: PanelContext, request: Any) -> Any:
        if not ctx.is_admin(request):
            return gr.update(choices=[], value=None)
        return gr.update(choices=self.deps.finished_runs())

    def __call__(self, ctx: PanelContext) -> None:
        gr.Markdown("#### Run controls")
        with gr.Row():
            method = gr.Dropdown(list(METHODS), value=self.deps.default_method, label="Method",
                                 elem_id="controls-method", scale=1)
            inputs = [gr.Number(value=None, label=f"{f.name}: {f.metadata.get('help', '')}",
                                elem_id=f"controls-{f.name}", scale=1) for f in KNOBS]
        with gr.Row():
            train = gr.Button("Train now with these", elem_id="controls-train")
            cycle = gr.Button("Start cycle with these", variant="primary", elem_id="controls-cycle")
            cancel = gr.Button("Cancel running training / cycle", variant="stop", elem_id="controls-cancel")
        with gr.Row():
            runs = gr.Dropdown(choices=[], label="Finished training run", elem_id="controls-runs", scale=4)
            gate = gr.Button("Gate this run", elem_id="controls-gate", scale=1)
        note = gr.Markdown(elem_id="controls-note")

        def on_train(m: str, *values_and_request: Any):
            *values, request = values_and_request
            return self.start(ctx, "train", m, list(values), request)

        def on_cycle(m: str, *values_and_request: Any):
            *values, request = values_and_request
            return self.start(ctx, "cycle", m, list(values), request)

        def on_cancel(request: gr.Request):
            return self.cancel(ctx, request)

        def on_gate(run_id: str | None, request: gr.Request):
            return self.gate(ctx, run_id, request)

        def on_load(request: gr.Request):
            return self.runs(ctx, request)

        train.click(on_train, [method, *inputs], [note], api_visibility="undocumented")
        cycle.click(on_cycle, [method, *inputs], [note], api_visibility="undocumented")
        cancel.click(on_cancel, [], [note], api_visibility="undocumented")
        gate.click(on_gate, [runs], [note], api_visibility="undocumented")
        ctx.on_refresh(on_load, [runs])


# --------------------------------------------------------------------------- wiring


def finished_runs(store: Any) -> list[str]:
    gated = {r.run_id for r in store.releases.list(limit=500) if r.run_id}
    return [r.id for r in store.jobs.list_training_runs(limit=50) if r.status == "succeeded" and r.id not in gated]


def running_jobs(store: Any) -> list[dict]:
    return [{"id": j.id, "kind": j.kind} for kind in ("cycle", "train")
            for j in store.jobs.list(kind=kind, limit=10) if j.status in ("queued", "running")]


def operator_panel(services: Any) -> PanelBuilder:
    from deploy.loop.cycle_jobs import cancel_run_job

    return ControlsPanel(ControlsDeps(
        run_job=lambda kind, params: services.jobs.run_now(kind, trigger="manual", params=params).id,
        cancel=lambda job_id: cancel_run_job(services.store, services.jobs.ctx.extras, job_id),
        running=lambda: running_jobs(services.store),
        finished_runs=lambda: finished_runs(services.store),
        default_method=services.settings.schedule.train_method,
    ))
