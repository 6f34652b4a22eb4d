"""The splits of conversations the extractor was not fitted to: apart from the gold set it learned
from, the labels their annotators wrote, and their once-per-version scores still what the code does."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from feedback.extract import FastConfig, FastExtractor, evaluate, load_gold, predict
from feedback.extract.train_classifier import REAL_GOLD, TARGETS

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "feedback" / "data"
ROUND_1406 = DATA / "round_1406.jsonl"
RECORDS_1406 = ROOT / "tools" / "annotation" / "records" / "extra_round_1406.jsonl"


def ids(convs) -> set[str]:
    return {c.id for c in convs}


def test_unseen_splits_share_no_conversation_with_the_fitted_gold_or_each_other():
    fitted = ids(load_gold(REAL_GOLD))
    generalisation = ids(load_gold(DATA / "generalisation.jsonl"))
    round_1406 = ids(load_gold(ROUND_1406))
    assert len(round_1406) == 240 and len(generalisation) == 150
    assert not fitted & round_1406 and not fitted & generalisation and not generalisation & round_1406


def test_round_1406_holds_its_records_labels_verbatim():
    records = {r["id"]: r["feedback"] for r in map(json.loads, RECORDS_1406.read_text().splitlines())}
    gold = load_gold(ROUND_1406)
    assert ids(gold) == set(records)
    for conv in gold:
        assert [(f.message, f.category, f.span) for f in conv.feedback] == \
               [(f["message"], f["category"], f["span"]) for f in records[conv.id]]


def test_round_1406_score_of_the_shipped_extractor_is_recorded_and_still_true():
    """Scored once for this extractor version; a new version is scored once and its record replaces this."""
    record = json.loads((ROOT / "bench" / "results" / "extract_round1406-default.json").read_text())
    extractor = FastExtractor(FastConfig.tuned(), use_embeddings=False)
    assert record["extractor_version"] == extractor.version
    gold = load_gold(ROUND_1406)
    predictions, _ = predict(extractor, gold)
    m = evaluate(gold, predictions)
    for metric in TARGETS:
        assert m[metric]["value"] == pytest.approx(record[metric]["value"], abs=1e-4), metric


def test_generalisation_score_of_the_shipped_tier_is_recorded_and_still_true():
    """The default extraction (the sentence classifier with the shipped cross-encoder tier) scored
    once on the generalisation split; its record is what the code still gives. Round 1406 and the
    pooled 390 were scored in the same session (`bench/results/extract_*-packaged.json`)."""
    from deploy.serving.factory import extraction_reranker
    from deploy.settings import load_settings

    record = json.loads((ROOT / "bench" / "results" / "extract_generalisation-packaged.json").read_text())
    reranker = extraction_reranker(load_settings(environ={}, overrides={}))
    extractor = FastExtractor(FastConfig.tuned(), reranker=reranker)
    assert record["extractor_version"] == extractor.version
    gold = load_gold(DATA / "generalisation.jsonl")
    m = evaluate(gold, predict(extractor, gold)[0])
    for metric in TARGETS:
        assert m[metric]["value"] == pytest.approx(record[metric]["value"], abs=1e-4), metric
