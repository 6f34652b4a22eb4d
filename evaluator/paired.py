"""Paired bootstrap intervals for a candidate − live difference measured on the same items.

The release gate scores the candidate and the live release on the same prompts (questions, risky
prompts, HH pairs, steering-grid prompts). Their difference is then a paired quantity: resampling
the *items* (with replacement) and recomputing both sides on each resample keeps the pairing, so
an item on which both sides do equally well or badly adds no noise to the difference. An
unchanged candidate (identical answers) gets an interval of exactly zero width.

Design choices:
- One function for every axis: the caller passes `statistic(idx) -> (candidate, live)`, computed
  on the items `idx`. That covers a plain mean (helpfulness, harmlessness, per-answer Self-BLEU),
  a mean of stratum means (HH: the unweighted mean of helpful and harmless, resampled within
  each stratum so each keeps its size), and a statistic over clusters (steerability: the pooled
  Spearman ρ of every grid row of the resampled prompts).
- Percentile interval (Efron & Tibshirani 1993, §13.3), `n_boot` resamples from a seeded
  `numpy.random.Generator`: the gate's decision is reproducible. 2,000 resamples put the
  Monte-Carlo error of a 95 % end well under the tolerances the gate uses.
- A resample whose statistic is not finite (e.g. a ρ of a constant) is dropped; if more than a
  tenth are, the interval is reported as not computable (None ends) rather than made up.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass

import numpy as np

Statistic = Callable[[np.ndarray], tuple[float, float]]


@dataclass(frozen=True)
class PairedInterval:
    candidate: float
    live: float
    diff: float  # candidate − live
    low: float | None  # the interval's ends, for candidate − live
    high: float | None
    n: int  # items (or clusters) resampled
    confidence: float = 0.95
    n_boot: int = 2000

    def as_dict(self) -> dict:
        return asdict(self)


def paired_bootstrap(n: int, statistic: Statistic, *, strata: Sequence[str] | None = None, n_boot: int = 2000,
                     confidence: float = 0.95, seed: int = 0) -> PairedInterval:
    """Interval of candidate − live, resampling the `n` item indices (within each stratum, when
    given). `statistic(idx)` returns (candidate value, live value) on the items `idx`."""
    if n < 1:
        raise ValueError("a paired bootstrap needs at least one item")
    if strata is not None and len(strata) != n:
        raise ValueError(f"got {len(strata)} strata labels for {n} items")
    cand, live = statistic(np.arange(n))
    groups = [np.arange(n)] if strata is None else [
        np.flatnonzero(np.asarray(strata) == s) for s in dict.fromkeys(strata)]
    rng = np.random.default_rng(seed)
    diffs = []
    for _ in range(n_boot):
        idx = np.concatenate([g[rng.integers(0, len(g), len(g))] for g in groups])
        c, v = statistic(idx)
        if math.isfinite(c) and math.isfinite(v):
            diffs.append(c - v)
    low = high = None
    if len(diffs) >= 0.9 * n_boot:
        alpha = (1 - confidence) / 2
        low, high = (float(x) for x in np.quantile(np.asarray(diffs), [alpha, 1 - alpha]))
    return PairedInterval(candidate=float(cand), live=float(live), diff=float(cand - live), low=low, high=high,
                          n=n, confidence=confidence, n_boot=n_boot)


def bootstrap_mean(values: Sequence[float], *, n_boot: int = 2000, seed: int = 0) -> dict:
    """Mean of `values` with a 95 % percentile bootstrap interval (resampling the values): one
    sample's figure, such as a judge's accuracy over pairs."""
    x = np.asarray(values, dtype=float)
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, x.size, (n_boot, x.size))].mean(axis=1)
    lo, hi = np.percentile(means, [2.5, 97.5])
    return {"value": float(x.mean()), "ci95": [float(lo), float(hi)], "n": int(x.size)}


def mean_statistic(candidate: Sequence[float], live: Sequence[float]) -> Statistic:
    """(mean of candidate[idx], mean of live[idx]): per-item scores on the same items."""
    c, v = np.asarray(candidate, dtype=float), np.asarray(live, dtype=float)
    if c.shape != v.shape:
        raise ValueError(f"paired scores differ in length: {c.shape[0]} vs {v.shape[0]}")
    return lambda idx: (float(c[idx].mean()), float(v[idx].mean()))


def length_controlled_statistic(candidate: Sequence[float], live: Sequence[float], candidate_words: Sequence[int],
                                live_words: Sequence[int]) -> Statistic:
    """(live mean + the candidate − live difference at equal length, live mean) on the items `idx`.

    Reward models pay for length (Singhal et al. 2023; AlpacaEval 2's length-controlled win rate,
    Dubois et al. 2024): the gate's helpfulness reward rises with the answer's word count, so a
    candidate that learned to write what its users asked for, shorter, looks less helpful even
    when each answer says as much. Per item, Δscore is regressed on Δx = log(1 + words) of the
    two answers, with an intercept; the intercept is the difference predicted where the answers
    are equally long. Fitted afresh on each resample, so the interval carries the slope's
    uncertainty too (an extrapolation, when the candidate is shorter on nearly every prompt,
    shows as a wide interval). With no length difference at all it is the plain mean difference."""
    c, v = np.asarray(candidate, dtype=float), np.asarray(live, dtype=float)
    wc, wv = np.asarray(candidate_words, dtype=float), np.asarray(live_words, dtype=float)
    if not c.shape == v.shape == wc.shape == wv.shape:
        raise ValueError(f"paired scores and word counts differ in length: {c.shape[0]}, {v.shape[0]}, "
                         f"{wc.shape[0]}, {wv.shape[0]}")
    dy, dx = c - v, np.log1p(wc) - np.log1p(wv)

    def stat(idx: np.ndarray) -> tuple[float, float]:
        y, x = dy[idx], dx[idx]
        spread = x.var()
        slope = float(((x - x.mean()) * (y - y.mean())).mean() / spread) if spread > 1e-12 else 0.0
        live_mean = float(v[idx].mean())
        return live_mean + float(y.mean() - slope * x.mean()), live_mean

    return stat


def mean_of_strata_statistic(candidate: Sequence[float], live: Sequence[float], strata: Sequence[str]) -> Statistic:
    """Unweighted mean over strata of each stratum's mean (HH: helpful and harmless count alike)."""
    c, v, s = np.asarray(candidate, dtype=float), np.asarray(live, dtype=float), np.asarray(strata)
    names = list(dict.fromkeys(strata))

    def stat(idx: np.ndarray) -> tuple[float, float]:
        cs, vs = [], []
        for name in names:
            sel = idx[s[idx] == name]
            cs.append(c[sel].mean())
            vs.append(v[sel].mean())
        return float(np.mean(cs)), float(np.mean(vs))

    return stat


def spearman(x: Sequence[float], y: Sequence[float]) -> float:
    """Spearman's ρ (average ranks for ties); NaN when either side is constant."""
    from scipy.stats import rankdata

    if len(x) != len(y):
        raise ValueError(f"spearman: {len(x)} vs {len(y)} values")
    if len(x) < 2:
        return math.nan
    rx, ry = rankdata(x), rankdata(y)
    if np.ptp(rx) == 0 or np.ptp(ry) == 0:
        return math.nan
    return float(np.corrcoef(rx, ry)[0, 1])
