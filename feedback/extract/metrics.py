"""Extraction metrics exactly as Don-Yahiya et al. (2024) define them, with bootstrap intervals.

- A predicted span is correct if it is a substring of a gold span in the same message and at
  least half as long (both stripped of surrounding whitespace).
- Span precision: correct predicted spans / predicted spans. Span recall: gold spans matched by
  at least one correct predicted span / gold spans.
- Category precision and recall: the same, where a match also needs the same category.
- 95% intervals from 1,000 bootstrap resamples of conversations (seeded, so reruns agree):
  conversations, not spans, are the unit, because spans of one conversation are not independent.
  Per-conversation counts are summed per resample, so this costs milliseconds.
- A ratio with an empty denominator (no predictions at all) is reported as 0.0.
Also: a confusion matrix (gold category x predicted category, with "none" for missed gold spans
and spurious predictions) and per-category counts.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from store.taxonomy import CATEGORY_IDS

NONE = "none"
_COLUMNS = ("n_pred", "pred_span_ok", "pred_cat_ok", "n_gold", "gold_span_found", "gold_cat_found")
_METRICS = {
    "span_precision": ("pred_span_ok", "n_pred"),
    "span_recall": ("gold_span_found", "n_gold"),
    "category_precision": ("pred_cat_ok", "n_pred"),
    "category_recall": ("gold_cat_found", "n_gold"),
}


@dataclass(frozen=True)
class Prediction:
    message: int
    category: str
    span: str
    extractor: str = ""


def span_matches(predicted: str, gold: str) -> bool:
    """The paper's rule: a substring of the gold span, at least half as long."""
    p, g = predicted.strip(), gold.strip()
    return bool(p) and p in g and 2 * len(p) >= len(g)


def _conversation_counts(gold_items: Sequence, preds: Sequence[Prediction], confusion: dict) -> list[int]:
    def matches(p: Prediction, g) -> bool:
        return p.message == g.message and span_matches(p.span, g.span)

    pred_span_ok = pred_cat_ok = gold_span_found = gold_cat_found = 0
    for p in preds:
        hits = [g for g in gold_items if matches(p, g)]
        pred_span_ok += bool(hits)
        pred_cat_ok += any(g.category == p.category for g in hits)
        if not hits:
            confusion[(NONE, p.category)] = confusion.get((NONE, p.category), 0) + 1
    for g in gold_items:
        hits = [p for p in preds if matches(p, g)]
        gold_span_found += bool(hits)
        same = any(p.category == g.category for p in hits)
        gold_cat_found += same
        predicted = g.category if same else (hits[0].category if hits else NONE)
        confusion[(g.category, predicted)] = confusion.get((g.category, predicted), 0) + 1
    return [len(preds), pred_span_ok, pred_cat_ok, len(gold_items), gold_span_found, gold_cat_found]


def _ratio(num: np.ndarray, den: np.ndarray) -> np.ndarray:
    return np.divide(num, den, out=np.zeros_like(num, dtype=float), where=den > 0)


def evaluate(
    gold_conversations: Sequence,
    predictions: Mapping[str, Sequence[Prediction]],
    *,
    n_bootstrap: int = 1000,
    seed: int = 0,
    confidence: float = 0.95,
) -> dict:
    """Metrics for `predictions` (keyed by conversation id) against the gold conversations
    (objects with `.id` and `.feedback` items having `.message`, `.category`, `.span`).
    Predictions for conversations not in the gold set are ignored."""
    confusion: dict[tuple[str, str], int] = {}
    per_category = {c: {"gold": 0, "predicted": 0, "correct_predicted": 0, "found_gold": 0} for c in CATEGORY_IDS}
    rows = []
    for conv in gold_conversations:
        preds = list(predictions.get(conv.id, ()))
        rows.append(_conversation_counts(conv.feedback, preds, confusion))
        for g in conv.feedback:
            per_category[g.category]["gold"] += 1
            per_category[g.category]["found_gold"] += any(
                p.message == g.message and p.category == g.category and span_matches(p.span, g.span) for p in preds)
        for p in preds:
            if p.category in per_category:
                per_category[p.category]["predicted"] += 1
                per_category[p.category]["correct_predicted"] += any(
                    p.message == g.message and p.category == g.category and span_matches(p.span, g.span)
                    for g in conv.feedback)
    counts = np.array(rows, dtype=np.int64).reshape(-1, len(_COLUMNS))
    totals = counts.sum(axis=0)
    col = {name: k for k, name in enumerate(_COLUMNS)}

    rng = np.random.default_rng(seed)
    n = len(counts)
    alpha = (1.0 - confidence) / 2
    out: dict = {}
    if n and n_bootstrap > 0:
        sample = rng.integers(0, n, size=(n_bootstrap, n))
        resampled = counts[sample].sum(axis=1)  # (n_bootstrap, columns)
    else:
        resampled = np.zeros((0, len(_COLUMNS)), dtype=np.int64)
    for metric, (num, den) in _METRICS.items():
        value = float(_ratio(np.array([totals[col[num]]]), np.array([totals[col[den]]]))[0]) if n else 0.0
        if len(resampled):
            dist = _ratio(resampled[:, col[num]], resampled[:, col[den]])
            low, high = (float(x) for x in np.quantile(dist, [alpha, 1 - alpha]))
        else:
            low = high = value
        out[metric] = {"value": round(value, 4), "low": round(low, 4), "high": round(high, 4)}

    for c in per_category.values():
        c["precision"] = round(c["correct_predicted"] / c["predicted"], 4) if c["predicted"] else 0.0
        c["recall"] = round(c["found_gold"] / c["gold"], 4) if c["gold"] else 0.0
    labels = [*CATEGORY_IDS, NONE]
    out.update({
        "n_conversations": n,
        "n_gold": int(totals[col["n_gold"]]) if n else 0,
        "n_predicted": int(totals[col["n_pred"]]) if n else 0,
        "per_category": per_category,
        "confusion": {
            "rows": "gold category", "columns": "predicted category", "labels": labels,
            "matrix": [[confusion.get((g, p), 0) for p in labels] for g in labels],
        },
        "bootstrap": {"samples": n_bootstrap, "seed": seed, "confidence": confidence, "unit": "conversation"},
    })
    return out
