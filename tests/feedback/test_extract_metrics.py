"""The paper's extraction metrics on toy cases checked by hand."""

from __future__ import annotations

import pytest

from feedback.extract.gold import GoldConversation, GoldFeedback
from feedback.extract.metrics import Prediction, evaluate, span_matches


def test_span_rule_substring_and_at_least_half():
    gold = "Thanks, that's really helpful!"  # 30 characters
    assert span_matches("Thanks, that's really helpful!", gold)
    assert span_matches("that's really helpful!", gold)  # 22 >= 15
    assert span_matches("  that's really helpful!  ", gold)  # surrounding whitespace ignored
    assert span_matches("Thanks, that's r", gold)  # 16 >= 15
    assert not span_matches("Thanks, that's ", gold)  # 14 (stripped) < 15
    assert not span_matches("Thanks!", gold)  # too short
    assert not span_matches("Thanks, that's really helpful! Bye", gold)  # longer: not a substring
    assert not span_matches("thanks, that's really helpful!", gold)  # case matters: a substring test
    assert not span_matches("", gold)


def _conv(conv_id: str, feedback: list[tuple[int, str, str]]) -> GoldConversation:
    messages = ({"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                {"role": "user", "content": "Thanks, that helps. What is a sinking fund? That's wrong."},
                {"role": "assistant", "content": "b"}, {"role": "user", "content": "No, I earn less than that."})
    return GoldConversation(conv_id, messages, tuple(GoldFeedback(*f) for f in feedback))


GOLD = [
    _conv("c1", [(2, "positive", "Thanks, that helps."), (2, "ask_clarification", "What is a sinking fund?"),
                 (4, "aware_with_correction", "No, I earn less than that.")]),
    _conv("c2", [(2, "aware_without_correction", "That's wrong.")]),
]


def test_toy_precision_recall_by_hand():
    predictions = {
        "c1": [
            Prediction(2, "positive", "Thanks, that helps."),  # span ok, category ok
            Prediction(2, "positive", "What is a sinking fund?"),  # span ok, category wrong
            Prediction(4, "aware_with_correction", "No,"),  # too short: wrong span
            Prediction(2, "aware_with_correction", "No, I earn less than that."),  # right text, wrong message
        ],
        "c2": [Prediction(2, "aware_without_correction", "That's wrong.")],  # span ok, category ok
        "unknown": [Prediction(2, "positive", "x")],  # not in the gold set: ignored
    }
    m = evaluate(GOLD, predictions, n_bootstrap=0)
    # 5 predictions, 3 with a correct span, 2 of those with the right category.
    assert m["span_precision"]["value"] == pytest.approx(3 / 5)
    assert m["category_precision"]["value"] == pytest.approx(2 / 5)
    # 4 gold spans: 3 found by a correct span (positive, clarification, aware_without), 2 with the right category.
    assert m["span_recall"]["value"] == pytest.approx(3 / 4)
    assert m["category_recall"]["value"] == pytest.approx(2 / 4)
    assert (m["n_conversations"], m["n_gold"], m["n_predicted"]) == (2, 4, 5)
    # Without resamples the interval collapses onto the value.
    assert m["span_precision"]["low"] == m["span_precision"]["high"] == m["span_precision"]["value"]

    per = m["per_category"]
    assert per["positive"] == {"gold": 1, "predicted": 2, "correct_predicted": 1, "found_gold": 1,
                               "precision": 0.5, "recall": 1.0}
    assert per["ask_clarification"]["found_gold"] == 0 and per["ask_clarification"]["recall"] == 0.0
    assert per["aware_with_correction"]["predicted"] == 2 and per["aware_with_correction"]["precision"] == 0.0

    labels = m["confusion"]["labels"]
    cell = {(g, p): m["confusion"]["matrix"][i][j] for i, g in enumerate(labels) for j, p in enumerate(labels)}
    assert cell[("positive", "positive")] == 1
    assert cell[("ask_clarification", "positive")] == 1  # found, wrong category
    assert cell[("aware_with_correction", "none")] == 1  # missed
    assert cell[("aware_without_correction", "aware_without_correction")] == 1
    assert cell[("none", "aware_with_correction")] == 2  # two spurious predictions
    assert sum(map(sum, m["confusion"]["matrix"])) == 4 + 2


def test_no_predictions_and_empty_gold():
    m = evaluate(GOLD, {}, n_bootstrap=50)
    assert m["span_precision"] == {"value": 0.0, "low": 0.0, "high": 0.0}
    assert m["span_recall"]["value"] == 0.0 and m["n_predicted"] == 0
    empty = evaluate([], {}, n_bootstrap=10)
    assert empty["n_conversations"] == 0 and empty["span_recall"]["value"] == 0.0


def test_bootstrap_is_seeded_and_brackets_the_value():
    gold = [_conv(f"c{i}", [(2, "positive", "Thanks, that helps.")]) for i in range(40)]
    # Half the conversations get the right span, half a wrong one.
    preds = {f"c{i}": [Prediction(2, "positive", "Thanks, that helps." if i % 2 else "What is a sinking fund?")]
             for i in range(40)}
    a = evaluate(gold, preds, n_bootstrap=1000, seed=7)
    b = evaluate(gold, preds, n_bootstrap=1000, seed=7)
    assert a == b
    sp = a["span_precision"]
    assert sp["value"] == 0.5 and sp["low"] < 0.5 < sp["high"]
    # 40 coin flips: the 95% interval of a proportion is about +-0.16 wide.
    assert 0.2 < sp["high"] - sp["low"] < 0.45
    assert a["bootstrap"] == {"samples": 1000, "seed": 7, "confidence": 0.95, "unit": "conversation"}
