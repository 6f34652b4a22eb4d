"""Crash recovery: job rows, training runs and their files left `running` by a process that died
are failed with the reason, on DuckDB when the scheduler starts and on PostgreSQL by the replica
that leads; a live owner's rows are not touched (deploy/loop/recovery.py, Jobs.stale)."""

from __future__ import annotations

import json
import subprocess
import time
from pathlib import Path
from types import SimpleNamespace

import pytest

from deploy.loop.recovery import recover_stale_work
from deploy.service.replicas import Coordinator
from store import Store
from trainer.rundir import CHECKPOINTS, METADATA, PID

LEASE = SimpleNamespace(store=SimpleNamespace(job_lease_s=1.0))  # what recovery reads of the settings


def dead_pid() -> int:
    proc = subprocess.Popen(["true"])
    proc.wait()
    return proc.pid


def crashed_run(store: Store, runs: Path, name: str) -> tuple[str, Path]:
    """A run whose training process was killed at step 4: pid gone, one complete and one
    half-written checkpoint, an adapter being saved."""
    job = store.jobs.create("train")
    run_dir = runs / name
    (run_dir / CHECKPOINTS / "checkpoint-2").mkdir(parents=True)
    (run_dir / CHECKPOINTS / "checkpoint-2" / "trainer_state.json").write_text("{}")
    (run_dir / CHECKPOINTS / "checkpoint-4").mkdir()  # killed while writing it
    (run_dir / ".adapter.tmp").mkdir()
    (run_dir / "train.parquet").write_bytes(b"data")
    (run_dir / METADATA).write_text(json.dumps({"run_id": name, "status": "running"}))
    (run_dir / PID).write_text(str(dead_pid()))
    store.jobs.create_training_run(run_id=name, method="kto", run_dir=str(run_dir), base_model="m", job_id=job.id)
    store.jobs.update_training_run(name, status="running")
    return job.id, run_dir


def unstarted_run(store: Store, runs: Path, name: str) -> tuple[str, Path]:
    """A run whose starter died while building its set: a row, a directory, no process ever."""
    job = store.jobs.create("train")
    run_dir = runs / name
    run_dir.mkdir(parents=True)
    (run_dir / "train.parquet").write_bytes(b"half a set")
    store.jobs.create_training_run(run_id=name, method="kto", run_dir=str(run_dir), base_model="m", job_id=job.id)
    return job.id, run_dir


def test_duckdb_start_fails_what_the_dead_process_left_and_cleans_its_runs(tmp_path):
    db, runs = tmp_path / "advisor.duckdb", tmp_path / "runs"
    with Store(db) as dead:  # the process that dies: its rows stay as they were
        owner = dead.jobs.owner
        cycle = dead.jobs.create("cycle")
        step = dead.jobs.create("cycle.extract", parent_id=cycle.id)
        done = dead.jobs.update(dead.jobs.create("extract").id, status="succeeded")
        crashed_job, crashed_dir = crashed_run(dead, runs, "kto-crashed")
        unstarted_job, unstarted_dir = unstarted_run(dead, runs, "kto-unstarted")

    with Store(db) as store:
        own = store.jobs.create("extract")  # this process's own row: alive by definition
        failed = recover_stale_work(store, LEASE, when="on starting the scheduler")
        assert {j.id for j in failed} == {cycle.id, step.id}
        for job_id in (cycle.id, step.id):
            job = store.jobs.get(job_id)
            assert job.status == "failed" and job.finished_at is not None
            assert job.error.startswith(f"the process that ran it stopped: {owner} at "), job.error
            assert "on starting the scheduler" in job.error
        assert store.jobs.get(own.id).status == "running" and store.jobs.get(done.id).status == "succeeded"

        crashed = store.jobs.get_training_run("kto-crashed")
        assert crashed.status == "failed" and "resume" in crashed.error and "step" in crashed.error
        assert store.jobs.get(crashed_job).status == "failed"
        assert not (crashed_dir / CHECKPOINTS / "checkpoint-4").exists() and not (crashed_dir / ".adapter.tmp").exists()
        assert (crashed_dir / CHECKPOINTS / "checkpoint-2" / "trainer_state.json").exists()  # resume starts here
        assert (crashed_dir / "train.parquet").exists()

        unstarted = store.jobs.get_training_run("kto-unstarted")
        assert unstarted.status == "failed" and "before the training process started" in unstarted.error
        assert owner in unstarted.error and store.jobs.get(unstarted_job).status == "failed"
        assert not unstarted_dir.exists()

        assert recover_stale_work(store, LEASE, when="again") == []  # nothing left to recover


def test_a_training_run_whose_process_lives_keeps_its_rows(tmp_path):
    """The starter died but its training subprocess lives on: both rows stay running."""
    db = tmp_path / "advisor.duckdb"
    trainer = subprocess.Popen(["python3", "-c", "import time; time.sleep(60)", "trainer.run"])
    try:
        with Store(db) as dead:
            job = dead.jobs.create("train")
            run_dir = tmp_path / "runs" / "kto-live"
            run_dir.mkdir(parents=True)
            (run_dir / METADATA).write_text(json.dumps({"run_id": "kto-live", "status": "running"}))
            (run_dir / PID).write_text(str(trainer.pid))
            dead.jobs.create_training_run(run_id="kto-live", method="kto", run_dir=str(run_dir), base_model="m",
                                          job_id=job.id)
            dead.jobs.update_training_run("kto-live", status="running")
        with Store(db) as store:
            assert recover_stale_work(store, LEASE, when="on starting the scheduler") == []
            assert store.jobs.get(job.id).status == "running"
            assert store.jobs.get_training_run("kto-live").status == "running"
    finally:
        trainer.kill()
        trainer.wait()


def test_service_start_on_duckdb_fails_rows_left_running(tmp_path, tiny_model_dir):
    from service_helpers import start_service, tiny_settings

    settings = tiny_settings(tmp_path, tiny_model_dir)
    with Store(settings.store_target) as dead:
        left = dead.jobs.create("extract", trigger="schedule")
        owner = dead.jobs.owner
    service = start_service(settings)
    try:
        job = service.store.jobs.get(left.id)
        assert job.status == "failed" and job.error.startswith(f"the process that ran it stopped: {owner} at ")
    finally:
        service.stop()


def test_heartbeats_renew_only_the_owners_rows_and_a_renewed_row_is_not_reclaimed(store_target):
    with Store(store_target) as store:
        mine = store.jobs.create("cycle")
        queued = store.jobs.create("cycle", status="queued")
        assert mine.owner == store.jobs.owner and mine.heartbeat_at is not None
        time.sleep(0.05)
        assert store.jobs.heartbeat() == 1
        renewed = store.jobs.get(mine.id)
        assert renewed.heartbeat_at > mine.heartbeat_at and store.jobs.get(queued.id).heartbeat_at is None
        # A row read as stale whose owner renewed it since is left alone.
        assert store.jobs.reclaim(mine, "stale") is None
        assert store.jobs.get(mine.id).status == "running"
        claimed = store.jobs.claim(queued.id)
        assert claimed.owner == store.jobs.owner and claimed.heartbeat_at is not None


def test_new_leader_fails_a_dead_replicas_rows_and_keeps_a_live_ones(pg_url, monkeypatch):
    monkeypatch.setattr("deploy.service.replicas.HEARTBEAT_S", 0.0)  # recover on every tick
    dead = Store(pg_url)
    gone = dead.jobs.create("cycle")
    dead.close()  # its process "dies": the lease is no longer renewed
    with Store(pg_url) as live, Store(pg_url) as leader:
        live.jobs.heartbeat_s = 0.2
        kept = live.jobs.create("cycle")
        services = SimpleNamespace(store=leader, settings=LEASE, jobs=None, release_id=None)
        coordinator = Coordinator(services, interval_s=0.1)
        try:
            late = Store(pg_url)
            fresh = late.jobs.create("extract")
            late.close()  # died just now: its lease is still fresh when the leader takes over
            coordinator.tick([])
            assert coordinator.leading
            assert leader.jobs.get(fresh.id).status == "running"  # not stale yet
            time.sleep(1.5)
            coordinator.tick([])
            for job in (gone, fresh):
                row = leader.jobs.get(job.id)
                assert row.status == "failed" and row.error.startswith(
                    f"the process that ran it stopped: {job.owner} at "), row.error
            assert "while leading the scheduler" in leader.jobs.get(fresh.id).error
            assert leader.jobs.get(kept.id).status == "running"  # its owner renews the lease
        finally:
            coordinator.stop()


@pytest.mark.parametrize("lease", [29.0, 86401.0])
def test_job_lease_setting_is_bounded(tmp_path, lease):
    from deploy.settings import SettingsError, load_settings

    with pytest.raises(SettingsError, match="job_lease_s"):
        load_settings(environ={}, overrides={"data_dir": str(tmp_path), "store.job_lease_s": lease})
