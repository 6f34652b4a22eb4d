"""The `train` job in a live service: the periodic check skips with its reason; "Train now"
(the admin job endpoint) is refused while another run holds the trainer, then trains the tiny
model with the run's progress on its job row and ends succeeded."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from types import SimpleNamespace

import gradio as gr
import pytest
from conftest import cache_dir
from service_helpers import start_service, tiny_settings
from training_helpers import rated_answers, wait_until

from deploy.loop.training import runs_dir
from deploy.operator.screen import PanelContext
from deploy.operator.training import operator_panel as training_panel
from feedback.datasets import read_card
from trainer.launch import LaunchRequest, cancel_training, launch_training
from trainer.rundir import read_progress

MAX_STEPS = 3


@pytest.fixture(scope="module")
def live(tiny_model_dir, tmp_path_factory):
    data_dir = tmp_path_factory.mktemp("train-job")
    if (cache_dir() / "moderator").is_dir():  # the trained moderator (the safety filter), shared by slow tests
        shutil.copytree(cache_dir() / "moderator", data_dir / "models" / "moderator")
    settings = tiny_settings(data_dir, tiny_model_dir, **{
        "schedule.train_max_steps": MAX_STEPS, "schedule.min_new_feedback": 20, "schedule.train_method": "kto"})
    service = start_service(settings)
    yield service
    service.stop()


def _wait_job(client, job_id: str, timeout: float = 600) -> dict:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        jobs = client.get("/api/admin/jobs", params={"limit": 200}).json()["jobs"]
        job = next(j for j in jobs if j["id"] == job_id)
        if job["status"] not in ("queued", "running"):
            return job
        time.sleep(0.5)
    raise AssertionError(f"job {job_id} did not finish in {timeout}s")


def test_train_job_is_registered_with_its_button(live):
    with live.admin() as admin:
        kinds = {k["kind"]: k for k in admin.get("/api/admin/jobs").json()["kinds"]}
    assert kinds["train"]["button"] == "Train now"


def test_periodic_run_skips_with_reason_when_too_little_feedback(live):
    job = live.services.jobs.run_sync("train", trigger="schedule")
    assert job.status == "skipped"
    assert "new feedback item(s)" in job.result["reason"] and "waiting for 20" in job.result["reason"]
    assert live.store.jobs.list_training_runs(limit=5) == []


@pytest.mark.slow
def test_train_now_refused_while_busy_then_trains_with_progress(live, tiny_model_dir):
    store = live.store
    rated_answers(store, 12)
    # A long run started beside the service holds the trainer; it is cancelled below, so its
    # length only has to outlast one HTTP request, on any machine.
    blocker = launch_training(store, LaunchRequest(method="kto", runs_dir=runs_dir(live.services.settings),
                                            base_model=str(tiny_model_dir), overrides={"max_steps": 5000, "batch_size": 4},
                                            eval_fraction=0.0, trigger="test"))
    assert blocker.status == "running"
    with live.admin() as admin:
        refused_id = admin.post("/api/admin/jobs/train/run").json()["job_id"]
        refused = _wait_job(admin, refused_id, timeout=120)
        assert refused["status"] == "skipped", refused
        assert refused["result"]["reason"].startswith("refused: training run " + blocker.id)
        assert "in progress" in refused["result"]["reason"]
        # Cancel once it trains: a SIGTERM while the run still loads its data is recorded as a failure.
        wait_until(lambda: any(r.get("loss") is not None for r in read_progress(Path(blocker.run_dir))),
                   what="the blocking run's first step")
        assert cancel_training(store, blocker.id, timeout=120).run.status == "cancelled"

        started = time.monotonic()
        job_id = admin.post("/api/admin/jobs/train/run").json()["job_id"]
        job = _wait_job(admin, job_id)
    assert job["status"] == "succeeded", job
    result = job["result"]
    assert result["step"] == result["max_steps"] == MAX_STEPS and result["progress"] == f"{MAX_STEPS}/{MAX_STEPS}"
    assert result["loss"] is not None and result["method"] == "kto" and result["adapter_dir"].endswith("adapter")
    run = store.jobs.get_training_run(result["run_id"])
    # One run, one job row: the registry's row is the run's row.
    assert run.job_id == job_id and run.status == "succeeded"
    assert read_card(Path(run.run_dir)).safety_filter.startswith("moderator")  # Train now filters too
    assert not [r for r in store.jobs.list(kind="train", limit=50) if r.params.get("run_id") == run.id and r.id != job_id]

    # The operator screen's training panel shows this run and its loss curve, to admins only.
    loads = []
    ctx = PanelContext(store=lambda: store, identify=lambda request: request, denied="no",
                       refresh_triggers=[lambda fn, inputs, outputs, api_visibility=None: loads.append(fn)])
    with gr.Blocks():
        training_panel(live.services)(ctx)
    text, losses, timer = loads[0](SimpleNamespace(is_admin=True))
    assert f"`{run.id}` (kto) — **succeeded**, step {MAX_STEPS}/{MAX_STEPS}" in text
    assert list(losses[losses["series"] == "train"]["step"]) == list(range(1, MAX_STEPS + 1))
    assert loads[0](SimpleNamespace(is_admin=False))[0] == ""
    print(f"train-now run {run.id}: {MAX_STEPS} steps in {time.monotonic() - started:.1f}s, loss {result['loss']:.4f}")
