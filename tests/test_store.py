"""The store on real DuckDB files: schema, tree, ownership, forgetting, validation."""

from __future__ import annotations

import pytest

from feedback.attributes import Attributes
from feedback.migrations import LATEST_VERSION
from feedback.store import (
    FeedbackEvent, GenerationMeta, InvalidInput, NotFound, Store, clean_text,
)


def _answer(store: Store, conv_id: str, parent_id: str, text: str, verbosity: int = 2):
    meta = GenerationMeta(backend="transformers", model="m", attributes=Attributes(verbosity=verbosity),
                          temperature=0.7, top_p=0.9, max_new_tokens=64, latency_ms=12.0,
                          prompt_tokens=10, completion_tokens=5, finish_reason="stop")
    return store.add_message(conv_id, "assistant", text, parent_id=parent_id, generation=meta)


def _turn(store: Store, user: str, question: str, answer: str):
    conv = store.create_conversation(user)
    q = store.add_message(conv.id, "user", question)
    a = _answer(store, conv.id, q.id, answer)
    return conv, q, a


def test_schema_created_and_recorded(tmp_path):
    path = tmp_path / "a.duckdb"
    with Store(path) as s:
        assert s.schema_version() == LATEST_VERSION
    with Store(path) as s:  # reopening applies nothing twice
        assert s.schema_version() == LATEST_VERSION
        assert s.query("SELECT count(*) FROM schema_version")[0][0] == LATEST_VERSION


def test_generation_metadata_round_trip(store):
    conv, q, a = _turn(store, "alice", "How do I sleep better?", "Keep a fixed wake time.")
    got = store.get_message(a.id)
    assert got.generation.attributes == Attributes(verbosity=2)
    assert got.generation.completion_tokens == 5 and got.generation.finish_reason == "stop"
    assert store.get_conversation(conv.id).title == "How do I sleep better?"


def test_regenerate_makes_siblings_and_choice_picks_branch(store):
    conv, q, a1 = _turn(store, "alice", "Q", "first")
    a2 = _answer(store, conv.id, q.id, "second")
    assert [m.content for m in store.thread(conv.id)] == ["Q", "second"]  # newest by default
    store.choose_sibling(a1.id, "alice")
    assert [m.content for m in store.thread(conv.id)] == ["Q", "first"]
    assert {m.id for m in store.siblings(a1.id)} == {a1.id, a2.id}


def test_other_users_rows_are_not_found(store):
    conv, q, a = _turn(store, "alice", "Q", "A")
    with pytest.raises(NotFound):
        store.get_conversation(conv.id, user_id="bob")
    with pytest.raises(NotFound):
        store.rate(a.id, "bob", 1)
    with pytest.raises(NotFound):
        store.choose_sibling(a.id, "bob")
    assert store.ratings(a.id) == []


def test_forget_removes_only_that_user(store):
    conv, q, a = _turn(store, "alice", "Q", "A")
    store.rate(a.id, "alice", -1, reasons=["too long"], comment="meh")
    store.add_feedback_events([FeedbackEvent(conv.id, q.id, a.id, "positive", "Q", 0, 1, "fast", "1")])
    other, oq, oa = _turn(store, "bob", "Q2", "A2")
    store.rate(oa.id, "bob", 1)
    before = store.stats()["rows"]
    counts = store.forget_user("alice")
    assert counts["messages"] == 2 and counts["ratings"] == 1 and counts["feedback_events"] == 1
    rows = store.stats()["rows"]
    assert rows["messages"] == before["messages"] - 2
    leftover = store.query(
        "SELECT count(*) FROM messages m JOIN conversations c ON c.id = m.conversation_id WHERE c.user_id = 'alice'"
    )[0][0]
    assert leftover == 0
    assert store.query("SELECT count(*) FROM ratings WHERE user_id = 'alice'")[0][0] == 0
    assert [m.content for m in store.thread(other.id)] == ["Q2", "A2"]
    assert len(store.ratings(oa.id)) == 1
    with pytest.raises(InvalidInput):
        store.create_conversation("alice")  # a forgotten id is never written again


def test_feedback_events_deduplicate(store):
    conv, q, a = _turn(store, "alice", "thanks", "A")
    ev = FeedbackEvent(conv.id, q.id, a.id, "positive", "thanks", 0, 6, "fast", "1")
    assert store.add_feedback_events([ev]) == 1
    assert store.add_feedback_events([FeedbackEvent(conv.id, q.id, a.id, "positive", "thanks", 0, 6, "fast", "1")]) == 0


def test_one_live_release_at_a_time(store):
    r1 = store.create_release(base_model="b", adapter_path=None, status="live")
    r2 = store.create_release(base_model="b", adapter_path="/x")
    store.set_release_status(r2.id, "live", decision={"promote": True})
    assert store.live_release().id == r2.id
    assert store.get_release(r1.id).status == "retired"
    assert store.get_release(r2.id).decision == {"promote": True}


def test_failed_transaction_writes_nothing(store):
    conv = store.create_conversation("alice")
    before = store.stats()["rows"]["messages"]
    with pytest.raises(RuntimeError):
        with store.transaction() as cur:
            cur.execute(
                "INSERT INTO messages (id, conversation_id, role, content) VALUES ('x', ?, 'user', 'hi')", [conv.id]
            )
            raise RuntimeError("boom")
    assert store.stats()["rows"]["messages"] == before


@pytest.mark.parametrize(
    "bad, fragment",
    [("", "empty"), ("   \n\t ", "empty"), ("x" * 200_000, "limit"), (b"\xff\xfe", "UTF-8"), (42, "text")],
)
def test_clean_text_rejects_bad_input(bad, fragment):
    with pytest.raises(InvalidInput, match=fragment):
        clean_text(bad)


def test_clean_text_strips_control_characters():
    assert clean_text("a\x00b\x1bc\n d\t") == "abc\n d"
