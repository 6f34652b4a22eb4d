"""The helpfulness judge's cross-encoder: it round-trips through its files, its weight beside the
head is chosen on dev under the relevance floor, and a judge that needs it says so when it is missing."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from evaluator.judges.crossencoder import CrossEncoder, CrossEncoderSettings, fine_tune, render
from evaluator.judges.features import SCALARS
from evaluator.judges.head import LinearHead
from evaluator.judges.judge import WEIGHTS_DIR, HelpfulnessJudge
from evaluator.judges.pairs import RELEVANCE_FLOOR
from evaluator.judges.train_crossencoder import MIX_CHOICES, choose_mix


def _dicts(head_hh, ce_hh, head_off, ce_off):
    def as_dict(pairs):
        return {str(i): p for i, p in enumerate(pairs)}
    return as_dict(head_hh), as_dict(head_off), as_dict(ce_hh), as_dict(ce_off)


def test_the_mix_is_the_best_dev_accuracy_among_weights_that_keep_relevance():
    # The cross-encoder gets every human pair right and every off-topic pair wrong; the head the
    # reverse on a third of the human pairs. Weighing the cross-encoder in lifts accuracy until it
    # overrules the head on off-topic pairs.
    head_hh = [(1.0, 0.0)] * 6 + [(0.0, 0.3)] * 3 + [(0.0, 1.5)] * 2
    ce_hh = [(1.0, 0.0)] * 11
    head_off, ce_off = [(1.0, 0.0)] * 10, [(0.0, 1.0)] * 10
    w, k, grid = choose_mix(*_dicts(head_hh, ce_hh, head_off, ce_off), say=lambda _: None)
    by_w = {row["w"]: row for row in grid}
    assert by_w[w]["dev_relevance"] >= RELEVANCE_FLOOR
    assert all(row["dev"] <= by_w[w]["dev"] for row in grid if row["dev_relevance"] >= RELEVANCE_FLOOR)
    assert any(row["dev"] > by_w[w]["dev"] for row in grid)  # a better accuracy was refused for relevance
    assert w > 0 and k > 0


def test_with_no_weight_reaching_the_floor_the_best_accuracy_wins():
    head_hh, ce_hh = [(0.0, 1.0)] * 4, [(1.0, 0.0)] * 4
    head_off, ce_off = [(0.0, 1.0)] * 4, [(0.0, 1.0)] * 4
    w, _, _ = choose_mix(*_dicts(head_hh, ce_hh, head_off, ce_off), say=lambda _: None)
    assert w == min(x for x in MIX_CHOICES if x > 1)  # the cross-encoder overrules the head from w > 1; ties: the smaller


def test_a_conversation_is_rendered_turn_by_turn():
    assert render([{"role": "user", "content": "hi"}, {"role": "assistant", "content": "hello"}]) == \
        "User: hi\nAssistant: hello"


@pytest.mark.slow
def test_a_fine_tuned_cross_encoder_scores_the_same_after_a_round_trip(tmp_path):
    convo = [{"role": "user", "content": "How do I boil an egg?"}]
    pairs = [(convo, "Boil it for eight minutes, then cool it in cold water.", "I like trains.")] * 4
    ce = fine_tune(pairs, CrossEncoderSettings(epochs=1, batch_size=2), log=lambda _: None)
    ce.save(tmp_path)
    assert not (tmp_path / "README.md").exists()
    again = CrossEncoder.load(tmp_path)
    answers = [pairs[0][1], pairs[0][2]]
    assert np.allclose(ce.score([convo] * 2, answers), again.score([convo] * 2, answers), atol=1e-5)


def test_a_judge_that_adds_a_missing_cross_encoder_says_how_to_get_it_back():
    shipped = LinearHead.load(WEIGHTS_DIR / "helpful")
    head = replace(shipped, meta={**shipped.meta, "crossencoder": {"w": 1.0, "k": 0.5}})

    class Features:  # the head's columns, all zero: only the missing reader matters here
        def encode(self, prompts, answers):
            return np.zeros((len(answers), 3 * head.hidden + len(SCALARS)), dtype=np.float32)

        def alone(self, answers):
            return np.zeros((len(answers), 2), dtype=np.float32)

    judge = HelpfulnessJudge(Features(), head, np.zeros(1), crossencoder_dir=None)
    with pytest.raises(FileNotFoundError, match="retrain"):
        judge.raw(["How do I boil an egg?"], ["Boil it."])
