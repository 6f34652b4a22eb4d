"""The pair views both helpfulness recipes read: HH pairs by axis and split, off-topic pairs, the pmi block.

The head (`train`) and the cross-encoder (`train_crossencoder`) fit and score the same pairs, so
the rows they pick, and the fit of a head with off-topic pairs beside the human ones, live here.
"""

from __future__ import annotations

from typing import NamedTuple

import numpy as np

from evaluator.judges.features import with_pmi
from evaluator.judges.head import HeadSpec, LinearHead, fit_head
from evaluator.paired import bootstrap_mean

RELEVANCE_FLOOR = 0.90  # a helpfulness judge's share of off-topic pairs ranked right, before its accuracy counts
MISMATCH_WEIGHT = 1.0  # an off-topic pair's weight beside a human preference pair


def interval(hits: np.ndarray) -> dict:
    b = bootstrap_mean(hits.tolist())
    return {"accuracy": round(b["value"], 4), "interval": [round(x, 4) for x in b["ci95"]], "pairs": b["n"]}


def pair_features(data: dict, axis: str, splits: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    keep = (data["axis"] == axis) & np.isin(data["split"], splits)
    return data["chosen"][keep], data["rejected"][keep]


class Offtopic(NamedTuple):
    """Off-topic pairs: `better` (the chosen answer) beats `worse` (another conversation's answer);
    `pair` is the index of their conversation's HH pair among the pairs they are fitted with."""

    better: np.ndarray
    worse: np.ndarray
    pair: np.ndarray


def offtopic_pairs(data: dict, mismatched: dict | None, splits: tuple[str, ...]) -> Offtopic | None:
    if mismatched is None:
        return None
    keep = (data["axis"] == "helpful") & np.isin(data["split"], splits)
    where = {(s, int(r)): i for i, (s, r) in enumerate(zip(data["subset"][keep], data["row"][keep]))}
    rows = [(j, where[(s, int(r))]) for j, (s, r) in enumerate(zip(mismatched["subset"], mismatched["row"]))
            if (s, int(r)) in where]
    if not rows:
        return None
    mine, theirs = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
    return Offtopic(data["chosen"][keep][theirs], mismatched["features"][mine], theirs)


def fit_with_offtopic(spec: HeadSpec, hidden: int, better, worse, items, labels, extra: Offtopic | None, use=None) -> LinearHead:
    """A head on human pairs and, when given, the off-topic pairs whose conversation `use` keeps."""
    if extra is None:
        return fit_head(spec, hidden, better, worse, items, labels)
    take = np.ones(len(extra.pair), dtype=bool) if use is None else use[extra.pair]
    weights = np.concatenate([np.ones(len(better)), np.full(int(take.sum()), MISMATCH_WEIGHT)])
    return fit_head(spec, hidden, np.concatenate([better, extra.better[take]]),
                    np.concatenate([worse, extra.worse[take]]), items, labels, pair_weights=weights)


def with_alone(data: dict, mismatched: dict | None, alone: dict | None) -> tuple[dict, dict | None]:
    """The helpful pairs (and off-topic ones) with the "pmi" block appended from `cache --alone`."""
    keep = data["axis"] == "helpful"
    view = {k: v[keep] for k, v in data.items() if k != "encoder"}
    if alone is None:
        return view, mismatched
    where = {(s, int(r)): i for i, (s, r) in enumerate(zip(alone["subset"], alone["row"]))}
    try:
        rows = np.array([where[(s, int(r))] for s, r in zip(view["subset"], view["row"])])
    except KeyError as e:
        raise SystemExit(f"helpful pair {e} has no answers read alone; run `cache --alone` again") from None
    view["chosen"] = with_pmi(view["chosen"], alone["chosen_alone"][rows])
    view["rejected"] = with_pmi(view["rejected"], alone["rejected_alone"][rows])
    if mismatched is not None:
        mismatched = {**mismatched, "features": with_pmi(mismatched["features"], mismatched["alone"])}
    return view, mismatched
