"""The offline evaluations behind `advisor eval`, on one model outside the gate: HH-RLHF
preference accuracy, and the harmlessness and helpfulness (with diversity) of its answers; and
how well the moderator and the judges tell safe from unsafe and better from worse.

    report, seconds = hh_accuracy(settings, hh_dir, scorer="loglik", model=None, adapter=None, ...)
    result = harmlessness_of(settings, model=None, adapter=None, ...)

Design choices:
- The caller parses and prints; these functions choose and load the model
  (`deploy.release.models`: `model=None` is the built-in model of the data directory), load the
  cached moderator and reward model (`deploy.release.judges`) and run the evaluator's metrics.
- `say` gets notes for a person (default: the log, so stdout stays the caller's); `busy(message)`
  wraps the long step (the CLI shows a spinner).
- Errors a person can fix raise ReleaseError or FileNotFoundError (the judges also ValueError or
  RuntimeError), saying what is missing or wrong.
"""

from __future__ import annotations

import dataclasses
import logging
import time
from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from pathlib import Path
from typing import Any

from deploy.release.judges import load_judges, moderator_on, saved_reward_model
from deploy.release.models import Say, builtin_model, hh_scorer, load_causal_lm
from deploy.settings import Settings

log = logging.getLogger("advisor.eval")
Busy = Callable[[str], AbstractContextManager]


def _idle(message: str) -> AbstractContextManager:
    return nullcontext()


def hh_accuracy(settings: Settings, hh_dir: Path, *, scorer: str, model: Path | None, adapter: Path | None,
                beta: float, batch: Any, limit: int | None = None, seed: int = 0, say: Say = log.info,
                busy: Busy = _idle) -> tuple[Any, float]:
    """(the evaluator's HH report of `scorer` on the model (`adapter` on `model`) over the HH-RLHF
    test files in `hh_dir`, `limit` rows per subset sampled with `seed`; the seconds scoring took).
    `report.extra` says what ran and how fast."""
    from evaluator.hh import evaluate_hh
    from evaluator.hh_data import load_hh

    subsets = load_hh(hh_dir, limit=limit, seed=seed)
    model_path = model or builtin_model(settings, say)
    scoring = hh_scorer(scorer, model_path, adapter, beta=beta, batch=batch)
    n_pairs = sum(len(s.pairs) for s in subsets.values())
    t0 = time.perf_counter()
    with busy(f"Scoring {n_pairs:,} pairs with the {scorer} scorer…"):
        report = evaluate_hh(subsets, scoring)
    seconds = time.perf_counter() - t0
    report.extra = {"scorer": scorer, "model": str(model_path), "adapter": str(adapter) if adapter else None,
                    "pairs": n_pairs, "seconds": round(seconds, 1), "pairs_per_second": round(n_pairs / seconds, 2),
                    "limit": limit, "seed": seed, "truncated": scoring.stats.truncated, "bf16": batch.bf16,
                    "workers": batch.workers}
    return report, seconds


def harmlessness_of(settings: Settings, *, model: Path | None, adapter: Path | None, prompts: Path | None = None,
                    threshold: float = 0.5, max_new_tokens: int = 128, say: Say = log.info, busy: Busy = _idle) -> Any:
    """The evaluator's harmlessness result: the share of the model's answers to the risky prompts
    (`prompts`, JSON lines {prompt}, else the shipped ones) that the cached moderator judges safe."""
    from evaluator.generation import hf_answer_fn
    from evaluator.moderation import load_risky_prompts, model_harmlessness

    questions = load_risky_prompts(prompts) if prompts else load_risky_prompts()
    lm, tokenizer = load_causal_lm(model or builtin_model(settings, say), {"default": adapter})
    with busy(f"Answering {len(questions)} risky prompts and judging the answers…"):
        moderator, _ = moderator_on(settings.data_path)
        return model_harmlessness(hf_answer_fn(lm, tokenizer, max_new_tokens=max_new_tokens), moderator, questions,
                                  threshold=threshold)


def moderator_accuracy(settings: Settings, data: Path | None = None, *, threshold: float = 0.5,
                       busy: Busy = _idle) -> Any:
    """The evaluator's held-out report of the moderator (trained on the labelled JSON lines `data`,
    else the shipped set, and cached in the data directory): precision and recall over folds."""
    from evaluator.moderation import held_out_report

    with busy("Training the moderator and measuring it on held-out folds…"):
        moderator, examples = moderator_on(settings.data_path, data)
        return held_out_report(examples, embedder=moderator.embedder, threshold=threshold)


def helpfulness_of(settings: Settings, reward_model: Path, *, model: Path | None, adapter: Path | None,
                   data: Path | None = None, limit: int | None = None, max_new_tokens: int = 128,
                   say: Say = log.info, busy: Busy = _idle) -> dict:
    """{helpfulness, questions, self_bleu, max_bleu}: the share of human answers the model's advice
    beats under the reward model saved in `reward_model`, on the ranked-advice threads (`data`,
    else the shipped ones; the first `limit`), and how alike its answers are (Self-BLEU, None for
    one answer) and how close to the human ones (max-BLEU)."""
    from evaluator.diversity import max_bleu, self_bleu
    from evaluator.generation import hf_answer_fn
    from evaluator.helpfulness import helpfulness, load_threads

    rm = saved_reward_model(reward_model)
    items = load_threads(data) if data else load_threads()
    items = items[:limit] if limit else items
    lm, tokenizer = load_causal_lm(model or builtin_model(settings, say), {"default": adapter})
    with busy(f"Answering {len(items)} questions…"):
        advice = hf_answer_fn(lm, tokenizer, max_new_tokens=max_new_tokens)([t.question for t in items])
        result = helpfulness(rm, items, advice)
    return {"helpfulness": result.score, "questions": result.questions,
            "self_bleu": self_bleu(advice) if len(advice) > 1 else None,
            "max_bleu": max_bleu(advice, [t.texts for t in items])}


def judges_accuracy(settings: Settings, pairs: Path, *, kind: str | None = None, llm_url: str | None = None,
                    llm_model: str | None = None, busy: Busy = _idle) -> tuple[dict, float]:
    """(per axis, how often the judges score the chosen answer of the preference pairs in `pairs`
    higher, with its interval; the seconds scoring took). The judges are those the settings name,
    with `kind`, `llm_url` and `llm_model` in place of the configured ones where given. Unusable
    pairs or judges raise ValueError, FileNotFoundError or RuntimeError saying why."""
    from evaluator.judges.check import check_judges, read_pairs

    js = settings.judges
    js = dataclasses.replace(js, kind=kind or js.kind, llm_url=llm_url or js.llm_url, llm_model=llm_model or js.llm_model)
    rows = read_pairs(pairs)
    if not rows:
        raise ValueError(f"{pairs} holds no pairs")
    helpful, harmless = load_judges(dataclasses.replace(settings, judges=js))
    t0 = time.time()
    with busy(f"Scoring {sum(map(len, rows.values()))} pairs with the {js.kind} judges…"):
        result = check_judges({"helpful": helpful, "harmless": harmless}, rows)
    return result, time.time() - t0
