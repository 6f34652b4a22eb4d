"""The UI's event handlers called directly, as a crafted request to Gradio's queue could call
them: identity comes from the request, never from the state, and another user's ids are refused."""

from __future__ import annotations

from types import SimpleNamespace

import gradio as gr
import pytest
from store_peek import peek

from chat.backends.base import SamplingParams
from chat.inflight import ChatHooks, InFlight
from chat.turns import TurnContext, send
from chat.ui.app import build_ui
from chat.ui.deps import UIDeps


@pytest.fixture(scope="module")
def backend(tiny_model_dir):
    from chat.backends.transformers_backend import TransformersBackend

    b = TransformersBackend(tiny_model_dir, device="cpu", local_files_only=True)
    yield b
    b.close()


@pytest.fixture
def ui(store, backend):
    people = {"alice": SimpleNamespace(user_id="alice", name=None, is_admin=False),
              "bob": SimpleNamespace(user_id="bob", name=None, is_admin=False)}
    deps = UIDeps(
        store=lambda: store,
        turn_context=lambda source: TurnContext(store=store, backend=backend, steering="steerlm", source=source),
        sampling=lambda **kw: SamplingParams(max_new_tokens=4),
        identify=lambda request: people.get(request.session_hash),
        inflight=InFlight(),
        hooks=ChatHooks(),
    )
    demo = build_ui(deps)
    handlers = {bf.fn.__name__: bf.fn for bf in demo.fns.values() if bf.fn is not None}
    return SimpleNamespace(demo=demo, handlers=handlers, store=store, backend=backend, deps=deps)


def _as(name: str) -> gr.Request:
    return gr.Request(session_hash=name)


def _notice(out: dict) -> str:
    for value in out.values():
        if isinstance(value, dict) and value.get("visible") and isinstance(value.get("value"), str):
            return value["value"]
    return ""


def _alice_turn(ui):
    ctx = ui.deps.turn_context("ui")
    turn = send(ctx, user_id="alice", text="Alice's private question")
    turn.run()
    return turn


def test_reopening_another_users_conversation_is_refused(ui):
    turn = _alice_turn(ui)
    out = ui.handlers["on_open"](turn.conversation_id, {"conv": None}, _as("bob"))
    assert "not available" in _notice(out)
    assert not any("Alice" in str(v) for v in out.values())
    mine = ui.handlers["on_open"](turn.conversation_id, {"conv": None}, _as("alice"))
    assert "Alice's private question" in str(mine)


def test_rating_or_choosing_another_users_answer_is_refused(ui):
    turn = _alice_turn(ui)
    forged = {"conv": turn.conversation_id, "leaf": turn.answer.id, "ids": [turn.user_message.id, turn.answer.id],
              "views": [], "focus": None, "rate": {"id": turn.answer.id, "value": 1}}
    like = gr.LikeData(None, {"index": 1, "value": "x", "liked": True})
    out = ui.handlers["on_like"](forged, like, _as("bob"))
    assert "not available" in _notice(out)
    out = ui.handlers["on_rating_save"](forged, ["clear"], "", _as("bob"))
    assert "not available" in _notice(out)
    assert ui.store.conversations.ratings(turn.answer.id) == []
    sibling = send(ui.deps.turn_context("ui"), user_id="alice", text="again",
                   conversation_id=turn.conversation_id)
    sibling.run()
    forged["views"] = [{"id": turn.answer.id, "siblings": {"index": 1, "count": 2,
                                                           "ids": [turn.answer.id, sibling.answer.id]}}]
    forged["focus"] = turn.answer.id
    out = ui.handlers["on_next"](forged, _as("bob"))
    assert "not available" in _notice(out)
    assert peek(ui.store, "SELECT count(*) FROM sibling_choices")[0][0] == 0


def test_sending_into_another_users_conversation_is_refused(ui):
    turn = _alice_turn(ui)
    before = len(ui.store.conversations.get_messages(turn.conversation_id))
    forged = {"conv": turn.conversation_id, "leaf": turn.answer.id, "ids": [], "views": [], "focus": None}
    outs = list(ui.handlers["on_send"]("hijack", forged, 4, 4, 4, 2, 2, _as("bob")))
    assert "not available" in _notice(outs[-1])
    assert len(ui.store.conversations.get_messages(turn.conversation_id)) == before


def test_no_session_cookie_means_no_action(ui):
    outs = list(ui.handlers["on_send"]("hello", {"conv": None}, 4, 4, 4, 2, 2, _as("stranger")))
    assert "reload" in _notice(outs[-1])
    assert ui.store.stats()["rows"]["messages"] == 0


def test_invalid_slider_values_are_a_notice(ui):
    outs = list(ui.handlers["on_send"]("hello", {"conv": None}, 4, 4, 4, 2, 9, _as("alice")))
    assert "between 0 and 4" in _notice(outs[-1])
    outs = list(ui.handlers["on_send"]("hello", {"conv": None}, 4, 4, 4, 2, "loud", _as("alice")))
    assert "whole numbers" in _notice(outs[-1])
    assert ui.store.stats()["rows"]["messages"] == 0
