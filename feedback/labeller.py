"""Attribute labels for attribute-conditioned SFT (SteerLM), and how an answer was received.

SteerLM trains on the attributes an answer *has*, not the ones that were asked for: if the model
wrote a long answer when verbosity 1 was requested, training it under "verbosity:1" would teach
it to ignore the slider. So every SFT example is re-labelled from its text and its reception.

Design choices:
- `Labeller` is a Protocol with one method, so any regression model (a HelpSteer-style reward
  model, an LLM judge) can replace the default by passing an object with `label`.
- `HeuristicLabeller` (the default) is cheap and explainable: verbosity from the word count,
  complexity from the Flesch-Kincaid grade (both measured by `evaluator.text`), helpfulness /
  correctness / coherence from the feedback the answer received. Its thresholds sit halfway between the medians of
  adjacent levels in the built-in model's shipped corpus, so the labels speak the same language
  the built-in model was trained on; they are fields, so a deployment can recalibrate them.
  `calibrated` sets the verbosity thresholds the same way from the word counts of answers at the
  slider positions they were asked for (a training set's own conversations: the models that
  wrote them, in the learning bench one).
- `Reception.verdict` is the one place that decides whether an answer went down well; the
  training-set builders use it too, so SFT, KTO and DPO agree. An explicit rating wins over
  mined feedback (the user pressed the button on purpose); mined positive and negative feedback
  on the same answer is "mixed" and used for nothing.
"""

from __future__ import annotations

import bisect
import statistics
from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass, field, replace
from typing import Protocol

from evaluator.text import reading_grade, words
from store.attributes import Attributes
from store.taxonomy import (
    ASK_CLARIFICATION,
    AWARE_WITH_CORRECTION,
    AWARE_WITHOUT_CORRECTION,
    POSITIVE,
    REPEAT_REPHRASE,
)

NEGATIVE_CATEGORIES = frozenset({AWARE_WITH_CORRECTION, AWARE_WITHOUT_CORRECTION})

GOOD, BAD, NEUTRAL, MIXED = "good", "bad", "neutral", "mixed"


@dataclass(frozen=True)
class Reception:
    """How the user received one answer: their latest explicit rating and the mined feedback
    categories of the user turn that followed it."""

    rating: int | None = None  # +1 like, -1 dislike, None: not rated
    categories: frozenset[str] = field(default_factory=frozenset)

    @property
    def verdict(self) -> str:
        """good | bad | neutral | mixed (see the module docstring for the rule)."""
        if self.rating == 1:
            return GOOD
        if self.rating == -1:
            return BAD
        positive = POSITIVE in self.categories
        negative = bool(self.categories & NEGATIVE_CATEGORIES)
        if positive and negative:
            return MIXED
        if positive:
            return GOOD
        if negative:
            return BAD
        return NEUTRAL

    @property
    def source(self) -> str:
        """What decided the verdict: liked | disliked | positive_feedback | negative_feedback | none."""
        if self.rating == 1:
            return "liked"
        if self.rating == -1:
            return "disliked"
        verdict = self.verdict
        return {GOOD: "positive_feedback", BAD: "negative_feedback"}.get(verdict, "none")


class Labeller(Protocol):
    """Anything that can put HelpSteer attributes (0-4 each) on an answer."""

    name: str

    def label(self, answer: str, reception: Reception) -> Attributes: ...


@dataclass(frozen=True)
class HeuristicLabeller:
    """Verbosity from length, complexity from reading grade, quality from the reception.

    `verbosity_words[i]` is the smallest word count labelled verbosity i+1;
    `complexity_grades[i]` the smallest Flesch-Kincaid grade labelled complexity i+1.
    """

    verbosity_words: tuple[int, ...] = (16, 28, 48, 66)
    complexity_grades: tuple[float, ...] = (2.0, 5.0, 9.5, 12.5)
    name: str = "heuristic-v1"

    def label(self, answer: str, reception: Reception) -> Attributes:
        verbosity = bisect.bisect_right(self.verbosity_words, words(answer))
        complexity = bisect.bisect_right(self.complexity_grades, reading_grade(answer))
        helpfulness, correctness, coherence = self._quality(reception)
        return Attributes(
            helpfulness=helpfulness, correctness=correctness, coherence=coherence,
            complexity=complexity, verbosity=verbosity,
        )

    @staticmethod
    def _quality(reception: Reception) -> tuple[int, int, int]:
        """(helpfulness, correctness, coherence) from how the answer was received."""
        verdict = reception.verdict
        if verdict == GOOD:
            return 4, 4, 4
        if verdict == BAD:
            # A correction says the content was wrong; a bare "not helpful" or a dislike says
            # it missed the point but not that it was false.
            correctness = 1 if AWARE_WITH_CORRECTION in reception.categories else 2
            return 1, correctness, 3
        if REPEAT_REPHRASE in reception.categories or ASK_CLARIFICATION in reception.categories:
            return 2, 3, 2  # the user had to ask again or ask what it meant
        return 3, 3, 4  # no signal either way (or mixed): the middle of the scale


def calibrated(asked: Iterable[tuple[int, int]], base: HeuristicLabeller | None = None,
               min_per_level: int = 3) -> HeuristicLabeller | None:
    """`base` with its verbosity thresholds halfway between the median word counts of adjacent
    levels among `asked` ((verbosity asked for, words of the answer written) pairs): labels in the
    language of the model that wrote the answers. None when a level has fewer than `min_per_level`
    answers. Medians are made non-decreasing first: a model that writes less at a higher level is
    read as writing as much as at the level below."""
    base = base or HeuristicLabeller()
    by_level: dict[int, list[int]] = defaultdict(list)
    for level, n in asked:
        by_level[level].append(n)
    levels = range(len(base.verbosity_words) + 1)
    if any(len(by_level[v]) < min_per_level for v in levels):
        return None
    medians: list[float] = []
    for v in levels:
        medians.append(max(statistics.median(by_level[v]), medians[-1] if medians else 0.0))
    cuts = tuple(int(round((a + b) / 2)) for a, b in zip(medians, medians[1:]))
    return replace(base, verbosity_words=cuts, name=f"{base.name}, verbosity words {'/'.join(map(str, cuts))}")
