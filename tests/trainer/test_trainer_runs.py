"""Real training runs on the tiny random model: SFT/DPO/KTO save an adapter and log progress;
SIGKILL then restart resumes from the checkpoint; SIGTERM cancels; the store-facing launcher
refuses a second run and records the outcome. Each run is a few optimizer steps."""

from __future__ import annotations

import json
import os
import signal

import pytest
from training_helpers import make_run_dir, rated_answers, wait_until

from trainer.config import config_for
from trainer.launch import LaunchRequest, TrainingBusy, launch_training, poll_training, should_train
from trainer.process import cancel_run, start_run, wait_for
from trainer.rundir import EXIT_CANCELLED, EXIT_OK, read_metadata, read_progress, run_state

pytestmark = pytest.mark.slow


def _losses(run_dir):
    return [r["loss"] for r in read_progress(run_dir) if r.get("loss") is not None]


@pytest.mark.parametrize("method", ["sft", "dpo"])
def test_run_saves_adapter_progress_and_metadata(tmp_path, tiny_model_dir, method):
    run_dir = make_run_dir(tmp_path / "run", method, n=8, n_eval=4)
    cfg = config_for(method, base_model=str(tiny_model_dir), max_steps=3, batch_size=4)
    handle = start_run(run_dir, cfg)
    assert handle.wait(300) == EXIT_OK, (run_dir / "train.log").read_text()[-3000:]
    state = run_state(run_dir)
    assert state.status == "succeeded" and state.adapter_dir
    adapter = run_dir / "adapter"
    assert (adapter / "adapter_model.safetensors").exists() and not (adapter / "ref").exists()
    assert json.loads((adapter / "adapter_config.json").read_text())["base_model_name_or_path"] == str(tiny_model_dir)
    assert len(_losses(run_dir)) == 3
    meta = read_metadata(run_dir)
    assert meta["base_model"] == str(tiny_model_dir) and len(meta["data_hash"]) == 64
    assert meta["code_version"] and meta["config"]["method"] == method and meta["device"] == "cpu"
    assert meta["metrics"]["tokens_per_s"] > 0 and meta["metrics"]["peak_rss_mb"] > 0
    assert "eval_loss" in meta["metrics"]
    if method == "dpo":
        logs = [r for r in read_progress(run_dir) if r.get("loss") is not None]
        assert {"rewards/chosen", "rewards/rejected", "rewards/margins", "learning_rate"} <= set(logs[-1])


def test_sigkill_then_restart_resumes_from_checkpoint(tmp_path, tiny_model_dir):
    run_dir = make_run_dir(tmp_path / "run", "kto", n=16)
    # 40 steps: on a fast machine 4 steps finished between the first checkpoint and the kill.
    cfg = config_for("kto", base_model=str(tiny_model_dir), max_steps=40, batch_size=4, save_steps=2)
    handle = start_run(run_dir, cfg)
    wait_until(lambda: any(r.get("event") == "checkpoint" for r in read_progress(run_dir)),
               what="a checkpoint", every=0.05)
    os.kill(handle.pid, signal.SIGKILL)
    handle.wait(30)
    assert run_state(run_dir).status == "crashed"
    saved = max(r["step"] for r in read_progress(run_dir) if r.get("event") == "checkpoint")

    again = start_run(run_dir)  # same directory, config.json from the first start
    assert again.wait(300) == EXIT_OK, (run_dir / "train.log").read_text()[-3000:]
    events = read_progress(run_dir)
    resume = [r for r in events if r.get("event") == "resume"]
    assert resume and resume[0]["step"] >= saved >= 2
    meta = read_metadata(run_dir)
    assert meta["status"] == "succeeded" and meta["attempt"] == 2
    assert meta["resumed_from"].endswith(f"checkpoint-{resume[0]['step']}")
    assert meta["metrics"]["global_step"] == 40 and (run_dir / "adapter" / "adapter_model.safetensors").exists()


def test_sigterm_cancels_and_keeps_no_adapter(tmp_path, tiny_model_dir):
    run_dir = make_run_dir(tmp_path / "run", "kto", n=16)
    handle = start_run(run_dir, config_for("kto", base_model=str(tiny_model_dir), max_steps=200, batch_size=4))
    wait_until(lambda: _losses(run_dir), what="the first logged step")
    state = cancel_run(run_dir, timeout=120, process=handle.process)
    assert state.status == "cancelled" and handle.wait(10) == EXIT_CANCELLED
    assert state.adapter_dir is None and not (run_dir / "adapter").exists()
    assert len(_losses(run_dir)) < 200


def test_sigterm_while_reading_the_data_is_a_cancel_not_a_failure(tmp_path, monkeypatch):
    # Deterministic at the bug's depth: the signal arrives inside the Parquet read (whose
    # `except Exception` once turned it into "not a readable Parquet file"). A subprocess cannot
    # aim a SIGTERM that precisely: on a quiet machine the run is already training.
    import pyarrow.parquet as pq

    from trainer import data
    from trainer.run import Cancelled, _Stop

    run_dir = make_run_dir(tmp_path / "run", "kto", n=4)
    real_read = pq.read_table

    def read_then_signal(path, *args, **kwargs):
        table = real_read(path, *args, **kwargs)
        os.kill(os.getpid(), signal.SIGTERM)  # delivered before the next bytecode: inside _read's try
        return table

    previous = signal.signal(signal.SIGTERM, _Stop())
    try:
        monkeypatch.setattr(data.pq, "read_table", read_then_signal)
        with pytest.raises(Cancelled):
            data.load_snapshot(run_dir, "kto")
    finally:
        signal.signal(signal.SIGTERM, previous)


def test_launch_from_store_one_at_a_time_and_outcome_recorded(store, tmp_path, tiny_model_dir):
    rated_answers(store)
    runs = tmp_path / "runs"
    run = launch_training(store, LaunchRequest(method="kto", runs_dir=runs, base_model=str(tiny_model_dir),
                                        overrides={"max_steps": 3, "batch_size": 4}, eval_fraction=0.0, trigger="cli"))
    assert run.status == "running" and (runs / "train.lock").exists()
    assert (runs / run.id / "dataset_card.json").exists() and run.data_hash
    with pytest.raises(TrainingBusy, match=f"training run {run.id} \\(kto\\) is in progress"):
        launch_training(store, LaunchRequest(method="dpo", runs_dir=runs, base_model=str(tiny_model_dir)))
    assert should_train(store, 1) == (False, f"training run {run.id} (kto) is still in progress")

    status = wait_until(lambda: (s := poll_training(store, run.id)).state.finished and s, timeout=300,
                        what="the run to finish")
    assert status.run.status == "succeeded", status.state.error
    assert status.run.metrics["adapter_dir"].endswith("adapter") and status.run.finished_at
    job = store.jobs.get(status.run.job_id)
    assert (job.kind, job.trigger, job.status) == ("train", "cli", "succeeded")
    assert not (runs / "train.lock").exists()
    assert run_state(runs / run.id).metrics["train_loss"] > 0
    # The metadata's data hash is the dataset card's.
    assert read_metadata(runs / run.id)["data_hash"] == run.data_hash

    ok, reason = should_train(store, 1)
    assert not ok and reason.startswith("0 new feedback item(s) since the last training run")
    conv = store.conversations.create("alice")
    q = store.conversations.add_message(conv.id, "user", "One more?")
    a = store.conversations.add_message(conv.id, "assistant", "Yes.", parent_id=q.id)
    store.conversations.rate(a.id, "alice", 1)
    assert should_train(store, 1)[0]
    wait_for(runs / run.id, timeout=5)
