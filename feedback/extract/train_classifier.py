"""Train the fast extractor's sentence classifier on the train and dev splits of the real gold set,
choose its settings by cross-validation on dev alone, and write it to `feedback/data/fast_classifier.json`.

    python -m feedback.extract.train_classifier              # CV on dev, fit on train + dev, write the model
    python -m feedback.extract.train_classifier --report-test  # also score the written model on test, once

Design choices:
- Examples are sentences (`cues.sentences`) of every user turn that follows an answer; a sentence
  takes the category of the gold span covering more than half of it, else "none". Cutting at
  sentences loses little: labelling the dev sentences with their gold categories and merging
  adjacent equal ones scores span P 0.98 / R 0.95 against the gold spans.
- Features: `features.py` (words, cues, overlaps, the answer's behaviour); the rules' thresholds
  of `fast_thresholds.json` play no part in them.
- Model: multinomial logistic regression (scikit-learn, lbfgs, balanced class weights), word
  features scaled down against the rest (a lower effective C for the many sparse n-grams).
  Training data: the real gold set's `train` split (960 conversations annotated once, never
  adjudicated: more examples, noisier labels), with a weight, and its `dev` split (adjudicated
  after the double annotation, annotated as the test split was); the templated gold set's dev
  split (`dev_gold.jsonl`, typical feedback phrasing) with a small weight; its test split is
  never used.
- Selection: 5-fold cross-validation of the dev split grouped by conversation (every fold's model
  also sees all of the train split), repeated with 3 shuffles, pooled out-of-fold predictions
  scored with the paper's metrics (`metrics.evaluate`); the grid is C x word scale x templated
  weight x train weight x none bias x span growth (`classifier.grow_spans`). Scores come from dev
  conversations only, whose labels were adjudicated like the test split's. The objective is the
  issue's targets (span P 0.60, R 0.65, category P and R 0.45): maximise the worst ratio of a
  figure to its target, so no figure is bought with another (span F1 alone picks P 0.48 / R 0.78);
  ties go to span F1. Only the train and dev splits are read; `--report-test` scores the final
  model on the test split and records the figures, and is meant to be run once, after every choice
  is made.
- Deterministic: fixed fold seeds, lbfgs, sorted feature names, weights rounded to 5 decimals; two
  runs write the same file.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from itertools import product
from pathlib import Path

import numpy as np

from feedback.extract import cues
from feedback.extract.classifier import MODEL_PATH, NONE, SentenceClassifier, grow_spans, runs, softmax
from feedback.extract.fast import FastConfig, FastExtractor
from feedback.extract.features import WORD_PREFIXES, join_adjacent, settle, settles
from feedback.extract.gold import SHIPPED_GOLD, GoldConversation, load_gold, predict, windows_of
from feedback.extract.metrics import Prediction, evaluate
from store.taxonomy import CATEGORY_IDS

REAL_GOLD = SHIPPED_GOLD.parent / "hh_gold.jsonl"
CLASSES = (NONE, *CATEGORY_IDS)
GRID = {
    "C": (0.3, 1.0, 3.0),
    "word_scale": (0.5, 1.0),
    "templated_weight": (0.3, 1.0),
    "train_weight": (0.5, 1.0),
}
NONE_BIASES = (-0.6, -0.3, 0.0, 0.15, 0.3, 0.45, 0.6, 0.9, 1.2)
# A span's growth into a neighbouring sentence (`classifier.grow_spans`): the least probability of
# the span's category the neighbour needs; 0 is off. Decoding settings, like the bias: no refit.
GROWS = (0.0, 0.1, 0.2, 0.3)
# The acceptance targets; selection maximises the worst ratio of a figure to its target.
TARGETS = {"span_precision": 0.60, "span_recall": 0.65, "category_precision": 0.45, "category_recall": 0.45}
CV_SEEDS = (0, 1, 2)
FOLDS = 5


@dataclass
class Example:
    conversation: int  # group for the folds
    window: object
    sentence: cues.Sentence
    features: list[tuple[str, float]]
    label: str


def sentence_labels(text: str, sents: Sequence[cues.Sentence], gold: Sequence[tuple[str, str]]) -> list[str]:
    """Each sentence's gold category: that of the gold span covering more than half of it."""
    out = []
    for s in sents:
        best = NONE
        for category, span in gold:
            i = text.find(span)
            if i >= 0 and min(s.end, i + len(span)) - max(s.start, i) > (s.end - s.start) / 2:
                best = category
        out.append(best)
    return out


def examples(conversations: Sequence[GoldConversation], reader: FastExtractor, group_offset: int = 0) -> list[Example]:
    out = []
    for ci, conv in enumerate(conversations):
        for w in windows_of(conv):
            sents, feats = reader.featurize(w)
            gold = [(f.category, f.span) for f in conv.feedback if f.message == w.key[1]]
            for s, f, label in zip(sents, feats, sentence_labels(w.user, sents, gold)):
                out.append(Example(group_offset + ci, w, s, f, label))
    return out


def _scaled(features, word_scale: float) -> dict[str, float]:
    return {n: (v * word_scale if n.startswith(WORD_PREFIXES) else v) for n, v in features}


def fit(train: Sequence[Example], weights: Sequence[float], *, C: float, word_scale: float) -> SentenceClassifier:
    from sklearn.feature_extraction import DictVectorizer
    from sklearn.linear_model import LogisticRegression

    vec = DictVectorizer(sort=True)
    x = vec.fit_transform([_scaled(e.features, word_scale) for e in train])
    y = np.array([CLASSES.index(e.label) for e in train])
    model = LogisticRegression(C=C, max_iter=5000, class_weight="balanced")
    model.fit(x, y, sample_weight=np.asarray(weights, dtype=float))
    coef = np.zeros((len(CLASSES), x.shape[1]))
    intercept = np.full(len(CLASSES), -30.0)  # a class absent from the training data never wins
    coef[model.classes_] = model.coef_
    intercept[model.classes_] = model.intercept_
    names = vec.get_feature_names_out()
    scale = np.array([word_scale if n.startswith(WORD_PREFIXES) else 1.0 for n in names])
    coef = coef * scale  # fold the scaling into the weights: inference feeds unscaled values
    keep = np.abs(coef).max(axis=0) >= 1e-4
    weights_by_name = {str(n): coef[:, k] for k, n in enumerate(names) if keep[k]}
    return SentenceClassifier(CLASSES, weights_by_name, intercept)


def decode(items: Sequence[Example], labels: Sequence[str], probabilities: np.ndarray | None = None,
           grow: float = 0.0) -> dict[str, list[Prediction]]:
    """Spans from sentence labels as the extractor makes them (`grow_spans` when `grow` > 0, then
    `join_adjacent`, then adjacent equal labels merge), keyed by conversation id."""
    preds: dict[str, list[Prediction]] = {}
    k = 0
    while k < len(items):
        j = k
        while j + 1 < len(items) and items[j + 1].window is items[k].window:
            j += 1
        w = items[k].window
        group = preds.setdefault(w.key[0], [])
        mine = list(labels[k:j + 1])
        if grow > 0:
            mine = grow_spans(mine, probabilities[k:j + 1], CLASSES, grow, settles([e.features for e in items[k:j + 1]]))
        mine = join_adjacent(mine)
        for first, last, category in runs(mine):
            group.append(Prediction(w.key[1], category, w.user[items[k + first].sentence.start:items[k + last].sentence.end]))
        k = j + 1
    return preds


def _labels(scores: np.ndarray, none_bias: float, items: Sequence[Example] | None = None) -> list[str]:
    """Sentence labels as the extractor decides them: argmax after the none bias, then the vetoes."""
    z = scores.copy()
    z[:, 0] += none_bias
    labels = [CLASSES[k] for k in np.argmax(z, axis=1)]
    if items is not None:
        labels = [settle(label, e.features) if label != NONE else label for label, e in zip(labels, items)]
    return labels


def _summary(m: dict) -> dict:
    out = {k: m[k] for k in ("span_precision", "span_recall", "category_precision", "category_recall")}
    p, r = out["span_precision"]["value"], out["span_recall"]["value"]
    cp, cr = out["category_precision"]["value"], out["category_recall"]["value"]
    out["span_f1"] = round(2 * p * r / (p + r), 4) if p + r else 0.0
    out["category_f1"] = round(2 * cp * cr / (cp + cr), 4) if cp + cr else 0.0
    out["per_category"] = {c: {k: v[k] for k in ("gold", "predicted", "precision", "recall")}
                           for c, v in m["per_category"].items()}
    return out


@dataclass
class TrainingData:
    dev: list[Example]  # the real dev split: folds of the cross-validation, and training data
    train: list[Example]  # the real train split: training data only
    templated: list[Example]  # the templated set's dev split: training data only

    def fit_set(self, dev_part: Sequence[Example], setting: dict) -> tuple[list[Example], list[float]]:
        """Examples and their weights for one fit: part of dev (all of it for the final model)."""
        train = [*dev_part, *self.train, *self.templated]
        weights = ([1.0] * len(dev_part) + [setting["train_weight"]] * len(self.train)
                   + [setting["templated_weight"]] * len(self.templated))
        return train, weights


def out_of_fold(data: TrainingData, folds, setting: dict) -> np.ndarray:
    """Each dev sentence's scores from the model fitted on the other folds (and the other sets)."""
    real = data.dev
    oof = np.zeros((len(real), len(CLASSES)))
    for train_idx, test_idx in folds:
        train, weights = data.fit_set([real[i] for i in train_idx], setting)
        model = fit(train, weights, C=setting["C"], word_scale=setting["word_scale"])
        oof[test_idx] = model.scores([real[i].features for i in test_idx])
    return oof


def cross_validate(dev: Sequence[GoldConversation], data: TrainingData, *, jobs: int = -1,
                   log=print) -> tuple[dict, list[dict], np.ndarray]:
    """Every grid point x none bias x growth, scored on pooled out-of-fold predictions; returns the
    best settings, the table and the best setting's out-of-fold scores of the first shuffle."""
    from joblib import Parallel, delayed
    from sklearn.model_selection import GroupKFold

    real = data.dev
    groups = np.array([e.conversation for e in real])
    oof_by_setting: dict[tuple, list[np.ndarray]] = {}
    settings = [dict(zip(GRID, values)) for values in product(*GRID.values())]
    for seed in CV_SEEDS:
        folds = list(GroupKFold(FOLDS, shuffle=True, random_state=seed).split(real, groups=groups))
        # Settings are independent fits: one process per core (each fit is deterministic).
        oofs = Parallel(n_jobs=jobs)(delayed(out_of_fold)(data, folds, setting) for setting in settings)
        for setting, oof in zip(settings, oofs):
            oof_by_setting.setdefault(tuple(setting.values()), []).append(oof)
        log(f"cv: seed {seed} done")
    table = []
    for key, oofs in oof_by_setting.items():
        probabilities = [softmax(o) for o in oofs]
        for bias, grow in product(NONE_BIASES, GROWS):
            per_seed = [evaluate(dev, decode(real, _labels(o, bias, real), p, grow), n_bootstrap=0)
                        for o, p in zip(oofs, probabilities)]
            mean = {m: float(np.mean([r[m]["value"] for r in per_seed]))
                    for m in ("span_precision", "span_recall", "category_precision", "category_recall")}
            f1 = _f1(mean["span_precision"], mean["span_recall"])
            cf1 = _f1(mean["category_precision"], mean["category_recall"])
            worst = min(mean[k] / t for k, t in TARGETS.items())
            table.append({**dict(zip(GRID, key)), "none_bias": bias, "grow": grow,
                          **{k: round(v, 4) for k, v in mean.items()},
                          "span_f1": round(f1, 4), "category_f1": round(cf1, 4), "worst_to_target": round(worst, 4)})
    table.sort(key=lambda r: (-r["worst_to_target"], -r["span_f1"]))
    best = table[0]
    return best, table, oof_by_setting[tuple(best[k] for k in GRID)][0]


def _f1(p: float, r: float) -> float:
    return 2 * p * r / (p + r) if p + r else 0.0


def cv_report(dev: Sequence[GoldConversation], data: TrainingData, best: dict, oof: np.ndarray) -> dict:
    """The chosen settings' out-of-fold figures (`oof`: the first CV shuffle's) with bootstrap intervals."""
    real = data.dev
    labels = _labels(oof, best["none_bias"], real)
    return _summary(evaluate(dev, decode(real, labels, softmax(oof), best["grow"])))


def training_data(gold: Path = REAL_GOLD, templated_gold: Path = SHIPPED_GOLD) -> tuple[list, list, TrainingData]:
    """The dev and train conversations of `gold` and every sentence of them (and of the templated
    set's dev split) as examples. The test split is not read."""
    reader = FastExtractor(FastConfig.tuned().rules_only(), use_embeddings=False)
    dev, extra = load_gold(gold, split="dev"), load_gold(gold, split="train")
    data = TrainingData(examples(dev, reader), examples(extra, reader, group_offset=len(dev)),
                        examples(load_gold(templated_gold, split="dev"), reader, group_offset=len(dev) + len(extra)))
    return dev, extra, data


def train(gold: Path = REAL_GOLD, templated_gold: Path = SHIPPED_GOLD, out: Path = MODEL_PATH, *, log=print) -> dict:
    dev, extra, data = training_data(gold, templated_gold)
    log(f"{len(data.dev)} dev sentences from {len(dev)} conversations; {len(data.train)} train sentences from "
        f"{len(extra)}; {len(data.templated)} templated")
    best, table, oof = cross_validate(dev, data, log=log)
    log(f"best: {best}")
    report = cv_report(dev, data, best, oof)
    model = fit(*data.fit_set(data.dev, best), C=best["C"], word_scale=best["word_scale"])
    model.none_bias, model.grow = best["none_bias"], best["grow"]
    model.meta = {
        "version": f"lr-{date.today().isoformat()}-{weights_digest(model)}",
        "trained_on": {"gold": gold.name,
                       "dev": {"conversations": len(dev), "sentences": len(data.dev), "weight": 1.0},
                       "train": {"conversations": len(extra), "sentences": len(data.train),
                                 "weight": best["train_weight"]},
                       "templated": {"gold": templated_gold.name, "split": "dev", "sentences": len(data.templated),
                                     "weight": best["templated_weight"]}},
        "settings": {k: best[k] for k in (*GRID, "none_bias", "grow")},
        "selection": (f"{FOLDS}-fold CV on the dev split grouped by conversation (each fold's model also trained "
                      f"on the train split), {len(CV_SEEDS)} shuffles, pooled out-of-fold predictions on dev; "
                      "objective: the worst ratio of span P, span R, category P, category R to its target "
                      "(0.60, 0.65, 0.45, 0.45), ties span F1"),
        "dev_cv_mean": {k: best[k] for k in ("span_precision", "span_recall", "span_f1", "category_precision",
                                             "category_recall", "category_f1", "worst_to_target")},
        "dev_cv": report,
        "cv_table_top": table[:10],
        "test": None,
    }
    write(model, out)
    return model.meta


def weights_digest(model: SentenceClassifier) -> str:
    """8 hex digits of the fitted numbers: two fits on one day get different versions unless they
    are the same model (stored spans name the version that found them)."""
    payload = {k: v for k, v in model.to_json().items() if k in ("classes", "none_bias", "grow", "intercept", "weights")}
    return hashlib.sha256(json.dumps(payload, sort_keys=True).encode()).hexdigest()[:8]


def write(model: SentenceClassifier, out: Path) -> None:
    payload = model.to_json()
    out.write_text(json.dumps(payload, indent=1, sort_keys=False) + "\n")


def report_test(gold: Path = REAL_GOLD, model_path: Path = MODEL_PATH) -> dict:
    """Score the written model on the held-out test split and record it in the model file."""
    test = load_gold(gold, split="test")
    model = SentenceClassifier.load(model_path)
    extractor = FastExtractor(FastConfig.tuned(), model=model, use_embeddings=False)
    predictions, _ = predict(extractor, test)
    summary = _summary(evaluate(test, predictions))
    model.meta["test"] = {"split": "test", "conversations": len(test), **summary,
                          "note": "scored once, after every choice was made on dev",
                          "date": date.today().isoformat()}
    write(model, model_path)
    return model.meta["test"]


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--gold", type=Path, default=REAL_GOLD)
    parser.add_argument("--templated-gold", type=Path, default=SHIPPED_GOLD)
    parser.add_argument("--out", type=Path, default=MODEL_PATH)
    parser.add_argument("--report-test", action="store_true", help="only score the written model on test")
    args = parser.parse_args(argv)
    if args.report_test:
        print(json.dumps(report_test(args.gold, args.out), indent=1))
        return
    meta = train(args.gold, args.templated_gold, args.out)
    print(json.dumps({k: meta[k] for k in ("settings", "dev_cv_mean", "dev_cv")}, indent=1))


if __name__ == "__main__":
    main()
