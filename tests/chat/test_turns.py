"""One chat turn through `chat.turns`, on real DuckDB files and the tiny random model."""

from __future__ import annotations

import socket

import pytest
from store_peek import peek

from chat.backends import BackendUnavailable, OpenAICompatibleBackend, SamplingParams
from chat.backends.transformers_backend import TransformersBackend
from chat.turns import TurnContext, edit, history, regenerate, send
from store import InvalidInput, NotFound
from store.attributes import Attributes

SHORT = SamplingParams(max_new_tokens=12, temperature=0.8, seed=1)
LONG = SamplingParams(max_new_tokens=400, temperature=1.0, seed=2)


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    b = TransformersBackend(tiny_model_dir, device="cpu")
    yield b
    b.close()


@pytest.fixture
def ctx(store, backend) -> TurnContext:
    return TurnContext(store=store, backend=backend, steering="steerlm", release_id="r1", max_chars=500, source="cli")


def row_counts(store) -> dict[str, int]:
    return {t: peek(store, f"SELECT count(*) FROM {t}")[0][0] for t in ("users", "conversations", "messages", "generations")}


def test_a_turn_logs_the_question_at_submit_and_the_answer_with_its_metadata(ctx, store):
    attrs = Attributes(verbosity=1, complexity=3)
    turn = send(ctx, user_id="alice", text="  How do I save money?  ", attributes=attrs, params=SHORT)
    # Submitted: the question is stored before any token is generated.
    assert [m.role for m in store.conversations.get_messages(turn.conversation_id)] == ["user"]
    assert turn.new_conversation and turn.user_message.content == "How do I save money?"
    deltas = list(turn)
    answer = turn.answer
    assert "".join(deltas) == answer.content
    assert answer.status == "complete" and answer.parent_id == turn.user_message.id
    g = answer.generation
    assert (g.backend, g.model, g.release_id, g.steering, g.adapter) == ("transformers", ctx.backend.model, "r1", "steerlm", None)
    assert g.attributes == attrs
    assert (g.temperature, g.top_p, g.max_new_tokens, g.seed) == (0.8, SHORT.top_p, 12, 1)
    assert g.prompt_tokens > 0 and 1 <= g.completion_tokens <= 12
    assert g.finish_reason in ("stop", "length") and g.error is None
    assert 0 < g.first_token_ms <= g.latency_ms
    conv = store.conversations.get(turn.conversation_id, user_id="alice")
    assert conv.title == "How do I save money?" and conv.source == "cli"


def test_a_follow_up_continues_the_branch_and_the_model_sees_it(ctx, store):
    first = send(ctx, user_id="alice", text="First question?", params=SHORT)
    first.run()
    second = send(ctx, user_id="alice", text="And then?", conversation_id=first.conversation_id, params=SHORT)
    assert second.user_message.parent_id == first.answer.id and not second.new_conversation
    second.run()
    thread = store.conversations.thread(first.conversation_id)
    assert [m.id for m in thread] == [first.user_message.id, first.answer.id, second.user_message.id, second.answer.id]
    assert second.answer.generation.prompt_tokens > first.answer.generation.prompt_tokens
    sent = history(store.conversations.thread(first.conversation_id, second.user_message.id))
    assert sent[1] == {"role": "assistant", "content": first.answer.content,
                       "attributes": first.answer.generation.attributes.steerlm()}


def closed_port_backend() -> OpenAICompatibleBackend:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return OpenAICompatibleBackend(f"http://127.0.0.1:{port}/v1", model="m", max_retries=0, timeout_s=5)


def test_backend_failure_keeps_the_question_and_logs_the_error(store):
    ctx = TurnContext(store=store, backend=closed_port_backend(), steering="instruct")
    turn = send(ctx, user_id="bob", text="Is anyone there?", attributes=Attributes(verbosity=0))
    with pytest.raises(BackendUnavailable, match="Cannot reach the model server"):
        turn.run()
    question, answer = store.conversations.get_messages(turn.conversation_id)
    assert question.content == "Is anyone there?" and question.status == "complete"
    assert answer.status == "error" and answer.content == "" and answer.parent_id == question.id
    assert answer.generation.finish_reason == "error" and "Cannot reach" in answer.generation.error
    assert answer.generation.backend == "openai" and answer.generation.attributes.verbosity == 0
    # A failed answer is not shown to the model next time.
    assert history(store.conversations.thread(turn.conversation_id)) == [{"role": "user", "content": "Is anyone there?"}]


def test_cancel_logs_the_partial_answer_as_interrupted(ctx, store):
    turn = send(ctx, user_id="carol", text="Tell me everything.", params=LONG)
    it = iter(turn)
    first = next(it)
    turn.cancel()
    rest = list(it)
    answer = turn.answer
    assert answer.status == "interrupted" and answer.content == first + "".join(rest)
    assert answer.generation.finish_reason == "cancelled" and answer.generation.completion_tokens < 50
    assert len(store.conversations.get_messages(turn.conversation_id)) == 2


def test_a_dropped_client_logs_the_answer_as_interrupted(ctx, store):
    turn = send(ctx, user_id="carol", text="Tell me more.", params=LONG)
    it = iter(turn)
    next(it)
    it.close()  # what Starlette does to a streaming response when the client disconnects
    assert turn.answer.status == "interrupted"
    assert store.conversations.get_message(turn.answer.id).generation.finish_reason == "cancelled"


def test_cancel_before_start_logs_an_empty_interrupted_answer(ctx, store):
    turn = send(ctx, user_id="carol", text="Never mind.", params=LONG)
    turn.cancel()
    assert list(turn) == []
    assert turn.answer.status == "interrupted" and turn.answer.content == ""


def test_regenerate_adds_an_answer_sibling_without_a_new_question(ctx, store):
    turn = send(ctx, user_id="dana", text="Should I move abroad?", params=SHORT)
    first = turn.run()
    again = regenerate(ctx, user_id="dana", message_id=first.id, attributes=Attributes(verbosity=4), params=SHORT)
    second = again.run()
    assert again.user_message.id == turn.user_message.id
    messages = store.conversations.get_messages(turn.conversation_id)
    assert [m.role for m in messages] == ["user", "assistant", "assistant"]
    assert second.parent_id == first.parent_id == turn.user_message.id
    assert {m.id for m in store.conversations.siblings(second.id)} == {first.id, second.id}
    assert second.generation.attributes.verbosity == 4
    assert store.conversations.thread(turn.conversation_id)[-1].id == second.id  # the newest sibling is current


def test_edit_adds_a_question_sibling_and_answers_it(ctx, store):
    first = send(ctx, user_id="erin", text="How do I stdy?", params=SHORT)
    first.run()
    follow = send(ctx, user_id="erin", text="Thanks", conversation_id=first.conversation_id, params=SHORT)
    follow.run()
    edited = edit(ctx, user_id="erin", message_id=follow.user_message.id, text="Thanks, and for maths?", params=SHORT)
    edited.run()
    assert edited.user_message.parent_id == follow.user_message.parent_id == first.answer.id
    assert {m.id for m in store.conversations.siblings(edited.user_message.id)} == {follow.user_message.id, edited.user_message.id}
    thread = store.conversations.thread(first.conversation_id)
    assert [m.content for m in thread][:3] == ["How do I stdy?", first.answer.content, "Thanks, and for maths?"]
    # Editing the very first question makes a second root.
    root_edit = edit(ctx, user_id="erin", message_id=first.user_message.id, text="How do I study?", params=SHORT)
    root_edit.run()
    assert root_edit.user_message.parent_id is None
    assert store.conversations.thread(first.conversation_id)[0].content == "How do I study?"


def test_another_users_conversation_is_not_found_and_nothing_is_written(ctx, store):
    mine = send(ctx, user_id="frank", text="My private question", params=SHORT)
    mine.run()
    before = row_counts(store)
    with pytest.raises(NotFound):
        send(ctx, user_id="mallory", text="hi", conversation_id=mine.conversation_id)
    with pytest.raises(NotFound):
        send(ctx, user_id="mallory", text="hi", parent_id=mine.answer.id)
    with pytest.raises(NotFound):
        regenerate(ctx, user_id="mallory", message_id=mine.answer.id)
    with pytest.raises(NotFound):
        edit(ctx, user_id="mallory", message_id=mine.user_message.id, text="hijack")
    with pytest.raises(NotFound):
        send(ctx, user_id="frank", text="hi", conversation_id="no-such-conversation")
    assert row_counts(store) == before


@pytest.mark.parametrize("text", ["", "   \n\t ", "\x00\x01", "x" * 501, None, 42])
def test_invalid_text_is_rejected_before_anything_is_written(ctx, store, text):
    before = row_counts(store)
    with pytest.raises(InvalidInput):
        send(ctx, user_id="gina", text=text)
    assert row_counts(store) == before


def test_a_forgotten_user_cannot_start_a_conversation(ctx, store):
    store.privacy.forget_user("henry")
    with pytest.raises(InvalidInput, match="deleted"):
        send(ctx, user_id="henry", text="I'm back")
    assert row_counts(store)["conversations"] == 0


def test_instruct_steering_is_logged(store, backend):
    ctx = TurnContext(store=store, backend=backend, steering="instruct")
    answer = send(ctx, user_id="ivan", text="Hello?", params=SHORT).run()
    assert answer.generation.steering == "instruct" and answer.generation.release_id is None


class _RecordingBackend:
    """Wraps a backend and keeps every generation it starts (or raises `refuse` at start)."""

    def __init__(self, inner, refuse: Exception | None = None) -> None:
        self.inner, self.refuse, self.started = inner, refuse, []
        self.kind, self.model, self.active_adapter = inner.kind, inner.model, inner.active_adapter

    def stream(self, messages, **kwargs):
        if self.refuse is not None:
            raise self.refuse
        gen = self.inner.stream(messages, **kwargs)
        self.started.append((messages, gen))
        return gen


def test_the_model_starts_on_the_question_while_it_is_stored(store, backend):
    """Submit starts generating before the question's commit (off the critical path) and returns
    only once the question is stored; the model got exactly the stored conversation."""
    rec = _RecordingBackend(backend)
    ctx = TurnContext(store=store, backend=rec, steering="steerlm", source="cli")
    first = send(ctx, user_id="gus", text="How do I save?", params=SHORT)
    assert [m.id for m in store.conversations.get_messages(first.conversation_id)] == [first.user_message.id]
    assert first.generation is rec.started[0][1]
    first.run()
    second = send(ctx, user_id="gus", text="And then?", conversation_id=first.conversation_id, params=SHORT)
    second.run()
    assert rec.started[1][0] == history(store.conversations.thread(first.conversation_id, second.user_message.id))


def test_a_question_that_cannot_be_stored_cancels_its_generation(store, backend):
    rec = _RecordingBackend(backend)
    ctx = TurnContext(store=store, backend=rec, steering="steerlm", source="cli")
    send(ctx, user_id="hal", text="Hello?", params=SHORT).run()
    store.privacy.forget_user("hal")
    before = row_counts(store)
    with pytest.raises(InvalidInput, match="deleted"):
        send(ctx, user_id="hal", text="Still there?", params=LONG)
    gen = rec.started[-1][1]
    assert gen.cancelled
    gen.read()  # returns at once: the worker stopped at its next token
    assert gen.finish_reason == "cancelled" and gen.completion_tokens < LONG.max_new_tokens
    assert row_counts(store) == before


def test_a_backend_that_refuses_at_start_still_keeps_the_question(store, backend):
    from chat.backends import BackendError

    ctx = TurnContext(store=store, backend=_RecordingBackend(backend, refuse=BackendError("The prompt is too long.")),
                      steering="steerlm", source="cli")
    turn = send(ctx, user_id="ivy", text="A question", params=SHORT)
    with pytest.raises(BackendError, match="too long"):
        turn.run()
    question, answer = store.conversations.get_messages(turn.conversation_id)
    assert question.content == "A question" and answer.status == "error" and "too long" in answer.generation.error
