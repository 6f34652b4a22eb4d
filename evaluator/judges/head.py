"""A judge's trained part: a linear score over standardised features, fitted on pairs and labels.

One scoring function f(x) = w · z(x), with z the features standardised by the training set's mean
and spread, serves both kinds of human judgement:
- a preference pair (better a, worse b) says f(a) > f(b): Bradley-Terry, P = sigmoid(f(a) - f(b));
- a labelled item (unsafe or not) says sigmoid(f(x) + bias) is its probability.
Both are logistic regressions on stacked rows - pair rows are z(a) - z(b) with the bias column 0
(a constant cancels in a difference), item rows are z(x) with the bias column 1 - so scikit-learn's
maintained solver fits them together, without an intercept of its own. `C` (the inverse L2
strength) and the feature blocks are chosen on a dev split by the training recipe.
Weights are a few thousand floats in an .npz beside a JSON recipe, shipped in the package.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from evaluator.judges.features import PMI, SCALARS, select


@dataclass
class HeadSpec:
    """What a head reads and how hard it is regularised (the recipe's choices)."""

    blocks: tuple[str, ...] = ("mean_last", "final", "scalars")
    scalars: tuple[str, ...] = SCALARS
    C: float = 0.01
    item_weight: float = 1.0  # a labelled item's weight relative to a pair
    # The "pmi" block's columns are multiplied by this after standardising, which divides the L2
    # penalty on them by its square: two columns among 1,700 otherwise get too little weight to
    # carry what only they know (whether the answer belongs to this conversation).
    pmi_scale: float = 1.0


@dataclass
class LinearHead:
    spec: HeadSpec
    hidden: int
    mean: np.ndarray
    scale: np.ndarray
    weights: np.ndarray  # one per selected column
    bias: float = 0.0
    meta: dict = field(default_factory=dict)

    def z(self, features: np.ndarray) -> np.ndarray:
        x = select(features, self.hidden, self.spec.blocks, self.spec.scalars)
        return _scaled(self.spec, (x - self.mean) / self.scale)

    def score(self, features: np.ndarray) -> np.ndarray:
        """f(x): higher = better for a preference judge, higher = more unsafe for a risk judge."""
        return self.z(features) @ self.weights

    def probability(self, features: np.ndarray) -> np.ndarray:
        return 1.0 / (1.0 + np.exp(-(self.score(features) + self.bias)))

    def save(self, path: Path) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        np.savez(path.with_suffix(".npz"), mean=self.mean, scale=self.scale, weights=self.weights)
        meta = {"spec": asdict(self.spec), "hidden": self.hidden, "bias": self.bias, **self.meta}
        path.with_suffix(".json").write_text(json.dumps(meta, indent=2, sort_keys=True) + "\n")

    @classmethod
    def load(cls, path: Path) -> LinearHead:
        meta = json.loads(path.with_suffix(".json").read_text())
        spec = meta.pop("spec")
        spec = HeadSpec(**{**spec, "blocks": tuple(spec["blocks"]), "scalars": tuple(spec["scalars"])})
        with np.load(path.with_suffix(".npz")) as f:
            arrays = {k: f[k] for k in ("mean", "scale", "weights")}
        return cls(spec=spec, hidden=int(meta.pop("hidden")), bias=float(meta.pop("bias")), meta=meta, **arrays)


def _scaled(spec: HeadSpec, z: np.ndarray) -> np.ndarray:
    if "pmi" in spec.blocks and spec.pmi_scale != 1.0:
        z = z.copy()
        z[:, -len(PMI):] *= spec.pmi_scale  # the block comes last: `select` keeps the order of `blocks`
    return z


def fit_head(spec: HeadSpec, hidden: int, better: np.ndarray, worse: np.ndarray,
             items: np.ndarray | None = None, labels: Sequence[bool] | None = None, *,
             pair_weights: np.ndarray | None = None, max_iter: int = 2000) -> LinearHead:
    """Fit f on preference pairs (rows of `better` beat the same rows of `worse`, each weighted by
    `pair_weights`, default 1) and, optionally, labelled items (`labels[i]` True = the positive
    class, e.g. unsafe)."""
    from sklearn.linear_model import LogisticRegression

    cols = [select(a, hidden, spec.blocks, spec.scalars) for a in (better, worse)]
    pool = np.concatenate(cols + ([select(items, hidden, spec.blocks, spec.scalars)] if items is not None else []))
    if not len(pool):
        raise ValueError("nothing to fit: give preference pairs, labelled items, or both")
    mean, scale = pool.mean(0), pool.std(0) + 1e-6
    d = _scaled(spec, (cols[0] - cols[1]) / scale)
    # Each pair twice, once each way round, so the fit has both classes and no side is favoured.
    rows = [np.hstack([d, np.zeros((len(d), 1))]), np.hstack([-d, np.zeros((len(d), 1))])]
    y = [np.ones(len(d)), np.zeros(len(d))]
    pw = np.ones(len(d)) if pair_weights is None else np.asarray(pair_weights, dtype=float)
    w = [pw, pw]
    if items is not None and len(items):
        zi = _scaled(spec, (select(items, hidden, spec.blocks, spec.scalars) - mean) / scale)
        rows.append(np.hstack([zi, np.ones((len(zi), 1))]))
        y.append(np.asarray(labels, dtype=float))
        w.append(np.full(len(zi), spec.item_weight))
    clf = LogisticRegression(C=spec.C, fit_intercept=False, max_iter=max_iter)
    clf.fit(np.vstack(rows), np.concatenate(y), sample_weight=np.concatenate(w))
    coef = clf.coef_[0]
    return LinearHead(spec=spec, hidden=hidden, mean=mean, scale=scale, weights=coef[:-1].copy(), bias=float(coef[-1]))


def pair_accuracy(head: LinearHead, better: np.ndarray, worse: np.ndarray) -> np.ndarray:
    """1 where the head scores the better side strictly higher, per pair (ties are misses)."""
    return (head.score(better) > head.score(worse)).astype(float)
