"""Tune the fast extractor's thresholds on the dev split of a gold file, and record the result.

    python -m feedback.extract.tune [--gold FILE] [--out FILE] [--max-embedding-rate 0.05]

Design choices:
- Coordinate ascent over a small grid per threshold (a full grid is ~50,000 configurations):
  sweep each threshold with the others fixed, keep the best, repeat until nothing improves.
  Every evaluation reuses one embedding cache, so the whole search embeds each text once.
- What is tuned is the rules' reading (`FastConfig.rules_only()`): the thresholds the rules use on
  their own and that the sentence classifier reads as features. Retuning them changes the
  classifier's features, so retrain it afterwards (`train_classifier.py`).
- Objective: span F1 (the harmonic mean of the paper's span precision and recall) on the dev
  split only; the test split is never looked at, so figures reported on it stay honest.
  Ties go to the configuration that sends fewer windows to the embedding model, then to higher
  category F1.
- The embedding model is the expensive part of the fast path (milliseconds a sentence, against
  tens of microseconds for the cues), so a configuration may send at most `max_embedding_rate`
  of the windows to it; the chosen rate is recorded next to the scores.
- The result (values, dev scores, embedding rate, grid, date) is written to
  `feedback/data/fast_thresholds.json`, which `FastConfig.tuned()` reads.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from dataclasses import dataclass, replace
from datetime import date
from pathlib import Path

import numpy as np

from feedback.extract.fast import TUNED_PATH, Embedder, FastConfig, FastExtractor
from feedback.extract.gold import SHIPPED_GOLD, GoldConversation, load_gold, predict, windows_of
from feedback.extract.metrics import evaluate

GRID: dict[str, tuple] = {
    "correction_min_info": (1, 2, 3, 4),
    "statement_min_info": (2, 3, 4, 5),
    "clarify_min_overlap": (0.34, 0.5, 0.51, 0.67, 1.0),
    "rephrase_lexical_low": (0.0, 0.1, 0.2, 0.3, 0.4, 0.5),
    "rephrase_lexical_high": (0.5, 0.6, 0.7, 0.8, 0.9, 1.01),
    "rephrase_embedding": (0.4, 0.45, 0.5, 0.55, 0.6, 0.65, 0.7, 0.75),
    "rephrase_max_answer_overlap": (0.2, 0.3, 0.5, 0.7, 1.0),
}


class CachingEmbedder:
    """Embeds each distinct text once across all evaluations of a tuning run."""

    def __init__(self, embedder: Embedder):
        self.embedder = embedder
        self.cache: dict[str, np.ndarray] = {}

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in self.cache]
        if missing:
            for t, v in zip(missing, self.embedder(missing)):
                self.cache[t] = v
        return np.stack([self.cache[t] for t in texts]) if texts else np.zeros((0, 384), dtype=np.float32)


@dataclass(frozen=True)
class Score:
    span_f1: float
    category_f1: float
    embedding_rate: float
    metrics: dict

    def key(self) -> tuple:
        return (round(self.span_f1, 6), -round(self.embedding_rate, 6), round(self.category_f1, 6))


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r else 0.0


def score(config: FastConfig, conversations: Sequence[GoldConversation], embedder: Embedder) -> Score:
    extractor = FastExtractor(config.rules_only(), embedder=embedder)  # the thresholds are the rules'.
    predictions, result = predict(extractor, conversations)
    m = evaluate(conversations, predictions, n_bootstrap=0)
    n_windows = sum(len(windows_of(c)) for c in conversations) or 1
    return Score(
        _f1(m["span_precision"]["value"], m["span_recall"]["value"]),
        _f1(m["category_precision"]["value"], m["category_recall"]["value"]),
        result.stats["embedded_pairs"] / n_windows,
        m,
    )


def tune(
    conversations: Sequence[GoldConversation],
    embedder: Embedder,
    *,
    start: FastConfig | None = None,
    grid: dict[str, tuple] = GRID,
    max_embedding_rate: float = 0.05,
    max_rounds: int = 4,
) -> tuple[FastConfig, Score, list[dict]]:
    """Coordinate ascent; returns the best feasible config, its score and the search history."""
    cached = CachingEmbedder(embedder)
    best_config = start or FastConfig()
    best = score(best_config, conversations, cached)
    history = [{"round": 0, "config": best_config.as_dict(), "span_f1": best.span_f1,
                "embedding_rate": best.embedding_rate}]
    for round_no in range(1, max_rounds + 1):
        improved = False
        for name, values in grid.items():
            for value in values:
                candidate = replace(best_config, **{name: value})
                if candidate == best_config:
                    continue
                if candidate.rephrase_lexical_low > candidate.rephrase_lexical_high:
                    continue
                s = score(candidate, conversations, cached)
                feasible = s.embedding_rate <= max_embedding_rate
                if feasible and (s.key() > best.key() or best.embedding_rate > max_embedding_rate):
                    best_config, best, improved = candidate, s, True
                    history.append({"round": round_no, "config": candidate.as_dict(), "span_f1": s.span_f1,
                                    "embedding_rate": s.embedding_rate})
        if not improved:
            break
    return best_config, best, history


def record(config: FastConfig, best: Score, *, gold: Path, split: str, n_conversations: int,
           max_embedding_rate: float, history: list[dict], out: Path = TUNED_PATH) -> dict:
    m = best.metrics
    payload = {
        "config": {k: v for k, v in config.as_dict().items() if k != "classifier"},
        "tuned_on": {"gold": gold.name, "split": split, "n_conversations": n_conversations},
        "objective": "span F1 on the dev split (ties: fewer embedded windows, then category F1)",
        "dev_score": {
            "span_f1": round(best.span_f1, 4),
            "category_f1": round(best.category_f1, 4),
            "span_precision": m["span_precision"]["value"],
            "span_recall": m["span_recall"]["value"],
            "category_precision": m["category_precision"]["value"],
            "category_recall": m["category_recall"]["value"],
        },
        "embedding_rate": round(best.embedding_rate, 4),
        "max_embedding_rate": max_embedding_rate,
        "grid": {k: ", ".join(str(x) for x in v) for k, v in GRID.items()},
        "search_steps": len(history),
        "date": date.today().isoformat(),
    }
    out.write_text(json.dumps(payload, indent=2) + "\n")
    return payload


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gold", type=Path, default=SHIPPED_GOLD)
    parser.add_argument("--split", default="dev")
    parser.add_argument("--out", type=Path, default=TUNED_PATH)
    parser.add_argument("--max-embedding-rate", type=float, default=0.05)
    args = parser.parse_args(argv)
    from feedback.extract.embed import MiniLMEmbedder

    conversations = load_gold(args.gold, split=args.split)
    config, best, history = tune(conversations, MiniLMEmbedder(), max_embedding_rate=args.max_embedding_rate)
    payload = record(config, best, gold=args.gold, split=args.split, n_conversations=len(conversations),
                     max_embedding_rate=args.max_embedding_rate, history=history, out=args.out)
    print(json.dumps(payload, indent=2))


if __name__ == "__main__":
    main()
