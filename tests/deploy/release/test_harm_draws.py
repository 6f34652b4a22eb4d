"""The model-alone harmlessness axis with several answers per risky prompt: one greedy answer when
`gate.harmlessness_draws` is 1 (as before); otherwise that many sampled answers at the gate's token
budget, each draw seeded alike on every side and named in the answer cache's key, and each prompt
scored by the share of its answers the judge calls safe."""

from __future__ import annotations

import pytest

from deploy.release import measure
from deploy.settings import SettingsError, load_settings


class _Judge:
    """Flags an answer that contains "unsafe"."""

    threshold = 0.5

    def answer_risk(self, requests, answers):
        assert len(requests) == len(answers)
        return [1.0 if "unsafe" in a else 0.0 for a in answers]


def test_each_prompt_scores_the_share_of_its_answers_judged_safe():
    prompts = ["a", "b", "c"]
    draws = [["fine", "unsafe 1", "unsafe 2"], ["fine", "fine", "unsafe 3"], ["unsafe 4", "fine", "unsafe 5"]]
    harm, shares = measure.safe_shares(prompts, draws, _Judge())
    assert shares == pytest.approx([2 / 3, 2 / 3, 0.0])
    assert harm.answers == 9 and harm.unsafe == 5
    one, single = measure.safe_shares(prompts, draws[:1], _Judge())
    assert single == [1.0, 0.0, 0.0] and 1 - one.unsafe / one.answers == pytest.approx(sum(single) / 3)


def test_the_same_answer_twice_counts_once_per_draw():
    _, shares = measure.safe_shares(["a"], [["unsafe"], ["unsafe"], ["fine"]], _Judge())
    assert shares == pytest.approx([1 / 3])


def _recording_answer_fn(calls: list[dict]):
    def answer_fn(model, tokenizer, settings, attributes=None, *, cache=None, seed=None, max_new_tokens=None, **_):
        calls.append({"seed": seed, "max_new_tokens": max_new_tokens})

        def answer(questions):
            return [f"{q} {'greedy' if seed is None else seed}" for q in questions]
        return answer
    return answer_fn


def test_one_draw_is_one_greedy_answer_and_more_are_seeded_samples(monkeypatch):
    calls: list[dict] = []
    monkeypatch.setattr(measure, "_answer_fn", _recording_answer_fn(calls))
    greedy = load_settings(environ={}, overrides={"gate.harmlessness_draws": 1})
    assert measure.risky_answer_sets(None, None, greedy, ["q"]) == [["q greedy"]]
    assert calls == [{"seed": None, "max_new_tokens": None}]

    calls.clear()
    three = load_settings(environ={}, overrides={"gate.harmlessness_draws": 3, "gate.max_new_tokens": 48})
    sets = measure.risky_answer_sets(None, None, three, ["q", "r"])
    seeds = [measure.DRAW_SEED + d for d in range(3)]
    assert [c["seed"] for c in calls] == seeds  # each draw its own seed, and so its own cache key
    assert all(c["max_new_tokens"] == 48 for c in calls)  # the gate's budget, not the chat's
    assert sets == [[f"q {s}", f"r {s}"] for s in seeds]
    assert measure.risky_answer_sets(None, None, three, ["q", "r"]) == sets  # the same seeds on every side
    other = measure.risky_answer_sets(None, None, three, ["q"], seed=7)
    assert other == [[f"q {7 + d}"] for d in range(3)]


def test_draws_are_bounded_and_four_by_default():
    assert load_settings(environ={}, overrides={}).gate.harmlessness_draws == 4
    with pytest.raises(SettingsError):
        load_settings(environ={}, overrides={"gate.harmlessness_draws": 0})
