"""The fast extractor's sentence classifier: a multinomial logistic regression over `features.py`,
shipped as plain JSON weights (`feedback/data/fast_classifier.json`) and scored in pure
Python/numpy, so inference needs neither scikit-learn nor pickles.

Each sentence gets one of six labels (none or one of the five categories): the class with the
highest score after `none_bias` is added to the none class's log-odds (the bias, chosen by
cross-validation on dev, sets the precision/recall trade-off). Adjacent sentences with the same
category make one span. A span then takes in a neighbouring sentence left as none when the model
gives that sentence the span's category with probability at least `grow` (`grow_spans`, chosen by
cross-validation with the bias; 0 turns it off): annotators often mark feedback as two sentences
("What study is this? Can you give me more details?"), and a span with only half of its gold
span is both a false positive and a miss under the paper's metrics. This hysteresis is cheap (a
softmax over six scores) and needs no second model. `train_classifier.py` writes the file, with
the figures it reached.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path

import numpy as np
from scipy.sparse import csr_matrix

NONE = "none"
MODEL_PATH = Path(__file__).resolve().parent.parent / "data" / "fast_classifier.json"


class SentenceClassifier:
    def __init__(self, classes: Sequence[str], weights: dict[str, Sequence[float]], intercept: Sequence[float],
                 none_bias: float = 0.0, meta: dict | None = None, grow: float = 0.0):
        if classes[0] != NONE:
            raise ValueError("the first class must be 'none'")
        self.classes = tuple(classes)
        names = list(weights)
        self.index = {name: k for k, name in enumerate(names)}
        self.matrix = np.asarray([weights[n] for n in names], dtype=np.float64).reshape(len(names), len(classes))
        self.intercept = np.asarray(intercept, dtype=np.float64)
        self.none_bias = float(none_bias)
        self.grow = float(grow)
        self.meta = meta or {}

    @classmethod
    def load(cls, path: Path = MODEL_PATH) -> "SentenceClassifier":
        payload = json.loads(Path(path).read_text())
        return cls(payload["classes"], payload["weights"], payload["intercept"], payload.get("none_bias", 0.0),
                   {k: v for k, v in payload.items() if k not in ("weights", "intercept", "classes")},
                   payload.get("grow", 0.0))

    def scores(self, sentences: Sequence[Sequence[tuple[str, float]]], *, intercept: bool = True) -> np.ndarray:
        """(n, classes) log-odds, up to a constant per row, before the none bias: one sparse
        product for a whole batch of sentences (features not in the model are ignored). Scores are
        additive: a feature list split in two scores as the sum of the parts (one intercept)."""
        get = self.index.get
        lengths = [len(f) for f in sentences]
        cols = [get(name, -1) for f in sentences for name, _ in f]
        vals = [value for f in sentences for _, value in f]
        cols = np.asarray(cols, dtype=np.int64)
        vals = np.asarray(vals, dtype=np.float64)
        indptr = np.zeros(len(sentences) + 1, dtype=np.int64)
        np.cumsum(lengths, out=indptr[1:])
        vals[cols < 0] = 0.0  # features the model does not know count for nothing
        cols[cols < 0] = 0
        x = csr_matrix((vals, cols, indptr), shape=(len(sentences), len(self.index)))
        out = np.asarray(x @ self.matrix)
        return out + self.intercept if intercept else out

    def probabilities(self, sentences: Sequence[Sequence[tuple[str, float]]]) -> np.ndarray:
        return softmax(self.scores(sentences))

    def decide(self, scores: np.ndarray, none_bias: float | None = None) -> list[str]:
        """Each row's class: the highest score once `none_bias` (the model's own unless given) is
        added to none's."""
        z = scores.copy()
        z[:, 0] += self.none_bias if none_bias is None else none_bias
        return [self.classes[k] for k in np.argmax(z, axis=1)]

    def labels(self, sentences: Sequence[Sequence[tuple[str, float]]]) -> list[str]:
        return self.decide(self.scores(sentences)) if sentences else []

    def to_json(self) -> dict:
        return {"classes": list(self.classes), "none_bias": self.none_bias, "grow": self.grow,
                "intercept": [round(float(x), 5) for x in self.intercept],
                **self.meta,
                "weights": {n: [round(float(x), 5) for x in self.matrix[k]] for n, k in self.index.items()}}


def runs(labels: Sequence[str]):
    """(first, last, label) for each maximal run of equal labels that is not none."""
    k = 0
    while k < len(labels):
        j = k
        while j + 1 < len(labels) and labels[j + 1] == labels[k]:
            j += 1
        if labels[k] != NONE:
            yield k, j, labels[k]
        k = j + 1


def softmax(scores: np.ndarray) -> np.ndarray:
    """Row-wise class probabilities from log-odds (before the none bias)."""
    z = np.exp(scores - scores.max(axis=1, keepdims=True))
    return z / z.sum(axis=1, keepdims=True)


def grow_spans(labels: Sequence[str], probabilities: np.ndarray, classes: Sequence[str], min_probability: float,
               allowed=lambda k, label: True) -> list[str]:
    """One turn's sentence labels after each span has taken in the neighbours (left as none) whose
    probability of its category is at least `min_probability`, repeatedly, so a span can grow by
    more than one sentence; `allowed(k, label)` is false where a hard rule forbids sentence k that
    label (a veto). `min_probability` 0 leaves the labels as they are."""
    out = list(labels)
    if min_probability <= 0 or all(label == NONE for label in out):
        return out
    column = {c: k for k, c in enumerate(classes)}
    changed = True
    while changed:
        changed = False
        for k, label in enumerate(out):
            if label == NONE:
                continue
            for j in (k - 1, k + 1):
                if 0 <= j < len(out) and out[j] == NONE and probabilities[j][column[label]] >= min_probability \
                        and allowed(j, label):
                    out[j] = label
                    changed = True
    return out
