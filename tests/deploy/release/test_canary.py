"""Canary releases judged online, on the built-in model with simulated users (deploy/loop/simulate.py).

The candidate is a behaviour the users can notice: a LoRA adapter on the output layer that
cancels the end-of-answer logit (`rambling_adapter`), so its answers run to the token budget
while the live release stops when it is done. Users who want short answers react badly to it
(corrections, rephrases, dislikes, fewer thanks) and the rule rolls it back; users who want
longer answers like it, and the rule promotes it. In both, more users chat while the verdict is
applied: no request fails, and every stored answer names its release and arm, the arm of a user
being the same for the whole canary (sticky). The gate is not run here (tests/deploy/release/test_gate_run.py
does): the candidate is registered with a passing decision, as the cycle leaves it.

Unit tests of the pieces (assignment, the rule on made-up outcomes) run without a model.
"""

from __future__ import annotations

import threading
from collections import Counter
from datetime import datetime, timedelta, timezone

import pytest
from service_helpers import start_service, tiny_settings

from deploy.release.canary import CANARY_ARM, LIVE_ARM, in_canary, judge, rate_interval
from store.outcomes import AnswerOutcome

MAX_NEW_TOKENS = 40
MIN_USERS_PER_ARM = 6


def _outcome(i: int, user: str, arm: str, release: str, bad: bool = False, good: bool = False) -> AnswerOutcome:
    return AnswerOutcome(f"m{i}", user, f"c{user}", release, arm, liked=good, disliked=bad, positive=False,
                         rephrase=False, correction=False, continued=True)


def test_assignment_is_sticky_keyed_and_near_the_share():
    key, other = "00" * 16, "ff" * 16
    users = [f"user-{i}" for i in range(4000)]
    inside = [u for u in users if in_canary(key, u, 0.2)]
    assert 0.17 < len(inside) / len(users) < 0.23
    assert inside == [u for u in users if in_canary(key, u, 0.2)]  # the same every time
    assert set(inside) != {u for u in users if in_canary(other, u, 0.2)}  # another canary, other users


def test_rate_interval_clusters_users_and_sees_a_clear_difference():
    canary = [_outcome(i, f"u{i % 10}", CANARY_ARM, "c", bad=(i // 10) % 2 == 0) for i in range(60)]  # 3 of 6 each
    live = [_outcome(i, f"v{i % 10}", LIVE_ARM, "l", bad=i < 10) for i in range(60)]  # 1 of 6 each
    iv = rate_interval(canary, live, "bad", alpha=0.05, tau=0.1)
    assert iv["diff"] == pytest.approx(1 / 3) and iv["low"] > 0 and iv["users"] == [10, 10]
    # The same rates, but each user all bad or all good: clustering by user widens the interval.
    clustered = [_outcome(i, f"u{i % 10}", CANARY_ARM, "c", bad=i % 10 < 5) for i in range(60)]
    wide = rate_interval(clustered, live, "bad", alpha=0.05, tau=0.1)
    assert wide["diff"] == pytest.approx(1 / 3) and wide["high"] - wide["low"] > 0.3


class _FakeStore:
    def __init__(self, rows):
        self.rows = rows


def test_rule_waits_for_the_minimum_then_rolls_back_a_clearly_worse_canary(monkeypatch):
    from types import SimpleNamespace

    from deploy.release import canary as mod
    from deploy.settings import load_settings

    settings = load_settings(environ={}, overrides={"canary.min_answers": 20, "canary.max_conversations": 1000})
    start = datetime.now(timezone.utc)
    release = SimpleNamespace(id="c", decision={"canary": {
        "state": "running", "started_at": start.isoformat(), "ends_at": (start + timedelta(hours=1)).isoformat(),
        "live_release": "l", "max_conversations": 1000, "min_answers": 20, "tolerance": 0.05}})
    rows: list[AnswerOutcome] = []
    monkeypatch.setattr(mod, "answer_outcomes", lambda store, ids, since: rows)
    # The events behind each arm's rates, by extractor version (the store's count, faked here).
    monkeypatch.setattr(mod, "extractor_versions", lambda store, answers: {"fast fast-2+lr-x": len(answers)})
    rows += [_outcome(i, f"u{i}", CANARY_ARM, "c", bad=True) for i in range(10)]
    rows += [_outcome(100 + i, f"v{i}", LIVE_ARM, "l") for i in range(10)]
    assert judge(None, release, settings).action == "continue"  # 10 < 20 per arm
    rows += [_outcome(200 + i, f"u{i}", CANARY_ARM, "c", bad=i % 3 != 0) for i in range(20)]
    rows += [_outcome(300 + i, f"v{i}", LIVE_ARM, "l", good=True) for i in range(20)]
    verdict = judge(None, release, settings)
    assert verdict.action == "rollback" and "shown worse" in verdict.reason
    assert verdict.intervals["bad"]["low"] > 0
    assert verdict.extractors == {CANARY_ARM: {"fast fast-2+lr-x": 30}, LIVE_ARM: {"fast fast-2+lr-x": 30}}
    # An equal canary is promoted once the sequence shows it non-inferior within the tolerance
    # (both arms: no events in 400 answers of 80 users), before its time is up.
    rows[:] = [_outcome(i, f"u{i % 160}", CANARY_ARM if i % 2 else LIVE_ARM, "c" if i % 2 else "l") for i in range(800)]
    assert judge(None, release, settings).action == "promote"


# --------------------------------------------------------------------------- on the built-in model


def rambling_adapter(model_dir, out_dir):
    """A PEFT LoRA on the output layer whose update cancels the end-of-answer logits exactly:
    logit_eos + B·A·h with A = W_eos and B = −1 gives 0 whatever the hidden state, below the
    model's usual top logits, so greedy answers run to the token budget."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM, GenerationConfig

    model = AutoModelForCausalLM.from_pretrained(model_dir)
    eos = GenerationConfig.from_pretrained(model_dir).eos_token_id
    eos = sorted({eos} if isinstance(eos, int) else set(eos))
    peft = get_peft_model(model, LoraConfig(r=len(eos), lora_alpha=len(eos), lora_dropout=0.0,
                                            target_modules=["lm_head"]))
    head = peft.base_model.model.lm_head
    with torch.no_grad():
        weight = head.base_layer.weight
        a, b = head.lora_A["default"].weight, head.lora_B["default"].weight
        a.zero_()
        b.zero_()
        for i, token in enumerate(eos):
            a[i] = weight[token]
            b[token, i] = -1.0
    peft.save_pretrained(out_dir)
    return out_dir


@pytest.fixture(scope="module")
def rambler(builtin_model_dir, tmp_path_factory):
    return rambling_adapter(builtin_model_dir, tmp_path_factory.mktemp("rambler") / "adapter")


def _simulate(url: str, prefer: str, users: int, seed: int) -> dict:
    from deploy.loop.simulate import Preference, SimulationConfig, simulate

    config = SimulationConfig(url=url, users=users, turns=5, seed=seed, preference=Preference(kind=prefer, length_words=22),
                              verbosities=(0,), max_new_tokens=MAX_NEW_TOKENS, temperature=0.0, concurrency=2)
    return simulate(config).as_dict()


def _every_answer_names_release_and_arm(store, key: str, share: float, canary_id: str) -> Counter:
    from store_peek import peek

    arms: Counter = Counter()
    rows = peek(store, "SELECT c.user_id, json_extract_string(m.generation, '$.release_id'), "
                       "json_extract_string(m.generation, '$.arm') FROM messages m "
                       "JOIN conversations c ON c.id = m.conversation_id WHERE m.role = 'assistant'")
    assert rows
    for user_id, release_id, arm in rows:
        assert release_id and arm in (LIVE_ARM, CANARY_ARM), (user_id, release_id, arm)
        if arm == CANARY_ARM:  # sticky: only users the canary's key puts in its share
            assert release_id == canary_id and in_canary(key, user_id, share)
        arms[arm] += 1
    return arms


def _users_by_arm(store, key: str) -> Counter:
    from store_peek import peek

    users = peek(store, "SELECT DISTINCT c.user_id FROM messages m JOIN conversations c ON c.id = m.conversation_id "
                        "WHERE m.role = 'assistant'")
    return Counter(CANARY_ARM if in_canary(key, user_id, 0.5) else LIVE_ARM for (user_id,) in users)


def _until_each_arm_has(minimum: int, store, key: str, more_users) -> None:
    """More users until each arm has `minimum` of them, as a running canary waits for answers.
    The key is random per canary, so 16 users can split 13 to 3, and the interval of an arm with
    three users' answers (clustered by user) is too wide to show anything."""
    for seed in range(100, 110):
        if min(_users_by_arm(store, key)[arm] for arm in (CANARY_ARM, LIVE_ARM)) >= minimum:
            return
        extra = more_users(seed)
        assert not extra["errors"], extra
    pytest.fail(f"fewer than {minimum} users in an arm after 40 more users: {_users_by_arm(store, key)}")


@pytest.mark.slow
@pytest.mark.parametrize("prefer, outcome", [("short", "rollback"), ("long", "promote")])
def test_canary_judged_by_its_users(prefer, outcome, builtin_model_dir, rambler, tmp_path):
    from deploy.release.registry import register_candidate

    # A budget no test reaches: both verdicts must come from the intervals, not from the budget.
    budget = 1000
    settings = tiny_settings(tmp_path, builtin_model_dir, **{
        "backend.max_new_tokens": MAX_NEW_TOKENS, "canary.share": 0.5, "canary.min_answers": 12,
        "canary.max_conversations": budget, "canary.check_every_minutes": 0})
    live = start_service(settings)
    try:
        store = live.store
        before = store.releases.live()
        candidate = register_candidate(store, run_id=None, adapter_path=rambler, base_model=str(builtin_model_dir),
                                       data_dir=settings.data_path, decision={"promote": True, "summary": "test"})
        with live.admin() as admin:
            started = admin.post(f"/api/admin/canary/start/{candidate.id}").json()
            assert started["canary"]["state"] == "running" and "key" not in started["canary"]
            first = _simulate(live.url, prefer, users=16, seed=1)
            assert not first["errors"], first
            key = store.releases.get(candidate.id).decision["canary"]["key"]
            _until_each_arm_has(MIN_USERS_PER_ARM, store, key, lambda seed: _simulate(live.url, prefer, users=4, seed=seed))
            # More users chat while the verdict is applied: nobody's request may fail.
            during: dict = {}
            chatter = threading.Thread(target=lambda: during.update(_simulate(live.url, prefer, users=4, seed=2)))
            chatter.start()
            verdict = admin.post("/api/admin/canary/check").json()
            chatter.join(600)
            # As the scheduler does: check again as answers come in until the rule decides (the
            # intervals are always valid, so repeated checks add no false alarms). An arm of six
            # users can leave an interval wider than the tolerance, however clear the difference.
            for seed in range(200, 210):
                if verdict["action"] != "continue":
                    break
                extra = _simulate(live.url, prefer, users=4, seed=seed)
                assert not extra["errors"], extra
                verdict = admin.post("/api/admin/canary/check").json()
            overview = admin.get("/api/admin/canary").json()
        assert not during.get("errors") and during.get("turns", 0) > 0, during
        assert verdict["action"] == outcome, verdict["reason"]
        release = store.releases.get(candidate.id)
        state = release.decision["canary"]
        assert state["state"] == ("rolled_back" if outcome == "rollback" else "promoted")
        assert state["last_check"]["arms"]["canary"]["answers"] >= 12
        assert overview["canary"]["release_id"] == candidate.id and overview["verdict"]["arms"]["live"]["answers"] > 0
        if outcome == "rollback":
            assert release.status == "rejected" and store.releases.live().id == before.id
            # Shown worse by an always-valid interval (the rule's margin is 0): more answers disliked
            # or re-asked, or fewer liked, whichever the users' reactions showed first.
            ivs = verdict["intervals"]
            assert ivs["bad"]["low"] > 0 or ivs["good"]["high"] < 0, ivs
        else:
            assert release.status == "live" and live.services.release_id == candidate.id
        arms = _every_answer_names_release_and_arm(store, state["key"], 0.5, candidate.id)
        assert arms[CANARY_ARM] > 0 and arms[LIVE_ARM] > 0
        print(f"canary ({prefer} users): {verdict['action']}: {verdict['reason']}")
    finally:
        live.stop()


def test_canary_state_lives_on_the_release_row(tmp_path):
    """Start refuses a release without a passing gate decision; one canary at a time; ending it
    records the outcome (rolled back: rejected; stopped: still a candidate), and the key is
    never shown."""
    from deploy.release.canary import finish, public_state, running_canary, start_canary
    from deploy.release.registry import ReleaseError, ensure_base_release
    from deploy.settings import load_settings
    from store import Store

    settings = load_settings(environ={}, overrides={"data_dir": str(tmp_path)})
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    with Store(settings.db_path) as store:
        ensure_base_release(store, "base")
        make = lambda decision: store.releases.create(base_model="base", adapter_path=str(adapter), decision=decision)  # noqa: E731
        failed, a, b = make({"promote": False}), make({"promote": True}), make({"promote": True})
        with pytest.raises(ReleaseError, match="has not passed the gate"):
            start_canary(store, None, failed.id, settings)
        start_canary(store, None, a.id, settings)
        with pytest.raises(ReleaseError, match=f"{a.id} is already the canary"):
            start_canary(store, None, b.id, settings)
        canary = running_canary(store)
        assert canary.id == a.id and "key" not in public_state(canary) and len(canary.decision["canary"]["key"]) == 32
        rolled = finish(store, None, canary, "rollback", "test")
        assert rolled.status == "rejected" and rolled.decision["canary"]["state"] == "rolled_back"
        assert running_canary(store) is None
        start_canary(store, None, b.id, settings)
        stopped = finish(store, None, running_canary(store), "stop", "by hand", by="operator")
        assert stopped.status == "candidate" and stopped.decision["canary"]["ended_by"] == "operator"
        with pytest.raises(ReleaseError, match="no running canary"):
            finish(store, None, stopped, "promote", "again")
