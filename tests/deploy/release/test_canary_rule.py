"""The canary's always-valid rule on seeded made-up outcomes, without a model.

`evaluator.sequential` (the confidence sequence, clustered by user) and `judge` / `check_canary`
(deploy/release/canary.py): checked again and again, an equal canary is not rolled back; a clearly
worse one is; at the deadline with too little traffic the outcome is "inconclusive", the live
release stays, the canary stops serving and its numbers are on the release row.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from types import SimpleNamespace

import numpy as np

from deploy.release import canary as mod
from deploy.release.canary import CANARY_ARM, LIVE_ARM, judge
from deploy.settings import load_settings
from evaluator.sequential import ArmSums, difference_sequence, rate_variance
from store.outcomes import AnswerOutcome


def _users(rng: np.random.Generator, n: int, bad: float, icc: float = 0.2) -> tuple[np.ndarray, np.ndarray]:
    """(bad answers, answers) per user: own rate from a Beta around `bad`, 1 + Poisson(2) answers."""
    k = (1 - icc) / icc
    answers = 1 + rng.poisson(2, n)
    return rng.binomial(answers, rng.beta(bad * k, (1 - bad) * k, n)), answers


def test_sequence_covers_an_equal_difference_at_every_look_unlike_a_fixed_interval():
    rng = np.random.default_rng(7)
    runs, alpha, valid_miss, fixed_miss = 300, 0.05, 0, 0
    for _ in range(runs):
        canary, live = _users(rng, 150, 0.2), _users(rng, 600, 0.2)
        lows, highs, fixed = [], [], []
        for k in range(10, 151, 5):  # from ~30 canary answers (`min_answers`), every 5 users
            seq = difference_sequence(ArmSums.of(canary[0][:k], canary[1][:k]),
                                      ArmSums.of(live[0][:4 * k], live[1][:4 * k]), alpha=alpha, tau=0.1)
            lows.append(seq["low"])
            highs.append(seq["high"])
            fixed.append(abs(seq["diff"]) > 1.96 * np.sqrt(seq["variance"]))
        valid_miss += bool(np.any(np.array(lows) > 0) or np.any(np.array(highs) < 0))
        fixed_miss += any(fixed)
    # 29 looks each: the always-valid sequence excludes the true 0 at some look in at most α of
    # the runs; a fixed 95 % interval looked at as often does so far more often.
    assert valid_miss / runs <= alpha
    assert fixed_miss / runs > 2 * alpha


def test_clustered_variance_grows_when_a_users_answers_agree_and_is_never_zero():
    mixed = ArmSums.of(np.array([3.0] * 10), np.array([6.0] * 10))  # each user half bad
    split = ArmSums.of(np.array([6.0, 0.0] * 5), np.array([6.0] * 10))  # each user all bad or all good
    assert rate_variance(split) > 5 * rate_variance(mixed) > 0
    none_yet = ArmSums.of(np.zeros(10), np.full(10, 3.0))
    assert 0 < rate_variance(none_yet) < 0.01  # no events: a small width, not zero
    assert np.isinf(rate_variance(ArmSums.of(np.array([2.0]), np.array([5.0]))))  # one user: no variance


def _release(start: datetime, hours: float = 24.0) -> SimpleNamespace:
    return SimpleNamespace(id="c", decision={"canary": {
        "state": "running", "started_at": start.isoformat(), "ends_at": (start + timedelta(hours=hours)).isoformat(),
        "live_release": "l", "max_conversations": 10_000, "min_answers": 30, "tolerance": 0.05}})


def _outcomes(rng: np.random.Generator, arm: str, n_users: int, bad: float, good: float,
              release: str | None = None) -> list[AnswerOutcome]:
    """Seeded answers of `n_users` users in `arm`, each with a few answers and their own rates."""
    release, rows = release or ("c" if arm == CANARY_ARM else "l"), []
    for u in range(n_users):
        user_bad, user_good = rng.dirichlet(4 * np.array([bad, good, 1 - bad - good]))[:2]
        for i in range(1 + rng.poisson(2)):
            x = rng.random()
            rows.append(AnswerOutcome(f"{arm}{u}-{i}", f"{arm}-u{u}", f"{arm}-c{u}", release, arm,
                                      liked=user_bad <= x < user_bad + user_good, disliked=x < user_bad,
                                      positive=False, rephrase=False, correction=False, continued=True))
    return rows


def _checks(monkeypatch, canary: list, live: list, every: int = 10, **judge_kw) -> list:
    """Judge after every `every` canary answers (live: four times as many), as a service would."""
    rows: list[AnswerOutcome] = []
    monkeypatch.setattr(mod, "answer_outcomes", lambda store, ids, since: rows)
    monkeypatch.setattr(mod, "extractor_versions", lambda store, **kw: {})  # no store: no mined events to count
    settings = load_settings(environ={}, overrides={"canary.min_answers": 30})
    release, verdicts = _release(datetime.now(timezone.utc)), []
    for k in range(every, len(canary) + 1, every):
        rows[:] = canary[:k] + live[:4 * k]
        verdicts.append(judge(None, release, settings, **judge_kw))
    return verdicts


def test_equal_canary_is_not_rolled_back_however_often_it_is_checked(monkeypatch):
    rng = np.random.default_rng(3)
    actions = []
    for _ in range(5):
        canary, live = _outcomes(rng, CANARY_ARM, 100, 0.2, 0.3), _outcomes(rng, LIVE_ARM, 400, 0.2, 0.3)
        actions += [v.action for v in _checks(monkeypatch, canary, live)]
    assert len(actions) > 100 and "rollback" not in actions
    assert set(actions) <= {"continue", "promote"}


def test_clearly_worse_canary_is_rolled_back_with_its_numbers(monkeypatch):
    rng = np.random.default_rng(4)
    canary, live = _outcomes(rng, CANARY_ARM, 60, 0.5, 0.1), _outcomes(rng, LIVE_ARM, 240, 0.2, 0.3)
    verdicts = _checks(monkeypatch, canary, live)
    first = next(v for v in verdicts if v.action != "continue")
    assert first.action == "rollback" and "shown worse than live" in first.reason
    ivs = first.intervals
    assert (ivs["bad"]["low"] > 0 or ivs["good"]["high"] < 0) and ivs["bad"]["users"][0] >= 2
    assert first.arms[CANARY_ARM]["rates"]["bad"] > first.arms[LIVE_ARM]["rates"]["bad"]


def test_undecided_at_the_deadline_is_inconclusive(monkeypatch):
    rng = np.random.default_rng(5)
    canary, live = _outcomes(rng, CANARY_ARM, 20, 0.2, 0.3), _outcomes(rng, LIVE_ARM, 80, 0.2, 0.3)
    later = datetime.now(timezone.utc) + timedelta(days=2)
    verdict = _checks(monkeypatch, canary, live, every=len(canary), now=later)[-1]
    assert verdict.action == "inconclusive" and "neither worse nor non-inferior" in verdict.reason
    assert verdict.intervals["bad"]["low"] < 0 < verdict.intervals["bad"]["high"]


def test_deadline_with_too_little_traffic_keeps_live_and_stores_the_numbers(tmp_path, monkeypatch):
    from deploy.release.canary import check_canary, finish, running_canary, start_canary
    from deploy.release.registry import ensure_base_release
    from store import Store

    settings = load_settings(environ={}, overrides={"data_dir": str(tmp_path), "canary.max_conversations": 3})
    adapter = tmp_path / "adapter"
    adapter.mkdir()
    (adapter / "adapter_config.json").write_text("{}")
    with Store(settings.db_path) as store:
        live = ensure_base_release(store, "base")
        cand = store.releases.create(base_model="base", adapter_path=str(adapter), decision={"promote": True})
        start_canary(store, None, cand.id, settings)
        rng = np.random.default_rng(6)
        # The budget (3 canary conversations) is spent with far fewer than 30 answers per arm.
        rows = _outcomes(rng, CANARY_ARM, 3, 0.2, 0.3, cand.id) + _outcomes(rng, LIVE_ARM, 12, 0.2, 0.3, live.id)
        monkeypatch.setattr(mod, "answer_outcomes", lambda store, ids, since: rows)
        result = check_canary(store, settings, lambda c, verdict: finish(
            store, None, store.releases.get(c.id), verdict.action, verdict.reason))
        assert result["action"] == "inconclusive" and "too few answers" in result["reason"]
        ended = store.releases.get(cand.id)
        state = ended.decision["canary"]
        assert ended.status == "candidate" and state["state"] == "inconclusive" and state["ended_by"] == "rule"
        assert state["outcome"] == result["reason"] and "live release stays" in state["outcome"]
        assert state["last_check"]["arms"][CANARY_ARM]["answers"] == sum(o.arm == CANARY_ARM for o in rows)
        assert store.releases.live().id == live.id and running_canary(store) is None  # nobody routed to it
        start_canary(store, None, cand.id, settings)  # an inconclusive canary can run again
        assert running_canary(store).id == cand.id
