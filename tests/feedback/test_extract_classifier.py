"""The fast extractor's sentence classifier: the shipped weights and their record, scoring as the
trainer scored, a deterministic rebuild, and the reported real-chat figures still true."""

from __future__ import annotations

import json

import numpy as np
import pytest

from feedback.extract import FastConfig, FastExtractor, Window, evaluate, load_gold, predict, windows_of
from feedback.extract.classifier import MODEL_PATH, SentenceClassifier, grow_spans, softmax
from feedback.extract.features import TurnContext, features, sentence_features
from feedback.extract.train_classifier import REAL_GOLD, TARGETS, _labels, decode, examples, fit, weights_digest
from store.taxonomy import CATEGORY_IDS


@pytest.fixture(scope="module")
def record() -> dict:
    return json.loads(MODEL_PATH.read_text())


def test_shipped_model_is_small_and_records_how_it_was_chosen(record):
    assert MODEL_PATH.stat().st_size < 3 * 2**20
    assert record["classes"] == ["none", *CATEGORY_IDS]
    trained_on = record["trained_on"]
    assert trained_on["gold"] == "hh_gold.jsonl" and "test" not in trained_on
    assert trained_on["dev"]["conversations"] == len(load_gold(REAL_GOLD, split="dev"))
    assert trained_on["train"]["conversations"] == len(load_gold(REAL_GOLD, split="train"))
    assert "cross-validation" in record["selection"] or "CV" in record["selection"]
    cv = record["dev_cv"]
    for metric in TARGETS:
        assert cv[metric]["low"] <= cv[metric]["value"] <= cv[metric]["high"]
    assert set(cv["per_category"]) == set(CATEGORY_IDS)
    assert record["settings"]["none_bias"] == record["none_bias"]
    assert record["settings"]["grow"] == record["grow"]


def test_test_split_figures_are_recorded_once_and_still_true(record):
    """The test split was scored once, after every choice; the record must stay what the code does."""
    test = record["test"]
    assert test is not None and test["split"] == "test" and "once" in test["note"]
    gold = load_gold(REAL_GOLD, split="test")
    predictions, _ = predict(FastExtractor(FastConfig.tuned(), use_embeddings=False), gold)
    m = evaluate(gold, predictions)
    for metric in TARGETS:
        assert m[metric]["value"] == pytest.approx(test[metric]["value"], abs=1e-4), metric


def test_scores_are_additive_so_shared_turn_features_can_be_scored_once():
    model = SentenceClassifier.load()
    w = Window("k", "Thanks, that helps. But what do you mean by a wind-down routine?",
               "Build a 30-minute wind-down routine without screens.", "How can I sleep better?")
    sents = FastExtractor.sentences(w.user)
    ctx = TurnContext(w.assistant, w.previous_user)
    turn, own = sentence_features(ctx, sents)
    full = model.scores(features(ctx, sents))
    split = model.scores(own) + model.scores([turn], intercept=False)[[0] * len(own)]
    assert np.allclose(full, split)


def test_extractor_labels_are_the_models_labels_on_full_features():
    ex = FastExtractor(FastConfig.tuned(), use_embeddings=False)
    conv = load_gold(REAL_GOLD, split="dev")[:40]
    windows = [w for c in conv for w in windows_of(c)]
    result = ex.extract(windows)
    for w, spans in zip(windows, result.spans):
        sents, feats = ex.featurize(w)
        labels = ex.model.labels(feats)
        for s in spans:  # every span is made of sentences the model gave its category (or a join)
            inside = [k for k, sent in enumerate(sents) if s.start <= sent.start and sent.end <= s.end]
            assert inside and any(labels[k] in (s.category, "repeat_rephrase") for k in inside)


def test_training_is_deterministic():
    reader = FastExtractor(FastConfig.tuned().rules_only(), use_embeddings=False)
    train = examples(load_gold(REAL_GOLD, split="dev")[:60], reader)
    a = fit(train, [1.0] * len(train), C=1.0, word_scale=1.0).to_json()
    b = fit(train, [1.0] * len(train), C=1.0, word_scale=1.0).to_json()
    assert a == b


def test_spans_grow_into_likely_neighbours_unless_a_rule_forbids():
    classes = ("none", "positive", "ask_clarification")
    p = np.array([[0.9, 0.05, 0.05], [0.2, 0.7, 0.1], [0.6, 0.3, 0.1], [0.5, 0.4, 0.1]])
    labels = ["none", "positive", "none", "none"]
    assert grow_spans(labels, p, classes, 0.0) == labels  # off
    assert grow_spans(labels, p, classes, 0.25) == ["none", "positive", "positive", "positive"]  # twice
    assert grow_spans(labels, p, classes, 0.35) == labels
    assert grow_spans(labels, p, classes, 0.25, allowed=lambda k, label: k != 2) == labels  # a veto stops it


def _spans(predictions) -> dict:
    return {k: sorted((p.message, p.category, p.span.strip()) for p in v) for k, v in predictions.items() if v}


def test_extractor_makes_the_spans_training_scored():
    """Cross-validation scores `train_classifier.decode`; the extractor must cut the same spans,
    with span growth on, or the figures chosen there would not be the extractor's."""
    model = SentenceClassifier.load()
    model.grow = 0.1
    gold = load_gold(REAL_GOLD, split="dev")[:80]
    predictions, _ = predict(FastExtractor(FastConfig.tuned(), model=model, use_embeddings=False), gold)
    items = examples(gold, FastExtractor(FastConfig.tuned().rules_only(), use_embeddings=False))
    scores = model.scores([e.features for e in items])
    expected = decode(items, _labels(scores, model.none_bias, items), softmax(scores), model.grow)
    assert _spans(predictions) == _spans(expected)
    assert sum(map(len, _spans(expected).values())) > 40


def test_a_refit_gets_a_new_version_name_unless_its_numbers_are_the_same():
    model = SentenceClassifier.load(MODEL_PATH)
    before = weights_digest(model)
    model.meta = {**model.meta, "version": "renamed", "test": {"anything": 1}}
    assert weights_digest(model) == before  # the name and the records are not the model
    model.intercept = model.intercept + 0.01
    assert weights_digest(model) != before and len(before) == 8
