"""The store on both backends (a real DuckDB file, a real PostgreSQL database): schema, tree,
ownership, forgetting, validation."""

from __future__ import annotations

import pytest
from store_peek import peek, poke

from store import (
    FeedbackEvent,
    GenerationMeta,
    InvalidInput,
    NotFound,
    Store,
    clean_text,
)
from store.attributes import Attributes
from store.migrations import LATEST_VERSION


@pytest.fixture
def store(any_store):
    return any_store


def _answer(store: Store, conv_id: str, parent_id: str, text: str, verbosity: int = 2):
    meta = GenerationMeta(backend="transformers", model="m", attributes=Attributes(verbosity=verbosity),
                          temperature=0.7, top_p=0.9, max_new_tokens=64, latency_ms=12.0,
                          prompt_tokens=10, completion_tokens=5, finish_reason="stop")
    return store.conversations.add_message(conv_id, "assistant", text, parent_id=parent_id, generation=meta)


def _turn(store: Store, user: str, question: str, answer: str):
    conv = store.conversations.create(user)
    q = store.conversations.add_message(conv.id, "user", question)
    a = _answer(store, conv.id, q.id, answer)
    return conv, q, a


def test_schema_created_and_recorded(store_target):
    path = store_target
    with Store(path) as s:
        assert s.schema_version() == LATEST_VERSION
    with Store(path) as s:  # reopening applies nothing twice
        assert s.schema_version() == LATEST_VERSION
        assert peek(s, "SELECT count(*) FROM schema_version")[0][0] == LATEST_VERSION


def test_generation_metadata_round_trip(store):
    conv, q, a = _turn(store, "alice", "How do I sleep better?", "Keep a fixed wake time.")
    got = store.conversations.get_message(a.id)
    assert got.generation.attributes == Attributes(verbosity=2)
    assert got.generation.completion_tokens == 5 and got.generation.finish_reason == "stop"
    assert store.conversations.get(conv.id).title == "How do I sleep better?"


def test_generation_metadata_reads_typed_through_the_view(store):
    """Since migration 2 the metadata is JSON on the answer's row; `generations` gives it typed."""
    conv, q, a = _turn(store, "alice", "Q", "A")
    row = peek(store, "SELECT message_id, conversation_id, verbosity, temperature, completion_tokens, "
                      "finish_reason, typeof(verbosity) FROM generations")
    assert row == [(a.id, conv.id, 2, 0.7, 5, "stop", "TINYINT")]
    assert peek(store, "SELECT count(*) FROM messages WHERE generation IS NOT NULL") == [(1,)]


def test_hostile_error_text_and_a_broken_timer_are_stored(store):
    conv = store.conversations.create("alice")
    q = store.conversations.add_message(conv.id, "user", "Q")
    meta = GenerationMeta(backend="b", model="m", attributes=Attributes(), latency_ms=float("nan"),
                          error='"}, "verbosity": 0 \\ \u0000 \'); DROP TABLE messages; --', finish_reason="error")
    a = store.conversations.add_message(conv.id, "assistant", "", parent_id=q.id, status="error", generation=meta)
    got = store.conversations.get_message(a.id).generation
    # NUL becomes U+FFFD on both backends (PostgreSQL's text cannot hold it); the rest is verbatim.
    assert got.error == meta.error.replace("\x00", "\ufffd") and got.latency_ms is None
    assert got.attributes == Attributes()


def test_answer_to_a_missing_parent_or_conversation_writes_nothing(store):
    conv, q, a = _turn(store, "alice", "Q", "A")
    other, oq, _ = _turn(store, "bob", "Q2", "A2")
    before = peek(store, "SELECT count(*) FROM messages")
    with pytest.raises(NotFound, match="No message"):
        _answer(store, conv.id, oq.id, "crossed")  # a parent from another conversation
    with pytest.raises(NotFound, match="No conversation"):
        _answer(store, "nope", q.id, "orphan")
    with pytest.raises(NotFound, match="No conversation"):
        store.conversations.add_message("nope", "user", "orphan")
    assert peek(store, "SELECT count(*) FROM messages") == before


def test_a_v1_store_upgrades_keeping_its_generation_metadata(tmp_path):
    """A file written by schema v1 (metadata in a `generations` table) opens as the latest
    version with every answer's metadata on its row, readable as before."""
    import duckdb

    from store.migrations import MIGRATIONS

    path = tmp_path / "v1.duckdb"
    con = duckdb.connect(str(path))
    con.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, description VARCHAR, "
                "applied_at TIMESTAMPTZ DEFAULT now())")
    con.execute(MIGRATIONS[0].duckdb)
    con.execute("INSERT INTO schema_version (version, description) VALUES (1, 'initial schema')")
    con.execute("INSERT INTO users (id, name) VALUES ('alice', 'alice')")
    con.execute("INSERT INTO conversations (id, user_id, title) VALUES ('c1', 'alice', 'Q')")
    con.execute("INSERT INTO messages (id, conversation_id, parent_id, role, content) VALUES "
                "('q1', 'c1', NULL, 'user', 'Q'), ('a1', 'c1', 'q1', 'assistant', 'A')")
    con.execute("INSERT INTO generations (message_id, conversation_id, release_id, backend, model, adapter, "
                "steering, helpfulness, correctness, coherence, complexity, verbosity, temperature, top_p, "
                "max_new_tokens, seed, latency_ms, first_token_ms, prompt_tokens, completion_tokens, "
                "finish_reason, error) VALUES ('a1', 'c1', 'r1', 'builtin', 'm', 'ad', 'steerlm', 4, 3, 2, 1, 0, "
                "0.5, 0.9, 64, 7, 120.5, 10.25, 30, 47, 'length', NULL)")
    con.close()
    with Store(path) as s:
        assert s.schema_version() == LATEST_VERSION
        g = s.conversations.get_message("a1").generation
        assert g == GenerationMeta(backend="builtin", model="m", steering="steerlm", release_id="r1", adapter="ad",
                                   attributes=Attributes(helpfulness=4, correctness=3, coherence=2, complexity=1,
                                                         verbosity=0),
                                   temperature=0.5, top_p=0.9, max_new_tokens=64, seed=7, latency_ms=120.5,
                                   first_token_ms=10.25, prompt_tokens=30, completion_tokens=47,
                                   finish_reason="length", error=None)
        assert s.conversations.get_message("q1").generation is None
        assert peek(s, "SELECT release_id, verbosity FROM generations") == [("r1", 0)]
        assert s.privacy.forget_user("alice")["generations"] == 1
        assert peek(s, "SELECT count(*) FROM generations") == [(0,)]


def test_regenerate_makes_siblings_and_choice_picks_branch(store):
    conv, q, a1 = _turn(store, "alice", "Q", "first")
    a2 = _answer(store, conv.id, q.id, "second")
    assert [m.content for m in store.conversations.thread(conv.id)] == ["Q", "second"]  # newest by default
    store.conversations.choose_sibling(a1.id, "alice")
    assert [m.content for m in store.conversations.thread(conv.id)] == ["Q", "first"]
    assert {m.id for m in store.conversations.siblings(a1.id)} == {a1.id, a2.id}


def test_other_users_rows_are_not_found(store):
    conv, q, a = _turn(store, "alice", "Q", "A")
    with pytest.raises(NotFound):
        store.conversations.get(conv.id, user_id="bob")
    with pytest.raises(NotFound):
        store.conversations.rate(a.id, "bob", 1)
    with pytest.raises(NotFound):
        store.conversations.choose_sibling(a.id, "bob")
    assert store.conversations.ratings(a.id) == []


def test_forget_removes_only_that_user(store):
    conv, q, a = _turn(store, "alice", "Q", "A")
    store.conversations.rate(a.id, "alice", -1, reasons=["too long"], comment="meh")
    store.events.add([FeedbackEvent(conv.id, q.id, a.id, "positive", "Q", 0, 1, "fast", "1")])
    other, oq, oa = _turn(store, "bob", "Q2", "A2")
    store.conversations.rate(oa.id, "bob", 1)
    before = store.stats()["rows"]
    counts = store.privacy.forget_user("alice")
    assert counts["messages"] == 2 and counts["ratings"] == 1 and counts["feedback_events"] == 1
    rows = store.stats()["rows"]
    assert rows["messages"] == before["messages"] - 2
    leftover = peek(store,
        "SELECT count(*) FROM messages m JOIN conversations c ON c.id = m.conversation_id WHERE c.user_id = 'alice'"
    )[0][0]
    assert leftover == 0
    assert peek(store, "SELECT count(*) FROM ratings WHERE user_id = 'alice'")[0][0] == 0
    assert [m.content for m in store.conversations.thread(other.id)] == ["Q2", "A2"]
    assert len(store.conversations.ratings(oa.id)) == 1
    with pytest.raises(InvalidInput):
        store.conversations.create("alice")  # a forgotten id is never written again


def test_feedback_events_deduplicate(store):
    conv, q, a = _turn(store, "alice", "thanks", "A")
    ev = FeedbackEvent(conv.id, q.id, a.id, "positive", "thanks", 0, 6, "fast", "1")
    assert store.events.add([ev]) == 1
    assert store.events.add([FeedbackEvent(conv.id, q.id, a.id, "positive", "thanks", 0, 6, "fast", "1")]) == 0


def test_one_live_release_at_a_time(store):
    r1 = store.releases.create(base_model="b", adapter_path=None, status="live")
    r2 = store.releases.create(base_model="b", adapter_path="/x")
    store.releases.set_status(r2.id, "live", decision={"promote": True})
    assert store.releases.live().id == r2.id
    assert store.releases.get(r1.id).status == "retired"
    assert store.releases.get(r2.id).decision == {"promote": True}


def test_failed_transaction_writes_nothing(store):
    conv = store.conversations.create("alice")
    before = store.stats()["rows"]["messages"]
    with pytest.raises(RuntimeError):
        with store.transaction():
            poke(store, "INSERT INTO messages (id, conversation_id, role, content) VALUES ('x', ?, 'user', 'hi')",
                 [conv.id])
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


def test_merging_a_job_result_keeps_the_keys_it_does_not_name(store):
    # A training run's end writes its outcome onto the job row; progress written after it (the
    # job's last report) must not drop the outcome, and a status given with the merge is set.
    job = store.jobs.create("train")
    store.jobs.merge_result(job.id, {"run_id": "r1", "step": 3, "adapter_dir": "/runs/r1/adapter"}, status="succeeded")
    after = store.jobs.merge_result(job.id, {"step": 4, "progress": "4/4"})
    assert after.status == "succeeded"
    assert after.result == {"run_id": "r1", "step": 4, "adapter_dir": "/runs/r1/adapter", "progress": "4/4"}
    assert store.jobs.get(job.id).result == after.result
