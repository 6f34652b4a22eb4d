"""bench/quality.py's pure parts: the question set is unseen by the built-in model, the chance
baseline never pairs an answer with its own question, and the on-topic threshold rule."""

from __future__ import annotations

import numpy as np
from bench_helpers import load_bench


def _quality():
    return load_bench("quality")


def test_forty_distinct_questions_none_in_the_builtin_corpus():
    q = _quality()
    rows = q.load_questions()
    assert len(rows) == 40
    assert len({q._norm(r["question"]) for r in rows}) == 40
    corpus = {q._norm(r["question"]) for r in q.read_jsonl(q.CORPUS)}
    assert not corpus & {q._norm(r["question"]) for r in rows}


def test_derangement_has_no_fixed_point_and_is_seeded():
    q = _quality()
    for n in (2, 3, 40):
        perm = q.derangement(n)
        assert sorted(perm) == list(range(n)) and not np.any(perm == np.arange(n))
    assert q.derangement(40).tolist() == q.derangement(40).tolist()


def test_bootstrap_mean_brackets_the_mean():
    q = _quality()
    out = q.bootstrap_mean(np.arange(40) / 40, n_boot=200)
    assert out["ci95"][0] < out["value"] < out["ci95"][1] and out["n"] == 40


def _relevance(own, mismatched):
    own = np.asarray(own, float)
    return {"per_answer": own.tolist(), "own_percentiles": {"p5": float(np.percentile(own, 5))},
            "mismatched_percentiles": {"p99": float(np.percentile(mismatched, 99))},
            "_mismatched": np.asarray(mismatched, float)}


def test_threshold_sits_between_chance_and_real_answers():
    q = _quality()
    rng = np.random.default_rng(0)
    real = _relevance(rng.uniform(0.55, 0.85, 40), rng.uniform(0.0, 0.3, 1560))
    t = q.choose_threshold(real)
    assert real["mismatched_percentiles"]["p99"] < t["value"] < real["own_percentiles"]["p5"]
    assert t["value"] * 20 == round(t["value"] * 20)  # on the 0.05 grid here
    assert t["real_answers_below"] <= 2


def test_threshold_says_when_relevance_does_not_separate():
    q = _quality()
    rng = np.random.default_rng(0)
    t = q.choose_threshold(_relevance(rng.uniform(0.1, 0.3, 40), rng.uniform(0.0, 0.35, 1560)))
    assert "not above" in t["reason"]
