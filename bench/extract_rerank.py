"""How the fast extractor's cross-encoder tier was chosen on dev, and what it costs per sentence.

    .venv/bin/python -m feedback.extract.train_rerank /tmp/rerank-holdout --holdout-dev   # ~22 min, 2 cores
    .venv/bin/python bench/extract_rerank.py /tmp/rerank-holdout --out bench/results/extract_rerank.json

Both models are fitted without the dev split and score it as a holdout: the sentence classifier
refitted on the real train split and the templated sentences with the shipped settings (C, word
scale, weights; `fast_classifier.json`), and the cross-encoder trained with `--holdout-dev`. The
report gives span and category precision/recall on dev for the classifier alone, the cross-encoder
alone, and the geometric mix over a grid of weights, none biases and span growths (decoded as the
extractor decodes), so the shipped `RerankSettings` can be checked against it. Every row is chosen
on the same dev split, which flatters each a little, the classifier's too. The test split is not
read. Speed: the cross-encoder's milliseconds per sentence over the dev split, batches of 64.
"""

from __future__ import annotations

import argparse
import sys
import time
from itertools import product
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

WEIGHTS = (0.0, 0.4, 0.5, 0.6, 1.0)
NONE_BIASES = (-0.3, -0.15, 0.0, 0.15, 0.3)
GROWS = (0.0, 0.1, 0.2, 0.3)


def holdout_classifier_scores(data):
    """The classifier with the shipped settings, fitted on train + templated, scoring dev."""
    from feedback.extract.classifier import SentenceClassifier
    from feedback.extract.train_classifier import fit

    settings = SentenceClassifier.load().meta["settings"]
    model = fit(*data.fit_set([], settings), C=settings["C"], word_scale=settings["word_scale"])
    return model.scores([e.features for e in data.dev]), settings


def figures(log_probs, none_bias: float, grow: float, data, dev) -> dict:
    from feedback.extract.classifier import softmax
    from feedback.extract.metrics import evaluate
    from feedback.extract.train_classifier import _labels, decode

    labels = _labels(log_probs, none_bias, data.dev)
    m = evaluate(dev, decode(data.dev, labels, softmax(log_probs), grow), n_bootstrap=0)
    return {k: round(m[k]["value"], 4) for k in ("span_precision", "span_recall", "category_precision",
                                                  "category_recall")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("reranker", type=Path, help="a cross-encoder trained with --holdout-dev")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    from _machine import cpu_model, emit
    from scipy.special import log_softmax

    from feedback.extract.rerank import Reranker, pair
    from feedback.extract.train_classifier import training_data

    reranker = Reranker(args.reranker)
    if reranker.meta["trained_on"].get("dev", 1):
        sys.exit(f"{args.reranker} was trained on the dev split; train one with --holdout-dev")
    dev, _, data = training_data()
    lr, lr_settings = holdout_classifier_scores(data)
    started = time.perf_counter()
    ce = reranker.log_probs([pair(e.window, e.sentence) for e in data.dev])
    ms = (time.perf_counter() - started) / len(data.dev) * 1000
    rows = []
    for weight, bias, grow in product(WEIGHTS, NONE_BIASES, GROWS):
        mixed = (1 - weight) * log_softmax(lr, axis=1) + weight * ce
        rows.append({"weight": weight, "none_bias": bias, "grow": grow, **figures(mixed, bias, grow, data, dev)})
    shipped = reranker.settings
    report = {"cpu": cpu_model(), "dev_conversations": len(dev), "dev_sentences": len(data.dev),
              "cross_encoder_ms_per_sentence": round(ms, 1), "classifier_settings": lr_settings,
              "cross_encoder": reranker.meta, "shipped_mix": {"weight": shipped.weight, "none_bias": shipped.none_bias,
                                                              "grow": shipped.grow},
              "classifier_at_its_shipped_decoding": figures(lr, lr_settings["none_bias"], lr_settings["grow"], data, dev),
              "grid": rows}
    emit(report, args.out)


if __name__ == "__main__":
    main()
