"""The periodic trainer runs the whole cycle without an operator, and a running cycle or training
run can be cancelled leaving no half release. On the tiny random model: the point is the
plumbing (the schedule, the skip reasons, the job rows, the canary hand-off), not the scores, so
the gate's policy is opened wide (tests/deploy/loop/test_cycle.py's WIDE_OPEN).

The schedule is shortened by settings (`schedule.train_every_minutes`), not mocked: the service's
own APScheduler fires the "cycle" job every few seconds.
"""

from __future__ import annotations

import time

import pytest
from service_helpers import ADMIN_TOKEN, start_service, tiny_settings
from test_cycle import WIDE_OPEN
from training_helpers import rated_answers, wait_until

from deploy.loop.cycle import STEPS

pytestmark = pytest.mark.slow

SMALL_GATE = {"gate.hh_limit": 2, "gate.helpfulness_prompts": 2, "gate.harmlessness_prompts": 2,
              "gate.max_new_tokens": 8, "gate.steer_prompts": 2, "gate.steer_values": [0, 4], "gate.bootstrap": 200}


def test_the_schedule_fires_and_a_full_cycle_reaches_a_gate_decision(tmp_path, tiny_model_dir):
    from deploy.loop.simulate import Preference, SimulationConfig, simulate

    settings = tiny_settings(tmp_path, tiny_model_dir, **{
        "schedule.train_every_minutes": 0.05, "schedule.min_new_feedback": 10, "schedule.train_max_steps": 3,
        "schedule.train_method": "kto", "canary.check_every_minutes": 0, **SMALL_GATE, **WIDE_OPEN})
    live = start_service(settings)
    try:
        store = live.store
        # Nothing to learn from yet: the scheduled runs are recorded as skipped, with the reason.
        skipped = wait_until(lambda: [j for j in store.jobs.list(kind="cycle", limit=20)
                                 if j.trigger == "schedule" and j.status == "skipped"], 60, "a skipped scheduled run")
        assert "waiting for 10" in skipped[0].result["reason"]
        summary = simulate(SimulationConfig(url=live.url, users=3, turns=4, preference=Preference(kind="short"),
                                            max_new_tokens=12, seed=1))
        assert summary.turns >= 12 and not summary.errors
        rated_answers(store, 8)  # explicit likes and dislikes: both KTO classes and enough new feedback
        started = time.monotonic()

        def finished_cycle():
            return next((j for j in store.jobs.list(kind="cycle", limit=50)
                         if j.trigger == "schedule" and j.status in ("succeeded", "failed")), None)

        job = wait_until(finished_cycle, 900, "a scheduled cycle to finish", every=1.0)
        seconds = time.monotonic() - started
        assert job.status == "succeeded", job.error
        result = job.result
        assert [(s["step"], s["status"]) for s in result["steps"]] == [(s, "succeeded") for s in STEPS]
        assert result["gate"]["decision"]["axes"] and result["gate"]["passed"]
        assert result["status"] == "canary"  # passed the gate: its canary serves a share of users now
        canary = store.releases.get(result["release_id"])
        assert canary.status == "candidate" and canary.decision["canary"]["state"] == "running"
        steps = {s.kind: s for s in store.jobs.children(job.id)}
        times = {k: (s.finished_at - s.started_at).total_seconds() for k, s in steps.items()
                 if s.started_at and s.finished_at}
        # While the canary is judged, the schedule waits instead of training over it.
        later = wait_until(lambda: [j for j in store.jobs.list(kind="cycle", limit=20)
                               if j.status == "skipped" and "canary" in (j.result or {}).get("reason", "")],
                      60, "a scheduled run skipped for the canary")
        assert canary.id in later[0].result["reason"]
        print(f"scheduled cycle in {seconds:.0f}s; steps: " + ", ".join(f"{k} {v:.1f}s" for k, v in times.items()))
    finally:
        live.stop()


def test_a_cycle_cancelled_during_training_leaves_no_release(tmp_path, tiny_model_dir):
    settings = tiny_settings(tmp_path, tiny_model_dir, **{"schedule.train_method": "kto", **SMALL_GATE, **WIDE_OPEN})
    live = start_service(settings)
    try:
        store = live.store
        rated_answers(store, 8)
        with live.client(headers={"Authorization": f"Bearer {ADMIN_TOKEN}"}) as admin:
            job_id = admin.post("/api/admin/jobs/cycle/run",
                                json={"params": {"overrides": {"max_steps": 300}}}).json()["job_id"]
            train = wait_until(lambda: next((s for s in store.jobs.children(job_id) if s.kind == "cycle.train"
                                        and (s.result or {}).get("step")), None), 300, "training to be under way")
            r = admin.post(f"/api/admin/jobs/{job_id}/cancel")
            assert r.status_code == 202 and r.json()["cancelling"], r.text
            job = wait_until(lambda: (j := store.jobs.get(job_id)).status not in ("queued", "running") and j, 120,
                        "the cycle to stop")
            assert admin.post(f"/api/admin/jobs/{job_id}/cancel").status_code == 409  # nothing left to cancel
        assert job.status == "cancelled" and "cancelled at train" in job.result["message"], job
        run = store.jobs.get_training_run(job.result["run_id"])
        assert run.status == "cancelled" and store.jobs.get(train.id).status == "cancelled"
        assert not [r for r in store.releases.list() if r.run_id == run.id]  # no half release
        assert [s.kind for s in store.jobs.children(job_id)] == ["cycle.extract", "cycle.dataset", "cycle.train"]
    finally:
        live.stop()
