"""Measure the built-in model's steering: does length follow verbosity, grade follow complexity?

Used by the slow test and by `advisor model build --check`. The questions are everyday
dilemmas phrased differently from the corpus (held-out-ish: same topics, new wording), so the
figures say whether the attribute string steers, not whether a training answer is recalled.
Greedy decoding, so the figures are reproducible.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import torch
from transformers import AutoModelForCausalLM, AutoTokenizer

from store.attributes import Attributes

HELD_OUT_QUESTIONS = (
    "I can't sleep at night. What should I do?",
    "How should I save up for a holiday?",
    "My coworker is rude to me. What should I do?",
    "How can I meet people after moving to a new town?",
    "How do I handle arguments with my mum and dad?",
    "What should I pack for a week-long trip?",
    "How can I concentrate when I revise?",
    "How do I get into the habit of exercising?",
    "How can I feel less stressed every day?",
    "How do I stop wasting money on takeaway food?",
)


def load(model_dir: Path) -> tuple:
    tok = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModelForCausalLM.from_pretrained(model_dir)
    return model.eval(), tok


def generate_answers(model_dir: Path | tuple, questions: tuple[str, ...], attributes: str, *,
                     max_new_tokens: int = 300) -> list[str]:
    """Greedy answers to each question; `model_dir` may also be a loaded (model, tokenizer)."""
    model, tok = model_dir if isinstance(model_dir, tuple) else load(model_dir)
    out = []
    for q in questions:
        enc = tok.apply_chat_template([{"role": "user", "content": q}], add_generation_prompt=True,
                                      attributes=attributes, return_dict=True, return_tensors="pt")
        with torch.no_grad():
            ids = model.generate(**enc, max_new_tokens=max_new_tokens, do_sample=False)
        out.append(tok.decode(ids[0, enc["input_ids"].shape[1]:], skip_special_tokens=True).strip())
    return out


@dataclass(frozen=True)
class SteeringReport:
    words_by_verbosity: dict[int, float]  # mean words per answer (at complexity 2)
    grade_by_complexity: dict[int, float]  # mean Flesch-Kincaid grade (at verbosity 2)
    samples: dict[str, list[str]]  # SteerLM string -> answers

    @property
    def verbosity_ratio(self) -> float:
        """Mean length at the highest verbosity measured over that at the lowest."""
        lo, hi = min(self.words_by_verbosity), max(self.words_by_verbosity)
        return self.words_by_verbosity[hi] / max(self.words_by_verbosity[lo], 1e-9)


def measure_steering(model_dir: Path, questions: tuple[str, ...] = HELD_OUT_QUESTIONS,
                     verbosities: tuple[int, ...] = (0, 4), complexities: tuple[int, ...] = (0, 4)) -> SteeringReport:
    """Mean answer length per verbosity level and mean reading grade per complexity level, measured
    as the release gate measures steering (`evaluator.steerability`), the other attributes at their defaults."""
    from evaluator.steerability import answer_grid, level_means

    loaded = load(model_dir)
    samples: dict[str, list[str]] = {}

    def answer(qs: list[str], attribute: str, value: int) -> list[str]:
        attributes = Attributes(**{attribute: value}).steerlm()
        samples[attributes] = generate_answers(loaded, tuple(qs), attributes)
        return samples[attributes]

    rows = (answer_grid(answer, questions, verbosities, ("verbosity",))
            + answer_grid(answer, questions, complexities, ("complexity",)))
    return SteeringReport(level_means(rows, "verbosity"), level_means(rows, "complexity"), samples)
