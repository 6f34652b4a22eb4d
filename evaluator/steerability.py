"""Steerability: do the sliders still work? Spearman ρ of verbosity with answer length and of
complexity with reading grade, over a fixed grid of prompts × values.

Preference training can wear steering down (a training set of short answers at every verbosity
teaches the model to ignore the slider), so the release gate measures it for the candidate and
the live release on the same grid (docs/design.md, "Evaluation and the gate").

Design choices:
- The grid: `prompts` × `values` for each steered attribute, the other attributes at their
  defaults (the caller's answer function sets them). Fixed prompts, none of them a corpus or
  simulator question, so the numbers compare across releases and runs. `answer_grid` and
  `SteerRow.measure` are the one steering measurement: the release gate, the steering bench and
  the built-in model's check all answer and measure through them (each with its own prompts).
- Measures: verbosity → words in the answer; complexity → Flesch–Kincaid grade, 0 for an empty
  answer (`evaluator.text`, as the labeller measures them). ρ is pooled over all grid rows of an
  attribute (as tests/proofs/test_acsft_steering.py measures it), with average ranks for ties.
- A constant measure (the same length at every value) has no defined ρ; it is counted as 0, the
  value of "the slider does nothing", so a model that ignores the slider scores 0, not "unknown".
- The axis value is the mean of the two ρ, and the bootstrap resamples prompts (clusters): all
  rows of a drawn prompt come along, so prompt-to-prompt variation is in the interval.
- evaluator imports none of the project's packages: the caller renders attributes into a prompt
  (`answer(questions, attribute, value)`), so this module only sees texts.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from evaluator.paired import Statistic, spearman
from evaluator.streams import in_streams
from evaluator.text import reading_grade, words

ATTRIBUTES = ("verbosity", "complexity")
VALUES = (0, 1, 2, 3, 4)
# Held-out everyday dilemmas (worded apart from the corpus, the simulator and the helpfulness set).
PROMPTS = (
    "How do I stop hitting snooze every morning?",
    "What can I do about a colleague who takes credit for my work?",
    "How do I say no to a friend who always asks for favours?",
    "How should I split bills fairly with a flatmate?",
    "How can I keep in touch with friends who moved abroad?",
    "What is a good routine for studying after work?",
    "How do I deal with a neighbour whose dog barks all day?",
    "How can I eat more vegetables without much effort?",
    "How do I prepare for my first week at a new job?",
    "How can I spend less time on my phone in the evening?",
    "How do I tell my manager I'm overwhelmed with my workload?",
    "What should I do when my partner and I disagree about money?",
    "How can I make friends after moving to a new city?",
    "How do I stay motivated to exercise in winter?",
    "What is a kind way to decline a wedding invitation?",
    "How should I handle a friend who is always late?",
    "How can I spend less on groceries each week?",
    "How do I ask for a raise without sounding demanding?",
    "What can I do when I can't fall asleep at night?",
    "How do I set boundaries with parents who call every day?",
)

SteerAnswerFn = Callable[[Sequence[str], str, int], list[str]]  # (questions, attribute, value) -> answers


@dataclass(frozen=True)
class SteerRow:
    prompt: int  # index into the prompt list
    attribute: str
    value: int
    answer: str

    @property
    def measure(self) -> float:
        return measure(self.attribute, self.answer)


def measure(attribute: str, text: str) -> float:
    """Words (verbosity) or Flesch–Kincaid grade (complexity) of an answer."""
    if attribute == "verbosity":
        return float(words(text))
    if attribute == "complexity":
        return reading_grade(text)
    raise ValueError(f"no steering measure for {attribute!r}; steered attributes: {', '.join(ATTRIBUTES)}")


def answer_grid(answer: SteerAnswerFn, prompts: Sequence[str] = PROMPTS, values: Sequence[int] = VALUES,
                attributes: Sequence[str] = ATTRIBUTES, *, streams: int = 1) -> list[SteerRow]:
    """Answer every prompt at every value of every steered attribute (one call per cell, `streams`
    cells side by side: `evaluator.streams`)."""
    cells = [(attribute, value) for attribute in attributes for value in values]
    texts = in_streams(lambda cell: answer(list(prompts), *cell), cells, streams)
    return [SteerRow(i, attribute, value, text) for (attribute, value), out in zip(cells, texts)
            for i, text in enumerate(out)]


def level_means(rows: Sequence[SteerRow], attribute: str) -> dict[int, float]:
    """Mean measure of `attribute`'s rows at each of its values (words per verbosity, grade per complexity)."""
    by_value: dict[int, list[float]] = {}
    for r in rows:
        if r.attribute == attribute:
            by_value.setdefault(r.value, []).append(r.measure)
    return {value: sum(ms) / len(ms) for value, ms in by_value.items()}


def rho(rows: Sequence[SteerRow], attribute: str) -> float:
    """Pooled Spearman ρ of `attribute`'s value with its measure; 0 when undefined (constant)."""
    mine = [r for r in rows if r.attribute == attribute]
    value = spearman([r.value for r in mine], [r.measure for r in mine])
    return 0.0 if math.isnan(value) else value


def score(rows: Sequence[SteerRow]) -> dict[str, float]:
    """{"rho_<attribute>": ρ, ..., "score": mean of the ρ} over the attributes present."""
    attributes = list(dict.fromkeys(r.attribute for r in rows))
    out = {f"rho_{a}": rho(rows, a) for a in attributes}
    out["score"] = float(np.mean(list(out.values()))) if attributes else math.nan
    return out


def steer_statistic(candidate: Sequence[SteerRow], live: Sequence[SteerRow]) -> tuple[int, Statistic]:
    """(number of prompts, statistic) for `evaluator.paired.paired_bootstrap`, resampling prompts."""
    prompts = sorted({r.prompt for r in candidate} | {r.prompt for r in live})
    by_prompt = [([r for r in candidate if r.prompt == p], [r for r in live if r.prompt == p]) for p in prompts]

    def stat(idx: np.ndarray) -> tuple[float, float]:
        cand = [r for i in idx for r in by_prompt[i][0]]
        liv = [r for i in idx for r in by_prompt[i][1]]
        return score(cand)["score"], score(liv)["score"]

    return len(prompts), stat
