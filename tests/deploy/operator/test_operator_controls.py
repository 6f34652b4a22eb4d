"""Operator panels without a browser: run controls (inputs made from TrainingKnobs, Train now /
Start cycle with them, cancel, gate a finished run) and the canary panel (arms side by side)."""

from __future__ import annotations

import contextlib
from dataclasses import fields
from types import SimpleNamespace

from deploy.operator.canary import CanaryPanel, CanaryPanelDeps, arms_frame, status_markdown
from deploy.operator.controls import KNOBS, ControlsDeps, ControlsPanel, knob_params
from trainer.config import TrainingKnobs


class _Ctx:
    denied = "denied"

    def __init__(self, admin: bool = True) -> None:
        self.admin = admin
        self.audits: list = []

    def is_admin(self, request) -> bool:
        return self.admin

    def audited(self, request, action: str, target: str = "", **details):
        self.audits.append((action, target, details))
        return contextlib.nullcontext(SimpleNamespace(target=target))


def _controls(calls: list) -> ControlsPanel:
    return ControlsPanel(ControlsDeps(
        run_job=lambda kind, params: calls.append((kind, params)) or "job-1",
        cancel=lambda job_id: calls.append(("cancel", job_id)) or {},
        running=lambda: [{"id": "c1", "kind": "cycle"}],
        finished_runs=lambda: ["run-1"]))


def test_knob_inputs_come_from_training_knobs_and_reach_the_job():
    assert [f.name for f in KNOBS] == [f.name for f in fields(TrainingKnobs)]
    values = [None] * len(KNOBS)
    values[[f.name for f in KNOBS].index("max_steps")] = 40
    values[[f.name for f in KNOBS].index("learning_rate")] = 1e-3
    assert knob_params(values) == {"max_steps": 40, "learning_rate": 1e-3}
    calls: list = []
    panel = _controls(calls)
    note = panel.start(_Ctx(), "cycle", "dpo", values, None)
    assert "Cycle started" in note and calls == [("cycle", {"method": "dpo",
                                                           "overrides": {"max_steps": 40, "learning_rate": 1e-3}})]
    assert panel.start(_Ctx(admin=False), "train", "kto", values, None) == "denied"
    bad = [None] * len(KNOBS)
    bad[0] = 2.5  # max_steps must be whole
    assert "Not started" in panel.start(_Ctx(), "train", "kto", bad, None) and len(calls) == 1


def test_cancel_and_gate_buttons():
    calls: list = []
    panel = _controls(calls)
    assert "Cancelling cycle `c1`" in panel.cancel(_Ctx(), None) and ("cancel", "c1") in calls
    assert "Gating run `run-1`" in panel.gate(_Ctx(), "run-1", None) and ("gate", {"run_id": "run-1"}) in calls
    assert "Choose" in panel.gate(_Ctx(), None, None)


def test_canary_panel_shows_both_arms_and_acts():
    verdict = {"action": "continue", "reason": "collecting", "arms": {
        "live": {"answers": 40, "users": 10, "conversations": 20, "rates": {"like": 0.25, "bad": 0.1}},
        "canary": {"answers": 12, "users": 3, "conversations": 6, "rates": {"like": 0.5, "bad": None}}}}
    overview = {"canary": {"release_id": "r-1", "state": "running", "share": 0.2, "started_at": "2026-01-01T00:00",
                           "ends_at": "2026-01-02T00:00", "live_release": "base", "max_conversations": 200},
                "verdict": verdict}
    frame = arms_frame(verdict)
    rows = {r["measure"]: (r["live"], r["canary"]) for r in frame.to_dict("records")}
    assert rows["answers"] == ("40", "12") and rows["like rate"] == ("25.0%", "50.0%")
    assert rows["bad (dislike, rephrase or correction)"] == ("10.0%", "—")
    assert "`r-1`" in status_markdown(overview) and "collecting" in status_markdown(overview)
    done: list = []
    panel = CanaryPanel(CanaryPanelDeps(overview=lambda: overview, act=lambda a: done.append(a)))
    note, *_ = panel.act(_Ctx(), "rollback", None)
    assert note.startswith("✅") and done == ["rollback"]
    assert panel.act(_Ctx(admin=False), "promote", None)[0] == "denied" and done == ["rollback"]
    assert "none yet" in status_markdown({"canary": None})
    ended = {"canary": {**overview["canary"], "state": "inconclusive", "ended_by": "rule",
                        "outcome": "neither worse nor non-inferior shown; the live release stays"}, "verdict": verdict}
    text = status_markdown(ended)
    assert "**inconclusive**" in text and "Inconclusive:" in text and "the live release stays" in text
