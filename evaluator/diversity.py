"""Diversity of generated advice: max-BLEU against references and Self-BLEU (sacrebleu).

- max-BLEU: for each generated text, the highest sentence BLEU against any of its references
  (the human answers to the same question, or a shared pool such as the training set), averaged.
  High = the model copies or closely paraphrases what it has seen.
- Self-BLEU (Zhu et al. 2018, Texygen): each generated text scored by sentence BLEU against all
  the *other* generated texts as references, averaged. High = the answers look alike.

Scale: sacrebleu's 0-100. Sentence BLEU uses `effective_order=True` so a short text without
4-gram matches is not scored 0 automatically (sacrebleu's own advice for sentence-level BLEU).
"""

from __future__ import annotations

from collections.abc import Sequence

from sacrebleu.metrics import BLEU

_BLEU = BLEU(effective_order=True)


def sentence_bleu(hypothesis: str, references: Sequence[str]) -> float:
    if not references:
        raise ValueError("sentence BLEU needs at least one reference")
    return float(_BLEU.sentence_score(hypothesis, list(references)).score)


def max_bleu(hypotheses: Sequence[str], references: Sequence[str] | Sequence[Sequence[str]]) -> float:
    """Mean over hypotheses of the best single-reference sentence BLEU.

    `references` is either one pool shared by every hypothesis (list of str) or one list per
    hypothesis (list of lists of str).
    """
    if not hypotheses:
        raise ValueError("no hypotheses to score")
    shared = all(isinstance(r, str) for r in references)
    if not shared and len(references) != len(hypotheses):
        raise ValueError(f"got {len(hypotheses)} hypotheses but {len(references)} reference lists")
    best = []
    for i, hyp in enumerate(hypotheses):
        refs = references if shared else references[i]
        if not refs:
            raise ValueError(f"hypothesis {i} has no references")
        best.append(max(sentence_bleu(hyp, [ref]) for ref in refs))
    return sum(best) / len(best)


def self_bleu_scores(texts: Sequence[str]) -> list[float]:
    """Each text's sentence BLEU against all the others (multi-reference): Self-BLEU per text,
    which the gate pairs by prompt for its bootstrap interval."""
    if len(texts) < 2:
        raise ValueError(f"Self-BLEU needs at least two texts, got {len(texts)}")
    return [sentence_bleu(t, [o for j, o in enumerate(texts) if j != i]) for i, t in enumerate(texts)]


def self_bleu(texts: Sequence[str]) -> float:
    """Mean sentence BLEU of each text against all the others (multi-reference)."""
    scores = self_bleu_scores(texts)
    return sum(scores) / len(scores)
