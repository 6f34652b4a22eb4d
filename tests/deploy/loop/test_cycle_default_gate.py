"""The scheduled cycle on the built-in model, gated by the DEFAULT policy of `Settings()`.

The other cycle tests run the tiny random model, whose scores mean nothing, so they open the gate
wide (tests/deploy/loop/test_cycle.py's WIDE_OPEN) to test the plumbing. Here the built-in model (a real, small
model) answers simulated users, the service's scheduler fires the cycle, and the gate judges the
candidate with every floor and tolerance as shipped, with the serving guard and the safety policy
as shipped too. Only the gate's item counts are cut for time: fewer items widen every interval,
which makes promoting harder, never easier. Whichever way it decides, the stored decision must
explain itself: every failed axis is named in the reasons and the summary, a promote has no failed
axis, and a reject leaves the live release serving.
"""

from __future__ import annotations

import time

import pytest
from service_helpers import start_service, tiny_settings
from training_helpers import rated_answers, wait_until

from deploy.loop.cycle import STEPS
from deploy.release.gate import AXES, policy_for
from deploy.settings import Settings

pytestmark = pytest.mark.slow

SMALL_GATE = {"gate.helpfulness_prompts": 12, "gate.harmlessness_prompts": 12, "gate.max_new_tokens": 24,
              "gate.hh_limit": 10, "gate.steer_prompts": 2, "gate.steer_values": [0, 2, 4], "gate.bootstrap": 500}


def test_scheduled_cycle_under_the_default_gate_policy_decides_with_matching_reasons(tmp_path, builtin_model_dir):
    from deploy.loop.simulate import Preference, SimulationConfig, simulate

    shipped = Settings()
    settings = tiny_settings(tmp_path, builtin_model_dir, **{
        "schedule.train_every_minutes": 0.05, "schedule.min_new_feedback": 10, "schedule.train_max_steps": 8,
        "schedule.train_method": "kto", "canary.check_every_minutes": 0, **SMALL_GATE,
        "guard.enabled": shipped.guard.enabled, "guard.system_prompt": shipped.guard.system_prompt})
    for axis in AXES:  # the policy is the shipped one, axis by axis
        assert policy_for(axis, settings.gate) == policy_for(axis, shipped.gate), axis
    live = start_service(settings)
    try:
        store = live.store
        before = store.releases.live()
        # Every turn passes the guard's judge (SmolLM2's features): on a loaded 2-core machine one
        # turn took over the simulator's default 120 s, so the users wait longer here.
        summary = simulate(SimulationConfig(url=live.url, users=3, turns=4, preference=Preference(kind="short"),
                                            max_new_tokens=12, seed=1, timeout_s=900))
        assert summary.turns >= 12 and not summary.errors, summary.as_dict()
        rated_answers(store, 8)  # explicit likes and dislikes: both KTO classes and enough new feedback
        started = time.monotonic()
        job = wait_until(lambda: next((j for j in store.jobs.list(kind="cycle", limit=50) if j.trigger == "schedule"
                                  and j.status in ("succeeded", "failed")), None), 1500, "a scheduled cycle", every=1.0)
        seconds = time.monotonic() - started
        assert job.status == "succeeded", job.error
        result = job.result
        assert [(s["step"], s["status"]) for s in result["steps"]][:4] == [(s, "succeeded") for s in STEPS[:4]]

        release = store.releases.get(result["release_id"])
        stored = release.decision
        axes = {a["axis"]: a for a in stored["axes"]}
        assert list(axes) == list(AXES) and stored["reasons"] == [a["reason"] for a in stored["axes"]]
        failed = [name for name, a in axes.items() if not a["passed"]]
        assert stored["promote"] == (not failed) == result["gate"]["passed"]
        for name in failed:  # every failed axis is named in its reason and in the summary
            assert axes[name]["reason"].startswith(name) and axes[name]["reason"] in stored["summary"]
        assert all(a["tolerance"] == policy_for(n, shipped.gate).tolerance and a["floor"] == policy_for(
            n, shipped.gate).floor for n, a in axes.items())
        if stored["promote"]:
            assert stored["summary"] == "PROMOTE: every axis holds"
            assert result["status"] in ("canary", "promoted", "passed") and release.status in ("candidate", "live")
        else:
            assert stored["summary"].startswith("REJECT: ") and result["status"] == "rejected"
            assert release.status == "rejected" and store.releases.live().id == before.id
        served = axes["served_harmlessness"]["reason"]
        prefix = "served_harmlessness (behind the serving guard, with the safety policy; the guard refused "
        assert served.startswith(prefix), served
        print(f"scheduled cycle with the default gate policy in {seconds:.0f}s: {stored['summary']}")
    finally:
        live.stop()
