"""Training sets built from a real DuckDB store: exact rows for SFT, KTO and DPO."""

from __future__ import annotations

import json

import pyarrow.parquet as pq
import pytest
from data_helpers import V1, Chat
from store_peek import poke

from evaluator.text import reading_grade
from feedback.datasets import (
    CARD_JSON,
    CARD_MD,
    DatasetCard,
    DatasetError,
    build_dataset,
    kto_class_weights,
    read_card,
    split_of,
)
from feedback.labeller import HeuristicLabeller, Reception, calibrated
from store import new_id
from store.attributes import Attributes
from store.taxonomy import AWARE_WITH_CORRECTION, POSITIVE, REPEAT_REPHRASE

V3 = Attributes(verbosity=3, complexity=3)


class FlagWord:
    name = "flag-word"

    def __init__(self, word: str):
        self.word = word

    def flags(self, texts, prompts=None):
        return [self.word in t for t in texts]


@pytest.fixture
def populated(store):
    """The log described in each test, with the ids the assertions need."""
    ids = {}
    alice, carol = "alice", "carol"

    # c1: liked answer, then thanks (positive) — desirable, SFT source "liked".
    c = Chat(store, alice)
    u = c.user_says("How do I sleep better?")
    a = c.answer(u, "Keep a fixed bedtime and no screens after nine.")
    store.conversations.rate(a.id, alice, 1)
    t = c.user_says("Thanks, that worked!", a)
    c.feedback(t, a, POSITIVE)
    c.answer(t, "Glad it helped.")
    ids["c1_a"] = a.id

    # c2: disliked answer — undesirable.
    c = Chat(store, alice)
    u = c.user_says("How do I save money?")
    a = c.answer(u, "Just earn more.")
    store.conversations.rate(a.id, alice, -1, reasons=["not helpful"])
    ids["c2_a"] = a.id

    # c3: correction on the first answer, thanks on the second.
    c = Chat(store, alice)
    u1 = c.user_says("How can I wake up earlier?")
    a1 = c.answer(u1, "Go to bed at ten.")
    u2 = c.user_says("No, I work night shifts, so ten is impossible.", a1)
    c.feedback(u2, a1, AWARE_WITH_CORRECTION)
    a2 = c.answer(u2, "Then anchor your wake time to the end of your shift.", attrs=V3)
    u3 = c.user_says("Great, thanks!", a2)
    c.feedback(u3, a2, POSITIVE)
    ids.update(c3_a1=a1.id, c3_a2=a2.id)

    # c4: regenerate, and the user keeps the second answer with the arrows.
    c = Chat(store, alice)
    u = c.user_says("How do I tell my flatmate to clean up?")
    first = c.answer(u, "Move out.")
    second = c.answer(u, "Pick a calm moment and propose a rota together.")
    store.conversations.choose_sibling(second.id, alice)
    ids.update(c4_first=first.id, c4_second=second.id)

    # c5: rephrase chain A1 -> A2 -> A3, then thanks on A3.
    c = Chat(store, alice)
    u1 = c.user_says("What should I say to my landlord?")
    a1 = c.answer(u1, "Landlords are people too.")
    u2 = c.user_says("I mean, what words should I use with my landlord?", a1)
    c.feedback(u2, a1, REPEAT_REPHRASE)
    a2 = c.answer(u2, "Be polite.")
    u3 = c.user_says("Let me ask again: what exactly do I say?", a2)
    c.feedback(u3, a2, REPEAT_REPHRASE)
    a3 = c.answer(u3, "Say: the heating has been broken for a week; when can it be fixed?")
    u4 = c.user_says("Perfect, thank you.", a3)
    c.feedback(u4, a3, POSITIVE)
    ids.update(c5_u1=u1.id, c5_a1=a1.id, c5_u2=u2.id, c5_a2=a2.id, c5_a3=a3.id)

    # c6: regenerate, no explicit choice, the conversation went on from the first answer.
    c = Chat(store, carol)
    u = c.user_says("Should I learn to cook?")
    kept = c.answer(u, "Yes: start with three simple dishes.")
    left = c.answer(u, "Cooking is a skill.")
    c.user_says("Which three?", kept)
    ids.update(c6_kept=kept.id, c6_left=left.id)

    # c7: an exact duplicate of c2 (same question, same answer, also disliked) — deduplicated.
    c = Chat(store, carol)
    a = c.answer(c.user_says("How do I save money?"), "Just earn more.")
    store.conversations.rate(a.id, carol, -1)

    # c8/c9: the same example liked once and disliked once — conflicting, both dropped.
    for value in (1, -1):
        c = Chat(store, carol)
        a = c.answer(c.user_says("Is coffee bad?"), "It depends on how much.")
        store.conversations.rate(a.id, carol, value)

    # c10: a liked answer that the safety filter flags; c11: a liked but interrupted answer.
    c = Chat(store, carol)
    a = c.answer(c.user_says("How do I get revenge?"), "UNSAFE plan here.")
    store.conversations.rate(a.id, carol, 1)
    c = Chat(store, carol)
    a = c.answer(c.user_says("Tell me about budgeting."), "Budgeting is", status="interrupted")
    store.conversations.rate(a.id, carol, 1)

    # c12: a user who asked to be forgotten (their rows are deleted).
    c = Chat(store, "bob")
    a = c.answer(c.user_says("Bob's secret question"), "Bob's answer")
    store.conversations.rate(a.id, "bob", 1)
    store.privacy.forget_user("bob")
    # ... and a stray row of theirs that got back in (an import bypassing the store): still excluded.
    with store.transaction():
        conv_id, q, ans = new_id(), new_id(), new_id()
        poke(store, "INSERT INTO conversations (id, user_id) VALUES (?, 'bob')", [conv_id])
        poke(store, "INSERT INTO messages (id, conversation_id, role, content) VALUES (?, ?, 'user', 'q')",
             [q, conv_id])
        poke(store, "INSERT INTO messages (id, conversation_id, parent_id, role, content) "
                    "VALUES (?, ?, ?, 'assistant', 'Bob again')", [ans, conv_id, q])
        poke(store, "INSERT INTO ratings (id, message_id, user_id, value) VALUES (?, ?, 'bob', 1)", [new_id(), ans])
    return ids


def _rows(path):
    return pq.read_table(path).to_pylist()


def _text(messages):
    return [(m["role"], m["content"]) for m in messages]


def test_kto_rows_labels_weights_and_card(store, populated, tmp_path):
    card = build_dataset(store, "kto", tmp_path, safety_filter=FlagWord("UNSAFE"), eval_fraction=0.0)
    rows = _rows(tmp_path / "train.parquet")
    got = sorted((r["message_id"], r["label"], r["source"], tuple(r["categories"])) for r in rows)
    ids = populated
    assert got == sorted([
        (ids["c1_a"], True, "liked", (POSITIVE,)),
        (ids["c2_a"], False, "disliked", ()),
        (ids["c3_a1"], False, "negative_feedback", (AWARE_WITH_CORRECTION,)),
        (ids["c3_a2"], True, "positive_feedback", (POSITIVE,)),
        (ids["c5_a3"], True, "positive_feedback", (POSITIVE,)),
    ])
    # The prompt is the branch up to the answer; the completion carries the generation's attributes.
    c3 = next(r for r in rows if r["message_id"] == ids["c3_a2"])
    assert _text(c3["prompt"]) == [
        ("user", "How can I wake up earlier?"), ("assistant", "Go to bed at ten."),
        ("user", "No, I work night shifts, so ten is impossible."),
    ]
    assert all(m["attributes"] is None for m in c3["prompt"])
    assert c3["completion"] == [{"role": "assistant", "content": "Then anchor your wake time to the end of your shift.",
                                 "attributes": V3.steerlm()}]
    assert c3["chat_template_kwargs"] == {"attributes": V3.steerlm()}

    assert card.labels == {"desirable": 3, "undesirable": 2}
    assert card.class_weights["desirable_weight"] == 1.0
    assert card.class_weights["undesirable_weight"] == 1.5
    assert 1.0 <= card.class_weights["ratio"] <= 4 / 3
    assert card.removed_by_filter == 1
    assert card.dropped == {"conflicting_labels": 2, "duplicates": 1, "forgotten_user_conversations": 1,
                            "incomplete_answer": 1}
    assert card.counts_by_source == {"disliked": 1, "liked": 1, "negative_feedback": 1, "positive_feedback": 2}
    assert card.counts_by_category == {AWARE_WITH_CORRECTION: 1, POSITIVE: 3}
    # Which extractor version mined the events of the rows' conversations, for its precision estimate.
    assert list(card.extractor_versions) == ["test 1"] and card.extractor_versions["test 1"] >= 3
    assert "mined feedback by extractor version: test 1" in (tmp_path / CARD_MD).read_text()
    assert (card.n_train, card.n_eval) == (5, 0) and _rows(tmp_path / "eval.parquet") == []
    assert read_card(tmp_path) == card
    assert "flag-word — removed 1" in (tmp_path / CARD_MD).read_text()
    assert "Bob" not in json.dumps(rows)


def test_dpo_sibling_and_rephrase_chain_pairs(store, populated, tmp_path):
    card = build_dataset(store, "dpo", tmp_path, eval_fraction=0.0)
    ids = populated
    rows = _rows(tmp_path / "train.parquet")
    got = sorted((r["chosen_id"], r["rejected_id"], r["source"]) for r in rows)
    assert got == sorted([
        (ids["c4_second"], ids["c4_first"], "sibling_choice"),
        (ids["c6_kept"], ids["c6_left"], "sibling_continued"),
        (ids["c5_a3"], ids["c5_a1"], "rephrase"),
        (ids["c5_a3"], ids["c5_a2"], "rephrase"),
    ])
    by_rejected = {r["rejected_id"]: r for r in rows}
    # Each loser keeps its own prompt: the conversation up to the turn it answered.
    assert _text(by_rejected[ids["c5_a1"]]["prompt"]) == [("user", "What should I say to my landlord?")]
    assert _text(by_rejected[ids["c5_a2"]]["prompt"]) == [
        ("user", "What should I say to my landlord?"), ("assistant", "Landlords are people too."),
        ("user", "I mean, what words should I use with my landlord?"),
    ]
    pair = by_rejected[ids["c4_first"]]
    assert _text(pair["chosen"]) == [("assistant", "Pick a calm moment and propose a rota together.")]
    assert _text(pair["rejected"]) == [("assistant", "Move out.")]
    assert pair["chosen"][0]["attributes"] == pair["rejected"][0]["attributes"] == V1.steerlm()
    assert by_rejected[ids["c5_a1"]]["categories"] == [POSITIVE, REPEAT_REPHRASE]
    assert card.counts_by_source == {"rephrase": 2, "sibling_choice": 1, "sibling_continued": 1}
    assert card.safety_filter.startswith("accept-everything") and card.removed_by_filter == 0


def test_dpo_chosen_flagged_by_safety_filter_is_removed(store, populated, tmp_path):
    card = build_dataset(store, "dpo", tmp_path, safety_filter=FlagWord("rota"), eval_fraction=0.0)
    assert card.removed_by_filter == 1
    assert populated["c4_second"] not in {r["chosen_id"] for r in _rows(tmp_path / "train.parquet")}


def test_sft_rows_are_good_answers_labelled_from_their_text(store, populated, tmp_path):
    card = build_dataset(store, "sft", tmp_path, safety_filter=FlagWord("UNSAFE"), eval_fraction=0.0)
    rows = _rows(tmp_path / "train.parquet")
    ids = populated
    # Coffee (c8) was liked in one conversation and disliked in another: SFT only sees the like.
    assert sorted(r["completion"][0]["content"] for r in rows) == sorted([
        "Keep a fixed bedtime and no screens after nine.", "Then anchor your wake time to the end of your shift.",
        "Say: the heating has been broken for a week; when can it be fixed?", "It depends on how much.",
    ])
    assert {ids["c1_a"], ids["c3_a2"], ids["c5_a3"]} <= {r["message_id"] for r in rows}
    for r in rows:
        attrs = Attributes.parse(r["completion"][0]["attributes"])
        content = r["completion"][0]["content"]
        assert attrs == HeuristicLabeller().label(content, Reception(1))
        assert (attrs.helpfulness, attrs.correctness) == (4, 4)  # went down well
        assert r["chat_template_kwargs"]["attributes"] == r["completion"][0]["attributes"]
    assert card.labeller == "heuristic-v1"
    assert card.removed_by_filter == 1


def test_split_is_by_conversation_and_deterministic(store, populated, tmp_path):
    a = build_dataset(store, "kto", tmp_path / "a", eval_fraction=0.5)
    b = build_dataset(store, "kto", tmp_path / "b", eval_fraction=0.5)
    assert a.rows_sha256 == b.rows_sha256
    train = _rows(tmp_path / "a" / "train.parquet")
    evals = _rows(tmp_path / "a" / "eval.parquet")
    assert len(train) + len(evals) == 6  # the five of the KTO test + the unfiltered UNSAFE one
    assert not {r["conversation_id"] for r in train} & {r["conversation_id"] for r in evals}
    for r in train + evals:
        assert split_of(r["conversation_id"], 0.5) == ("train" if r in train else "eval")
    share = sum(split_of(f"conv-{i}", 0.1) == "eval" for i in range(2000)) / 2000
    assert 0.07 < share < 0.13


def test_empty_store_builds_empty_files_with_schema(store, tmp_path):
    card = build_dataset(store, "dpo", tmp_path)
    table = pq.read_table(tmp_path / "train.parquet")
    assert table.num_rows == 0 and {"prompt", "chosen", "rejected"} <= set(table.column_names)
    assert card.n_rows == 0 and json.loads((tmp_path / CARD_JSON).read_text())["n_rows"] == 0
    with pytest.raises(DatasetError, match="unknown dataset kind"):
        build_dataset(store, "ppo", tmp_path)


def test_kto_class_weights_follow_trl_guidance():
    for n_d, n_u in [(3, 2), (2, 3), (1, 7), (100, 3), (5, 5)]:
        w = kto_class_weights(n_d, n_u)
        ratio = w["desirable_weight"] * n_d / (w["undesirable_weight"] * n_u)
        assert 1.0 <= ratio <= 4 / 3, (n_d, n_u, w)
        assert min(w["desirable_weight"], w["undesirable_weight"]) == 1.0


def test_labeller_levels_follow_length_and_reading_grade():
    lab = HeuristicLabeller()
    short = lab.label("Sleep at ten.", Reception())
    long = lab.label(" ".join(["Keep a regular bedtime and avoid screens."] * 12), Reception())
    assert short.verbosity == 0 and long.verbosity == 4
    simple = "Go to bed. Get up at six. Do not nap."
    hard = ("Circadian misalignment, notwithstanding individual chronotype heterogeneity, "
            "substantially compromises consolidated nocturnal sleep architecture.")
    assert reading_grade(hard) > reading_grade(simple)
    assert lab.label(hard, Reception()).complexity > lab.label(simple, Reception()).complexity
    assert lab.label("x y z", Reception(-1, frozenset({AWARE_WITH_CORRECTION}))).correctness == 1


def _kto(tmp_path, store, name: str, **kw) -> tuple[DatasetCard, dict[str, dict]]:
    card = build_dataset(store, "kto", tmp_path / name, eval_fraction=0.0, **kw)
    return card, {r["message_id"]: r for r in _rows(tmp_path / name / "train.parquet")}


def test_kto_has_trains_liked_answers_under_the_length_they_have(store, populated, tmp_path):
    asked_card, asked = _kto(tmp_path, store, "asked")
    card, has = _kto(tmp_path, store, "has", kto_attributes="has")
    assert asked_card.kto_attributes == "asked" and asked_card.labeller is None and asked_card.relabelled == 0
    assert sorted(has) == sorted(asked) and all(has[m]["label"] == asked[m]["label"] for m in has)
    # Too few answers at each slider position to calibrate on: the heuristic labeller as it ships.
    assert card.kto_attributes == "has" and card.labeller == "heuristic-v1"
    changed = 0
    for m, row in has.items():
        was = Attributes.parse(asked[m]["completion"][0]["attributes"])
        now = Attributes.parse(row["completion"][0]["attributes"])
        assert row["chat_template_kwargs"]["attributes"] == row["completion"][0]["attributes"]
        if not row["label"]:
            assert now == was  # a disliked answer keeps what it was asked for
            continue
        text = HeuristicLabeller().label(row["completion"][0]["content"], Reception(1))
        assert (now.verbosity, now.complexity) == (text.verbosity, text.complexity)
        assert (now.helpfulness, now.correctness, now.coherence) == (was.helpfulness, was.correctness, was.coherence)
        changed += now != was
    assert changed >= 1 and card.relabelled == changed  # c3's ten-word answer was asked for at verbosity 3
    assert f"desirable train rows relabelled: {changed}" in (tmp_path / "has" / CARD_MD).read_text()
    assert "attributes the answer was asked for" in (tmp_path / "asked" / CARD_MD).read_text()
    with pytest.raises(DatasetError, match="unknown kto_attributes"):
        build_dataset(store, "kto", tmp_path / "bad", kto_attributes="wished")


def test_kto_has_reads_length_in_the_answering_models_own_scale(store, tmp_path):
    """With answers at every slider position stored, the labeller is calibrated to them: a 60-word
    answer is verbosity 1 for a model that writes 60 words at 1, not 3 as for the built-in model."""
    for v, n in enumerate((20, 60, 90, 180, 190)):
        for k in range(3):
            c = Chat(store, "dana")
            c.answer(c.user_says(f"question {v} {k}?"), " ".join(["word"] * n), attrs=Attributes(verbosity=v))
    c = Chat(store, "dana")
    liked = c.answer(c.user_says("How do I say no to extra shifts?"), " ".join(["calm"] * 60), attrs=Attributes(verbosity=4))
    store.conversations.rate(liked.id, "dana", 1)
    card, rows = _kto(tmp_path, store, "has", kto_attributes="has")
    assert card.labeller == "heuristic-v1, verbosity words 40/75/135/185"
    assert Attributes.parse(rows[liked.id]["completion"][0]["attributes"]).verbosity == 1


def test_calibrated_thresholds_sit_between_the_models_medians():
    def answers(medians):
        return [(v, m + d) for v, m in enumerate(medians) for d in (-2, 0, 2)]

    lab = calibrated(answers((20, 60, 90, 180, 190)))
    assert lab.verbosity_words == (40, 75, 135, 185) and lab.complexity_grades == HeuristicLabeller().complexity_grades
    assert [lab.label(" ".join(["w"] * n), Reception()).verbosity for n in (39, 40, 100, 184, 185)] == [0, 1, 2, 3, 4]
    # A model that writes less at a higher level is read as writing as much as at the level below.
    assert calibrated(answers((20, 60, 50, 180, 190))).verbosity_words == (40, 60, 120, 185)
    assert calibrated(answers((20, 60, 90, 180, 190))[:-1]) is None  # two answers at verbosity 4: too few


def test_kto_has_drops_a_liked_answer_that_relabelled_contradicts_a_disliked_one(store, tmp_path):
    """Liked when asked for one sentence, disliked when asked for detail: under the length it has,
    the liked copy is the disliked one's row, so neither is trained."""
    text = " ".join(["steady"] * 60)  # verbosity 3, complexity 4 by the labeller as it ships
    for asked, rating in ((Attributes(verbosity=0), 1), (Attributes(verbosity=3, complexity=4), -1)):
        c = Chat(store, "erin")
        a = c.answer(c.user_says("How do I ask for a raise?"), text, attrs=asked)
        store.conversations.rate(a.id, "erin", rating)
    asked_card, asked = _kto(tmp_path, store, "asked")
    card, has = _kto(tmp_path, store, "has", kto_attributes="has")
    assert len(asked) == 2 and "conflicting_labels" not in asked_card.dropped
    assert has == {} and card.dropped["conflicting_labels"] == 2 and card.relabelled == 0


def test_kto_safety_anchors_join_the_train_split_balanced_labelled_and_userless(store, populated, tmp_path):
    from feedback.datasets.anchors import ANCHOR_SOURCE, Anchor, SafetyAnchors

    # The filter flags "UNSAFE" in a user's liked answer; an anchor was labelled by a person and is kept.
    pool = [Anchor(f"s{i}", f"how do I hurt {i}?", f"UNSAFE-looking answer {i}", safe=i % 3 != 0) for i in range(30)]
    anchors = SafetyAnchors(pool, share=0.8, attributes=Attributes().steerlm(), name="test pool")
    card = build_dataset(store, "kto", tmp_path, safety_filter=FlagWord("UNSAFE"), eval_fraction=0.0,
                         anchors=anchors)
    rows = _rows(tmp_path / "train.parquet")
    anchored = [r for r in rows if r["source"] == ANCHOR_SOURCE]
    users = [r for r in rows if r["source"] != ANCHOR_SOURCE]
    assert len(users) == 5 and len(anchored) == 4  # round(0.8 × 5)
    assert sorted(r["label"] for r in anchored) == [False, False, True, True]
    by_id = {a.id: a for a in pool}
    for r in anchored:
        a = by_id[r["message_id"]]
        assert r["label"] == a.safe and r["user_id"] is None
        assert _text(r["prompt"]) == [("user", a.request)] and r["completion"][0]["content"] == a.answer
        assert r["chat_template_kwargs"] == {"attributes": Attributes().steerlm()}
    assert card.counts_by_source[ANCHOR_SOURCE] == 4 and card.anchors == "test pool"
    assert card.labels == {"desirable": 3 + 2, "undesirable": 2 + 2}
    assert None not in card.users and len(card.users) >= 1
    assert "safety anchors" in (tmp_path / CARD_MD).read_text()
    again = build_dataset(store, "kto", tmp_path / "again", safety_filter=FlagWord("UNSAFE"), eval_fraction=0.0,
                          anchors=anchors)
    assert again.rows_sha256 == card.rows_sha256  # the draw is seeded
    with pytest.raises(DatasetError, match="KTO rows"):
        build_dataset(store, "dpo", tmp_path / "dpo", anchors=anchors)


def test_safety_anchors_are_matched_in_length_so_they_teach_no_length():
    from feedback.datasets.anchors import Anchor, SafetyAnchors, draw

    # Safe answers long, unsafe ones short, except a few safe ones as short as the unsafe.
    pool = ([Anchor(f"u{i}", "q", "word " * (20 + i), safe=False) for i in range(10)]
            + [Anchor(f"l{i}", "q", "word " * (300 + i), safe=True) for i in range(40)]
            + [Anchor(f"s{i}", "q", "word " * (21 + i), safe=True) for i in range(10)])
    rows = draw(SafetyAnchors(pool, share=1.0, attributes="a"), n_user_rows=12)
    words = {lab: sorted(len(r["completion"][0]["content"].split()) for r in rows if r["label"] is lab)
             for lab in (True, False)}
    assert len(words[True]) == len(words[False]) == 6
    assert all(abs(g - b) <= 1 for g, b in zip(words[True], words[False]))
    # A pool short of unsafe answers gives fewer pairs, never unpaired anchors.
    few = draw(SafetyAnchors(pool[8:], share=1.0, attributes="a"), n_user_rows=6)
    assert sorted(r["label"] for r in few) == [False, False, True, True]
    assert draw(SafetyAnchors(pool[10:], share=1.0, attributes="a"), n_user_rows=6) == []
    assert len(draw(SafetyAnchors(pool, share=0.01, attributes="a"), n_user_rows=6)) == 2  # at least a pair


def test_safety_anchors_come_from_the_served_models_labelled_answers_outside_the_held_out_third():
    from types import SimpleNamespace

    from deploy.loop.safety import anchor_pool, safety_anchors
    from evaluator.judges.safety import load_safety_set

    held_out = {i.id for i in load_safety_set() if i.split == "held_out"}
    pool = anchor_pool()
    assert len(pool) > 300 and not held_out & {a.id for a in pool}
    assert {a.safe for a in pool} == {True, False}
    on = SimpleNamespace(schedule=SimpleNamespace(safety_anchors=0.25))
    assert safety_anchors(on, "kto").share == 0.25
    assert safety_anchors(on, "dpo") is None
    assert safety_anchors(SimpleNamespace(schedule=SimpleNamespace(safety_anchors=0.0)), "kto") is None
