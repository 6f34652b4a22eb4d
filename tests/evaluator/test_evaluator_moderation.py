"""The moderator: shipped data, held-out precision/recall (bundled MiniLM), the disk cache, the HF label
lookup, and the harmlessness score."""

from __future__ import annotations

import hashlib
import json
from collections import Counter

import numpy as np
import pytest
from prereqs import SHARED_HH, require

import evaluator.moderation as moderation
from evaluator.moderation import (
    HarmlessnessResult,
    LabelledText,
    harmlessness,
    held_out_report,
    load_risky_prompts,
    load_safety_examples,
    model_harmlessness,
    precision_recall,
    train_moderator,
    unsafe_label_index,
)

TOPICS = {"money", "work", "friends", "family", "sleep", "health", "travel", "studying"}

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class HashEmbedder:
    """Deterministic bag-of-words vectors: fast stand-in for MiniLM in cache and plumbing tests."""

    name = "hash-test"

    def encode(self, texts):
        out = np.zeros((len(texts), 64), dtype=np.float32)
        for i, t in enumerate(texts):
            for w in t.lower().split():
                out[i, int(hashlib.md5(w.encode()).hexdigest(), 16) % 64] += 1
        return out


class FixedModerator:
    def __init__(self, unsafe_words: tuple[str, ...]) -> None:
        self.words = unsafe_words

    def score(self, texts):
        return [0.9 if any(w in t for w in self.words) else 0.1 for t in texts]

    def is_unsafe(self, texts, threshold=0.5):
        return [p >= threshold for p in self.score(texts)]



def test_shipped_safety_set_is_big_balanced_and_covers_the_chat_topics():
    examples = load_safety_examples()
    assert len(examples) >= 400
    labels = Counter(ex.unsafe for ex in examples)
    assert min(labels.values()) / max(labels.values()) > 0.8
    assert {ex.topic for ex in examples} == TOPICS
    assert len({ex.text for ex in examples}) == len(examples)
    for topic in TOPICS:
        assert {ex.unsafe for ex in examples if ex.topic == topic} == {True, False}


def test_shipped_risky_prompts():
    from evaluator.hh_data import RESERVED_BELOW
    from evaluator.shipped import RISKY_PROMPTS, read_jsonl

    prompts = load_risky_prompts()
    assert len(prompts) >= 150 and len(set(prompts)) == len(prompts)
    rows = list(read_jsonl(RISKY_PROMPTS))
    written = [r for r in rows if "topic" in r]
    assert rows[: len(written)] == written and len(written) == 40  # the written ones first
    real = rows[len(written):]
    assert all(r["subset"] == "harmless-base" and r["row"] >= RESERVED_BELOW for r in real)  # traceable, never reserved


def test_bad_labels_are_reported_with_the_line(tmp_path):
    path = tmp_path / "s.jsonl"
    path.write_text(json.dumps({"text": "ok", "label": "safe"}) + "\n" + json.dumps({"text": "x", "label": "maybe"}))
    with pytest.raises(ValueError, match="line 2"):
        load_safety_examples(path)


def test_precision_recall_arithmetic():
    assert precision_recall([True, True, False, False], [True, False, True, False]) == (0.5, 0.5, 0.5)
    assert precision_recall([False, False], [True, False]) == (0.0, 0.0, 0.0)


def test_moderator_precision_and_recall_on_held_out_examples():
    from evaluator.embeddings import SentenceEmbedder

    report = held_out_report(embedder=SentenceEmbedder())
    assert report.examples >= 400 and report.folds == 5
    assert report.precision >= 0.8
    assert report.recall >= 0.8


def test_trained_moderator_is_cached_by_data_hash(tmp_path, monkeypatch):
    examples = [LabelledText(f"save money on bills number {i}", False) for i in range(20)]
    examples += [LabelledText(f"steal money from friends number {i}", True) for i in range(20)]
    first = train_moderator(examples, embedder=HashEmbedder(), cache_dir=tmp_path)
    files = list(tmp_path.glob("moderator-*.joblib"))
    assert len(files) == 1
    assert first.is_unsafe(["steal money from friends", "save money on bills"]) == [True, False]

    def no_training(*args, **kwargs):
        raise AssertionError("retrained although the cache holds this data's classifier")

    monkeypatch.setattr(moderation, "_fit", no_training)
    again = train_moderator(examples, embedder=HashEmbedder(), cache_dir=tmp_path)
    assert again.score(["steal money"]) == pytest.approx(first.score(["steal money"]))
    monkeypatch.undo()
    train_moderator(examples[:-1], embedder=HashEmbedder(), cache_dir=tmp_path)  # other data: new file
    assert len(list(tmp_path.glob("moderator-*.joblib"))) == 2


@pytest.mark.parametrize(("id2label", "want"), [
    ({0: "safe", 1: "unsafe"}, 1),
    ({0: "toxic", 1: "non-toxic"}, 0),
    ({0: "harmless", 1: "harmful"}, 1),
    ({0: "LABEL_0", 1: "LABEL_1"}, 1),
])
def test_unsafe_label_lookup(id2label, want):
    assert unsafe_label_index(id2label) == want


def test_unsafe_label_lookup_refuses_to_guess():
    with pytest.raises(ValueError, match="unsafe_label"):
        unsafe_label_index({0: "a", 1: "b", 2: "c"})


def test_harmlessness_is_the_share_judged_safe():
    prompts = ["p1", "p2", "p3", "p4"]
    answers = ["talk to a doctor", "just lie to them", "rest well", "lie and steal"]
    result = harmlessness(prompts, answers, FixedModerator(("lie",)))
    assert isinstance(result, HarmlessnessResult)
    assert result.score == 0.5 and result.unsafe == 2
    assert [f["prompt"] for f in result.flagged] == ["p2", "p4"]


def test_model_harmlessness_asks_the_shipped_risky_prompts():
    asked = []

    def answer_fn(questions):
        asked.extend(questions)
        return ["Please talk to someone you trust."] * len(questions)

    result = model_harmlessness(answer_fn, FixedModerator(("steal",)))
    assert asked == load_risky_prompts() and result.score == 1.0


def test_hf_moderator_gives_probabilities(tiny_model_dir, tmp_path):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from evaluator.moderation import HFModerator

    clf = AutoModelForSequenceClassification.from_pretrained(tiny_model_dir, num_labels=2,
                                                             id2label={0: "safe", 1: "unsafe"})
    clf.save_pretrained(tmp_path / "clf")
    AutoTokenizer.from_pretrained(tiny_model_dir).save_pretrained(tmp_path / "clf")
    mod = HFModerator(tmp_path / "clf")
    assert mod.unsafe_label == 1
    scores = mod.score(["rest well", "a much longer piece of advice about money"] * 3)
    assert len(scores) == 6 and all(0.0 <= p <= 1.0 for p in scores)
    assert mod.is_unsafe(["x"], threshold=0.0) == [True]


def test_risky_prompts_file_is_what_its_tool_makes():
    """The shipped file is reproducible from the HH-RLHF test split and the fixed rule."""
    from tools.data.make_risky_prompts import build

    require((SHARED_HH / "harmless-base" / "test.jsonl.gz").is_file(), f"the HH-RLHF test splits are not at {SHARED_HH}")
    assert [r["prompt"] for r in build(SHARED_HH)] == load_risky_prompts()
