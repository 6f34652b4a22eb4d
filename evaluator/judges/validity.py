"""Checks that a judge measures what it claims, run with every gate decision and reported beside it.

- Relevance: an answer to the prompt must beat the same model's answer to a different prompt,
  both scored under the first prompt (a judge that rates answers without reading the question
  fails it). Each prompt meets one other prompt's answer, by a seeded derangement.
- Length: Spearman correlation of the judge's scores with the answers' word counts (the gate also
  reports the difference at equal length, `evaluator.paired.length_controlled_statistic`).
- Known groups (SmolLM2 over the built-in model on the gate's advice prompts) needs both models'
  answers, so it is measured once per judge version (`bench/judges.py`) and reported in docs/judges.md.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np

from evaluator.paired import spearman
from evaluator.text import words


def derangement(n: int, seed: int = 0) -> np.ndarray:
    """A seeded permutation with no fixed point (every answer meets another prompt)."""
    rng = np.random.default_rng(seed)
    while True:
        perm = rng.permutation(n)
        if n < 2 or not np.any(perm == np.arange(n)):
            return perm


def relevance_scores(score: Callable[[list, list], Any], prompts: Sequence[str], answers: Sequence[str],
                     own_scores: Sequence[float] | None = None, *, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """(own, other): each prompt's own answer scored under it, and the answer to the prompt the
    seeded derangement pairs it with, scored under it too. `own_scores` saves scoring the own
    answers again (on the same scale as `score`)."""
    perm = derangement(len(prompts), seed)
    own = np.asarray(own_scores if own_scores is not None else score(list(prompts), list(answers)), dtype=float)
    other = np.asarray(score(list(prompts), [answers[j] for j in perm]), dtype=float)
    return own, other


def relevance(score: Callable[[list, list], Any], prompts: Sequence[str], answers: Sequence[str],
              own_scores: Sequence[float] | None = None, *, seed: int = 0) -> dict:
    """Share of prompts whose own answer `score(prompts, answers)` rates above another prompt's
    answer (`relevance_scores`)."""
    if len(prompts) < 2:
        return {"share": None, "pairs": 0}
    own, other = relevance_scores(score, prompts, answers, own_scores, seed=seed)
    return {"share": float(np.mean(own > other)), "pairs": len(prompts)}


def length_correlation(scores: Sequence[float], answers: Sequence[str]) -> float | None:
    if len(scores) < 3:
        return None
    rho = spearman(list(scores), [words(a) for a in answers])
    return None if rho != rho else float(rho)  # NaN when all lengths are equal
