"""The fast extractor: cues on hand cases (including the hard negatives), the keyword gate, the
tuned thresholds, the shipped gold set, and the acceptance figures on its held-out split."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from feedback.extract import FastConfig, FastExtractor, Window, cues, evaluate, load_gold, predict, windows_of
from feedback.extract.fast import TUNED_PATH
from feedback.extract.gold import SHIPPED_GOLD, GoldFormatError
from store.taxonomy import CATEGORY_IDS
from tools.data import make_dev_gold

PREVIOUS = "How can I fall asleep faster? I lie awake for about an hour most nights."
ANSWER = ("Keep a consistent schedule: go to bed at the same time every day. Build a 30-minute wind-down "
          "routine without screens, and keep the bedroom cool and dark.")


def found(user: str, *, answer: str = ANSWER, previous: str | None = PREVIOUS, embedder=None,
          rules_only: bool = False) -> list[tuple]:
    config = FastConfig.tuned().rules_only() if rules_only else FastConfig.tuned()
    ex = FastExtractor(config, embedder=embedder, use_embeddings=embedder is not None)
    return [(s.category, s.text) for s in ex.extract([Window("k", user, answer, previous)]).spans[0]]


# Both readers are checked on every hand case. The classifier trained on dev alone misread two of
# them ("Can you explain how caffeine affects sleep?" as a clarification, "How should I thank my
# sister for covering for me?" as a re-ask); the one trained on 720 train + dev read them all
# right; the shipped one (960 train + dev) misreads another (`CLASSIFIER_MISREADS`).
HAND_CASES = [
    ("Thanks, that's really helpful!", [("positive", "Thanks, that's really helpful!")]),
    ("Perfect, that makes sense. Does exercise in the evening make it worse?",
     [("positive", "Perfect, that makes sense.")]),
    ("That's not what I asked.", [("aware_without_correction", "That's not what I asked.")]),
    ("No, I work night shifts, so a fixed bedtime is impossible for me.",
     [("aware_with_correction", "No, I work night shifts, so a fixed bedtime is impossible for me.")]),
    ("I work night shifts, so a fixed bedtime is impossible for me.",
     [("aware_with_correction", "I work night shifts, so a fixed bedtime is impossible for me.")]),
    ("What do you mean by wind-down routine?", [("ask_clarification", "What do you mean by wind-down routine?")]),
    ("How do I do that exactly?", [("ask_clarification", "How do I do that exactly?")]),
    ("Let me rephrase: what can I do to fall asleep more quickly?",
     [("repeat_rephrase", "Let me rephrase: what can I do to fall asleep more quickly?")]),
    ("That doesn't help. How can I fall asleep faster when I lie awake?",
     [("aware_without_correction", "That doesn't help."),
      ("repeat_rephrase", "How can I fall asleep faster when I lie awake?")]),
    # Hard negatives.
    ("Great, another useless answer.", [("aware_without_correction", "Great, another useless answer.")]),
    ("Can you explain how caffeine affects sleep?", []),  # a new request phrased like a clarification
    ("Quick question, thanks in advance: is melatonin safe every night?", []),
    ("How should I thank my sister for covering for me?", []),
    ("Oops, small correction: it's more like two hours, not one.", []),  # the user corrects themselves
    ("Is it okay to take melatonin every night?", []),  # a follow-up, not a rephrase
]


@pytest.mark.parametrize("user, expected", HAND_CASES)
def test_cues_on_hand_cases(user, expected):
    assert found(user, rules_only=True) == expected


# Strict xfails: a retrained model that reads one right fails here until it is taken off the list.
CLASSIFIER_MISREADS = {
    "That doesn't help. How can I fall asleep faster when I lie awake?":
        "read as one correction: 'That doesn't help.' scores correction 0.55 against complaint 0.42, "
        "and a correction next to a re-ask is one correction",
}


@pytest.mark.parametrize("user, expected", [
    pytest.param(u, e, marks=pytest.mark.xfail(strict=True, reason=CLASSIFIER_MISREADS[u]))
    if u in CLASSIFIER_MISREADS else (u, e) for u, e in HAND_CASES])
def test_classifier_on_hand_cases(user, expected):
    assert found(user) == expected


ASKED = ANSWER + " Have you tried any of this before?"


@pytest.mark.parametrize("rules_only", [True, False])
def test_no_answering_the_assistants_question_is_not_an_objection(rules_only):
    assert found("No, not yet. Is melatonin okay?", answer=ASKED, rules_only=rules_only) == []


@pytest.mark.parametrize("rules_only", [True, False])
def test_no_that_rejects_the_answer_is_an_objection_even_after_its_question(rules_only):
    assert found("No, that's not what I asked.", answer=ASKED, rules_only=rules_only) == [
        ("aware_without_correction", "No, that's not what I asked.")]


def test_first_user_message_is_never_feedback():
    assert found("Thanks! How do I start journaling?", previous=None) == [("positive", "Thanks!")]
    gold = load_gold()
    for conv in gold:
        first = next(k for k, m in enumerate(conv.messages) if m["role"] == "user")
        assert all(w.key[1] != first for w in windows_of(conv))


def test_spans_are_offsets_into_the_users_text():
    user = "  Thanks!!  \n\nBut what's the wind-down routine exactly?  "
    ex = FastExtractor(FastConfig.tuned(), use_embeddings=False)
    spans = ex.extract([Window("k", user, ANSWER, PREVIOUS)]).spans[0]
    assert [s.category for s in spans] == ["positive", "ask_clarification"]
    for s in spans:
        assert user[s.start:s.end] == s.text == s.text.strip()


def test_doubtful_rephrase_goes_to_the_embedder_once_per_text():
    calls = []

    def embed(texts):
        calls.append(list(texts))
        # Every text the same direction: similarity 1.0, so the doubtful request is a rephrase.
        return np.ones((len(texts), 4), dtype=np.float32) / 2.0

    # The embedding model serves the rules' reading; the classifier path does not call it.
    config = replace(FastConfig.tuned().rules_only(), embedding_budget=1.0)
    user = "What can I do about lying awake, any tips for my evenings?"  # some overlap with PREVIOUS
    ex = FastExtractor(config, embedder=embed)
    windows = [Window(k, user, ANSWER, PREVIOUS) for k in range(3)]
    result = ex.extract(windows)
    lexical = len(cues.content_stems(user) & cues.content_stems(PREVIOUS)) / len(cues.content_stems(user))
    assert config.rephrase_lexical_low <= lexical < config.rephrase_lexical_high, "the case must be doubtful"
    assert len(calls) == 1 and sorted(calls[0]) == sorted({user, PREVIOUS})  # batched, deduplicated
    assert result.stats["doubtful_rephrases"] == 3 and result.stats["embedded_pairs"] == 3
    assert all(spans == [result.spans[0][0]] and spans[0].category == "repeat_rephrase" for spans in result.spans)

    # The budget caps the model's share of a batch; the rest are not rephrases.
    capped = FastExtractor(replace(config, embedding_budget=0.2), embedder=embed).extract(windows * 4)
    assert capped.stats["embedded_pairs"] == 2 and capped.stats["embedding_over_budget"] == 10
    assert sum(1 for spans in capped.spans if spans) == 2


def test_keyword_gate_never_changes_a_cue():
    sentences = [s for conv in load_gold() for m in conv.messages for s in cues.sentences(m["content"])]
    sentences += cues.sentences("Wow, thanks for nothing. No worries! I'll give it a go. You're not listening.")
    assert len(sentences) > 1000
    for name in dir(cues):
        cue = getattr(cues, name)
        if isinstance(cue, cues.Cue) and cue.triggers is not None:
            for s in sentences:
                assert bool(cue.search(s)) == bool(cue.search_ungated(s)), (name, s.text)


def test_tuned_thresholds_are_recorded_with_their_score():
    record = json.loads(TUNED_PATH.read_text())
    tuned = FastConfig.tuned().as_dict()
    assert tuned.pop("classifier") is True  # on by default; not a tuned threshold
    assert tuned == record["config"]
    assert record["tuned_on"]["split"] == "dev"
    assert set(record["dev_score"]) >= {"span_precision", "span_recall", "span_f1"}
    assert record["embedding_rate"] <= record["max_embedding_rate"]


def test_shipped_gold_set_is_valid_and_matches_its_generator(tmp_path):
    gold = load_gold(SHIPPED_GOLD)
    assert len(gold) >= 200
    counts = {c: 0 for c in CATEGORY_IDS}
    for conv in gold:
        for f in conv.feedback:
            counts[f.category] += 1
    assert min(counts.values()) >= 50, counts
    assert sum(1 for c in gold if not c.feedback) >= 10  # conversations with no feedback at all
    assert {c.split for c in gold} == {"dev", "test"}
    for topic in make_dev_gold.TOPICS:  # clarification terms are the answer's own words
        assert all(t in topic.answer for t in topic.terms) and topic.more_term in topic.more
    out = tmp_path / "gold.jsonl"
    make_dev_gold.write(out)
    assert out.read_text() == SHIPPED_GOLD.read_text(), "run `python -m tools.data.make_dev_gold`"


def test_gold_format_errors_name_the_line(tmp_path):
    path = tmp_path / "bad.jsonl"
    good = {"id": "a", "messages": [{"role": "user", "content": "q"}, {"role": "assistant", "content": "a"},
                                    {"role": "user", "content": "Thanks!"}],
            "feedback": [{"message": 2, "category": "positive", "span": "Thanks!"}]}
    bad = dict(good, id="b", feedback=[{"message": 2, "category": "positive", "span": "Not in it"}])
    path.write_text(json.dumps(good) + "\n" + json.dumps(bad) + "\n")
    with pytest.raises(GoldFormatError, match=r"bad.jsonl:2: .*not a substring"):
        load_gold(path)
    first = dict(good, feedback=[{"message": 0, "category": "positive", "span": "q"}])
    path.write_text(json.dumps(first) + "\n")
    with pytest.raises(GoldFormatError, match="first user message"):
        load_gold(path)


def test_acceptance_on_the_held_out_split_without_embeddings():
    """Span P and R >= 0.6 on the test split, even with the embedding model switched off."""
    test = load_gold(split="test")
    predictions, _ = predict(FastExtractor(FastConfig.tuned(), use_embeddings=False), test)
    m = evaluate(test, predictions, n_bootstrap=200)
    assert m["span_precision"]["value"] >= 0.6 and m["span_recall"]["value"] >= 0.6, m


@pytest.mark.slow  # loads sentence-transformers and MiniLM: seconds on an idle core, more on a busy one
def test_real_minilm_separates_a_rephrase_from_a_follow_up():
    from feedback.extract.embed import MiniLMEmbedder

    embed = MiniLMEmbedder()
    v = embed(["How can I fall asleep faster?", "What can I do to fall asleep more quickly?",
               "Which mattress is best for back pain?"])
    assert v.shape == (3, 384) and np.allclose(np.linalg.norm(v, axis=1), 1.0, atol=1e-4)
    assert float(v[0] @ v[1]) > FastConfig.tuned().rephrase_embedding > float(v[0] @ v[2])
