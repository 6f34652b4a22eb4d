"""max-BLEU and Self-BLEU on toy texts whose answers are obvious."""

from __future__ import annotations

import pytest

from evaluator.diversity import max_bleu, self_bleu, sentence_bleu

A = "keep the same bedtime every night and dim the lights"
B = "write down your spending for a month and cancel unused subscriptions"
C = "ask your friend privately how they are feeling this week"


def test_self_bleu_is_100_for_copies_and_low_for_different_texts():
    assert self_bleu([A, A, A]) == pytest.approx(100.0)
    assert self_bleu([A, B, C]) < 10
    assert self_bleu([A, A, B]) > self_bleu([A, B, C])


def test_max_bleu_takes_the_best_reference():
    assert max_bleu([A], [B, C, A]) == pytest.approx(100.0)
    assert max_bleu([A, B], [[A, C], [C]]) == pytest.approx((100.0 + sentence_bleu(B, [C])) / 2)
    assert max_bleu([A], [B]) < 10


def test_diversity_inputs_are_checked():
    with pytest.raises(ValueError, match="at least two"):
        self_bleu([A])
    with pytest.raises(ValueError, match="reference lists"):
        max_bleu([A, B], [[A]])
    with pytest.raises(ValueError, match="no references"):
        max_bleu([A], [[]])
