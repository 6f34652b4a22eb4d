"""The OpenAI-compatible API, driven by the official `openai` client against the real service."""

from __future__ import annotations

import openai
import pytest
from service_helpers import ADMIN_TOKEN, live  # noqa: F401


def _client(live, key: str = "sk-test-alice") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{live.url}/v1", api_key=key, max_retries=0, timeout=120)


def _conversations(live, key: str) -> list:
    ident = live.services.auth.from_bearer(key)
    return live.store.conversations.list(ident.user_id)


def test_models_lists_the_advisor(live):
    ids = [m.id for m in _client(live).models.list()]
    assert "advisor" in ids and live.services.backend.model in ids


def test_non_streaming_chat_is_stored_as_one_growing_conversation(live):
    key = "sk-growing"
    client = _client(live, key)
    messages = [{"role": "system", "content": "You give practical advice."},
                {"role": "user", "content": "I can't sleep before exams."}]
    first = client.chat.completions.create(model="advisor", messages=messages, max_tokens=6)
    answer = first.choices[0].message.content
    assert first.choices[0].finish_reason in ("stop", "length")
    assert first.usage.completion_tokens > 0 and first.usage.prompt_tokens > 0
    conv_id = first.model_extra["conversation_id"]
    stored = live.store.conversations.get_message(first.model_extra["message_id"])
    assert stored.content == answer and stored.generation.max_new_tokens == 6

    messages += [{"role": "assistant", "content": answer}, {"role": "user", "content": "Any quick tips?"}]
    second = client.chat.completions.create(model="advisor", messages=messages, max_tokens=6)
    assert second.model_extra["conversation_id"] == conv_id  # matched by history prefix
    thread = live.store.conversations.thread(conv_id)
    assert [m.role for m in thread] == ["system", "user", "assistant", "user", "assistant"]
    assert [c.id for c in _conversations(live, key)] == [conv_id]
    assert all(c.source == "openai" for c in _conversations(live, key))


def test_streaming_chat_with_attributes_is_stored(live):
    client = _client(live, "sk-stream")
    stream = client.chat.completions.create(
        model="advisor", messages=[{"role": "user", "content": "How do I say no to extra work?"}],
        stream=True, max_tokens=8, stream_options={"include_usage": True},
        extra_body={"attributes": {"verbosity": 0, "complexity": 4}},
    )
    chunks = list(stream)
    text = "".join(ch.choices[0].delta.content or "" for ch in chunks if ch.choices)
    finals = [ch for ch in chunks if ch.choices and ch.choices[0].finish_reason]
    assert finals and chunks[-1].usage is not None and chunks[-1].usage.completion_tokens > 0
    message_id = finals[0].model_extra["message_id"]
    stored = live.store.conversations.get_message(message_id)
    assert stored.content == text and stored.status == "complete"
    assert (stored.generation.attributes.verbosity, stored.generation.attributes.complexity) == (0, 4)


def test_resending_the_same_question_regenerates_as_a_sibling(live):
    client = _client(live, "sk-regen")
    msgs = [{"role": "user", "content": "Should I adopt a dog?"}]
    a = client.chat.completions.create(model="advisor", messages=msgs, max_tokens=4)
    b = client.chat.completions.create(model="advisor", messages=msgs, max_tokens=4,
                                       metadata={"conversation_id": a.model_extra["conversation_id"]})
    assert a.model_extra["conversation_id"] == b.model_extra["conversation_id"]
    first, second = (live.store.conversations.get_message(x.model_extra["message_id"]) for x in (a, b))
    assert first.parent_id == second.parent_id
    assert len(live.store.conversations.siblings(second.id)) == 2


def test_openai_verbosity_maps_to_the_attribute(live):
    r = _client(live, "sk-verb").chat.completions.create(
        model="advisor", messages=[{"role": "user", "content": "Quick one: tea or coffee?"}],
        max_tokens=3, verbosity="low")
    assert live.store.conversations.get_message(r.model_extra["message_id"]).generation.attributes.verbosity == 1


def test_users_are_isolated_by_key_and_bad_requests_are_clear(live):
    alice, bob = _client(live, "sk-iso-alice"), _client(live, "sk-iso-bob")
    a = alice.chat.completions.create(model="advisor", messages=[{"role": "user", "content": "secret plan"}],
                                      max_tokens=3)
    conv = a.model_extra["conversation_id"]
    before = live.store.stats()["rows"]
    with pytest.raises(openai.NotFoundError):
        bob.chat.completions.create(model="advisor", messages=[{"role": "user", "content": "x"}],
                                    metadata={"conversation_id": conv})
    with pytest.raises(openai.BadRequestError, match="between 0 and 4"):
        bob.chat.completions.create(model="advisor", messages=[{"role": "user", "content": "x"}],
                                    extra_body={"attributes": {"verbosity": 11}})
    with pytest.raises(openai.BadRequestError, match="empty"):
        bob.chat.completions.create(model="advisor", messages=[{"role": "user", "content": "  "}])
    with pytest.raises(openai.BadRequestError, match="last message"):
        bob.chat.completions.create(model="advisor", messages=[{"role": "assistant", "content": "hello"}])
    with pytest.raises(openai.BadRequestError, match="n=1"):
        bob.chat.completions.create(model="advisor", messages=[{"role": "user", "content": "x"}], n=2)
    with pytest.raises(openai.APIStatusError) as too_long:
        bob.chat.completions.create(model="advisor", messages=[{"role": "user", "content": "y" * 200_000}])
    assert too_long.value.status_code == 413
    assert live.store.stats()["rows"] == before
    # The same history sent by Bob does not land in Alice's conversation.
    b = bob.chat.completions.create(model="advisor", messages=[
        {"role": "user", "content": "secret plan"}, {"role": "assistant", "content": a.choices[0].message.content},
        {"role": "user", "content": "more"}], max_tokens=3)
    assert b.model_extra["conversation_id"] != conv
    assert len(live.store.conversations.get_messages(conv)) == 2


def test_admin_token_is_the_operator_on_v1_too(live):
    r = _client(live, ADMIN_TOKEN).chat.completions.create(
        model="advisor", messages=[{"role": "user", "content": "status?"}], max_tokens=2)
    assert live.store.conversations.get(r.model_extra["conversation_id"]).user_id == "admin"
