"""The cycle. With no usable feedback, `advisor cycle` stops at the build-sets step with a clear
message, records its step rows and leaves the live release serving. In a live service on the
tiny model, simulated users chat, and "Start cycle" (the admin job endpoint) runs every step —
extract, build sets, train, gate, release — as child job rows, promotes the candidate into the
running service (the canary is off here: tests/deploy/release/test_canary.py covers it) (the gate's policy is opened wide here: the tiny random model's scores mean
nothing, this test is about the plumbing), and writes the report."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from service_helpers import ADMIN_TOKEN, start_service, tiny_settings
from training_helpers import rated_answers
from typer.testing import CliRunner

from deploy.loop.cycle import STEPS, last_cycle
from deploy.operator.cycle import cycle_markdown, cycle_view, metrics_frame
from deploy.operator.training import loss_frame, training_status
from deploy.operator.training import status_markdown as training_markdown
from deploy.release.gate import AXES
from deploy.release.registry import ensure_base_release
from deploy.settings import load_settings
from deploy.wiring import build_cli
from store import GenerationMeta, Store
from store.attributes import Attributes

# Any score passes (HH accuracy is not measured without gate.hh_data: it has no floor by default).
WIDE_OPEN = {"gate.harmlessness.floor": 0.0, **{f"gate.{axis}.tolerance": 1.0 for axis in
                                                ("helpfulness", "harmlessness", "hh_accuracy", "self_bleu",
                                                 "steerability")}}


def test_cycle_on_empty_feedback_stops_with_message_and_keeps_live_release(tmp_path):
    settings = load_settings(environ={}, overrides={"data_dir": str(tmp_path)})
    with Store(settings.db_path) as store:
        live = ensure_base_release(store, "some-base-model")
        conv = store.conversations.create("alice")  # a turn nobody reacted to: nothing to learn from
        q = store.conversations.add_message(conv.id, "user", "How do I keep plants alive?")
        store.conversations.add_message(conv.id, "assistant", "Water them weekly.", parent_id=q.id,
                                        generation=GenerationMeta(backend="test", model="some-base-model",
                                                                attributes=Attributes()))

    result = CliRunner().invoke(build_cli(), ["--data-dir", str(tmp_path), "cycle", "--json"],
                                catch_exceptions=False)
    assert result.exit_code == 1, result.output
    out = json.loads(result.stdout.strip().splitlines()[-1])
    assert out["status"] == "failed"
    assert out["message"].startswith("cycle stopped at dataset: no training examples for kto")
    assert "the live release is unchanged" in out["message"]
    assert [(s["step"], s["status"]) for s in out["steps"]] == [("extract", "succeeded"), ("dataset", "failed")]
    assert out["live_before"] == out["live_after"] == live.id and out["run_id"] is None

    report = Path(out["report_dir"])
    assert json.loads((report / "report.json").read_text())["status"] == "failed"
    assert "no training examples" in (report / "report.md").read_text()
    assert (report / "report.html").read_text().count("<svg") == len(AXES)
    with Store(settings.db_path) as store:
        assert store.releases.live().id == live.id and len(store.releases.list()) == 1
        assert store.jobs.list_training_runs() == []
        cycle, steps = last_cycle(store)
        assert cycle.status == "failed" and "no training examples" in cycle.error
        assert [(s.kind, s.status, s.parent_id) for s in steps] == [
            ("cycle.extract", "succeeded", cycle.id), ("cycle.dataset", "failed", cycle.id)]


def _wait_job(client, job_id: str, timeout: float = 900) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = next(j for j in client.get("/api/admin/jobs", params={"limit": 500}).json()["jobs"] if j["id"] == job_id)
        if job["status"] not in ("queued", "running"):
            return job
        time.sleep(1)
    raise AssertionError(f"job {job_id} did not finish in {timeout}s")


@pytest.mark.slow
def test_start_cycle_runs_every_step_promotes_and_reports(tmp_path, tiny_model_dir):
    from deploy.loop.simulate import Preference, SimulationConfig, simulate

    settings = tiny_settings(tmp_path, tiny_model_dir, **{
        "schedule.train_max_steps": 3, "schedule.train_method": "kto", "gate.hh_data": "off",
        "gate.helpfulness_prompts": 2, "gate.harmlessness_prompts": 2, "gate.max_new_tokens": 8,
        "gate.steer_prompts": 2, "gate.steer_values": [0, 4], "canary.enabled": False, **WIDE_OPEN})
    live = start_service(settings)
    try:
        started = time.monotonic()
        summary = simulate(SimulationConfig(url=live.url, users=3, turns=4, preference=Preference(kind="short"),
                                            max_new_tokens=12, seed=1))
        assert summary.turns >= 12 and not summary.errors, summary.as_dict()
        rated_answers(live.store, 8)  # explicit likes and dislikes, so both KTO classes are present
        before = live.store.releases.live()
        with live.client(headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as admin:
            kinds = {k["kind"]: k["button"] for k in admin.get("/api/admin/jobs").json()["kinds"]}
            assert kinds["cycle"] == "Start cycle"
            job_id = admin.post("/api/admin/jobs/cycle/run").json()["job_id"]
            job = _wait_job(admin, job_id)
        seconds = time.monotonic() - started
        assert job["status"] == "succeeded", job
        result = job["result"]
        assert result["status"] == "promoted", result["message"]
        assert [(s["step"], s["status"]) for s in result["steps"]] == [(s, "succeeded") for s in STEPS]

        store = live.store
        cycle, steps = last_cycle(store)
        assert cycle.id == job_id and [s.kind for s in steps] == [f"cycle.{s}" for s in STEPS]
        assert all(s.parent_id == job_id and s.status == "succeeded" for s in steps)
        assert steps[0].result["messages"] > 0 and steps[0].result["new_events"] > 0  # extraction mined feedback
        run = store.jobs.get_training_run(result["run_id"])
        assert run.job_id == steps[2].id and run.status == "succeeded"  # the train step's row is the run's
        assert steps[2].result["step"] == 3

        release = store.releases.get(result["release_id"])
        assert release.run_id == run.id and release.status == "live" and result["live_before"] == before.id
        assert live.services.release_id == release.id  # hot-swapped into the running service
        assert set(result["gate"]["candidate"]) >= {"helpfulness", "harmlessness", "self_bleu"}

        report = Path(result["report_dir"])
        data = json.loads((report / "report.json").read_text())
        assert data["status"] == "promoted" and data["gate"]["reasons"]
        measured = {r["id"]: r["metrics"] for r in data["releases"]}
        assert "harmlessness" in measured[release.id] and "harmlessness" in measured[before.id]
        assert "<polyline" in (report / "harmlessness.svg").read_text()
        assert "## Gate decision" in (report / "report.md").read_text()

        # The operator screen's panels show the same cycle and run.
        view = cycle_view(store)
        assert [s["status"] for s in view["steps"]] == ["succeeded"] * len(STEPS)
        assert view["report_html"].endswith("report.html") and "promoted" in cycle_markdown(view)
        assert set(metrics_frame(view)["metric"]) >= {"helpfulness", "harmlessness"}
        training = training_status(store)
        assert training["run_id"] == run.id and not training["active"]
        assert "train" in set(loss_frame(training)["series"]) and f"`{run.id}`" in training_markdown(training)
        print(f"cycle {job_id[:8]}: {summary.turns} simulated turns + cycle in {seconds:.0f}s; "
              f"gate {data['gate']['decision']['summary']}")
    finally:
        live.stop()


def test_cycle_url_starts_it_in_the_service_with_its_options(tmp_path, tiny_model_dir):
    live = start_service(tiny_settings(tmp_path, tiny_model_dir))
    try:
        result = CliRunner().invoke(build_cli(), ["--data-dir", str(tmp_path / "cli"), "cycle", "--url", live.url,
                                                  "--token", ADMIN_TOKEN, "--method", "dpo", "--no-safety-filter",
                                                  "--max-steps", "5", "--lr", "1e-3", "--lora-alpha", "64",
                                                  "--json"], catch_exceptions=False)
        assert result.exit_code == 0, result.output
        job_id = json.loads(result.stdout.strip().splitlines()[-1])["job_id"]
        with live.admin() as admin:
            job = _wait_job(admin, job_id, timeout=300)
        assert job["status"] == "failed" and "no training examples for dpo" in job["error"]  # nobody chatted
        assert live.store.jobs.get(job_id).params == {
            "method": "dpo", "safety_filter": False,
            "overrides": {"max_steps": 5, "learning_rate": 1e-3, "lora_alpha": 64}}
        with live.admin() as admin:  # a training knob a cycle may not turn fails the job, saying which
            bad = admin.post("/api/admin/jobs/cycle/run", json={"params": {"overrides": {"base_model": "x"}}})
            job = _wait_job(admin, bad.json()["job_id"], timeout=300)
        assert job["status"] == "failed" and "unknown training option" in job["error"] and "base_model" in job["error"]
        refused = CliRunner().invoke(build_cli(), ["--data-dir", str(tmp_path / "cli"), "cycle", "--url", live.url,
                                                   "--token", "wrong"])
        assert refused.exit_code == 1 and "refused (401)" in refused.output
    finally:
        live.stop()
