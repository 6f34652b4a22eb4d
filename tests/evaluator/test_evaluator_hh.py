"""HH preference accuracy: aggregation arithmetic, tie = miss, and the one-call scoring of both sides."""

from __future__ import annotations

import math

import pytest

from evaluator.hh import SubsetResult, aggregate, evaluate_hh, is_correct, score_pairs
from evaluator.hh_data import HHPair, HHStats, HHSubset


class LengthScorer:
    """Longer answer = better; records what it was asked."""

    def __init__(self) -> None:
        self.calls: list[tuple[list, list]] = []

    def score(self, prompts, answers):
        self.calls.append((list(prompts), list(answers)))
        return [float(len(a)) for a in answers]


class ConstantScorer:
    def score(self, prompts, answers):
        return [1.0] * len(answers)


def pair(chosen: str, rejected: str, subset: str = "helpful-base", rejected_prompt=None) -> HHPair:
    return HHPair(subset, 0, [{"role": "user", "content": "q"}], chosen, rejected, rejected_prompt)


def subset(name: str, pairs: list[HHPair], **stats) -> HHSubset:
    return HHSubset(name, pairs, HHStats(rows=len(pairs), **stats))


def test_tie_and_nan_are_misses():
    assert is_correct(2.0, 1.0)
    assert not is_correct(1.0, 1.0)
    assert not is_correct(1.0, 2.0)
    assert not is_correct(math.nan, 1.0) and not is_correct(1.0, math.nan)


def test_helpful_is_pooled_and_mean_is_unweighted():
    results = {
        "harmless-base": SubsetResult(pairs=10, correct=4, ties=0),
        "helpful-base": SubsetResult(pairs=100, correct=80, ties=0),
        "helpful-online": SubsetResult(pairs=50, correct=20, ties=0),
        "helpful-rejection-sampled": SubsetResult(pairs=50, correct=30, ties=0),
    }
    report = aggregate(results)
    assert report.accuracy("helpful-online") == pytest.approx(0.4)
    assert report.helpful == pytest.approx((80 + 20 + 30) / 200)  # pooled, not mean of 0.8, 0.4, 0.6
    assert report.harmless == pytest.approx(0.4)
    assert report.mean == pytest.approx((0.65 + 0.4) / 2)  # unweighted: 10 harmless pairs count as much as 200
    d = report.as_dict()
    assert set(d) >= {"harmless-base", "helpful-base", "helpful-online", "helpful-rejection-sampled",
                      "helpful", "harmless", "mean", "counts"}
    assert d["counts"]["helpful-base"]["pairs"] == 100


def test_missing_axis_gives_no_mean():
    report = aggregate({"helpful-base": SubsetResult(pairs=2, correct=1, ties=0)})
    assert report.helpful == 0.5 and report.harmless is None and report.mean is None


def test_evaluate_counts_correct_ties_and_row_kinds():
    subsets = {
        "harmless-base": subset("harmless-base", [pair("longer answer", "short"), pair("a", "bb")]),
        "helpful-base": subset("helpful-base", [pair("same", "same"), pair("xyz", "abc"), pair("good one", "bad")],
                               equal=1),
    }
    report = evaluate_hh(subsets, LengthScorer())
    assert report.subsets["harmless-base"].correct == 1 and report.harmless == 0.5
    hb = report.subsets["helpful-base"]
    assert (hb.pairs, hb.correct, hb.ties, hb.equal) == (3, 1, 2, 1)  # "same"/"same" and xyz/abc tie: misses
    assert report.helpful == pytest.approx(1 / 3)
    assert report.mean == pytest.approx((0.5 + 1 / 3) / 2)


def test_constant_scorer_scores_zero():
    subsets = {"helpful-base": subset("helpful-base", [pair("a", "b"), pair("c", "d")])}
    assert evaluate_hh(subsets, ConstantScorer()).helpful == 0.0


def test_both_sides_go_in_one_call_with_their_own_prompt():
    own = [{"role": "user", "content": "q"}, {"role": "assistant", "content": "earlier, different"},
           {"role": "user", "content": "q2"}]
    pairs = [pair("c1", "r1"), pair("c2", "r2", rejected_prompt=own)]
    scorer = LengthScorer()
    chosen, rejected = score_pairs(pairs, scorer)
    assert len(scorer.calls) == 1
    prompts, answers = scorer.calls[0]
    assert answers == ["c1", "c2", "r1", "r2"]
    assert prompts[3] is own and prompts[2] == pairs[0].prompt
    assert chosen == [2.0, 2.0] and rejected == [2.0, 2.0]
