"""The chat tab's event handlers: module-level functions of `(ui, *inputs, request)`.

Design choices:
- The store is the source of truth. After every action the visible thread is rebuilt from
  `thread_view`; the chatbot's list is a rendering, and `state["ids"]` maps chatbot indices to
  message ids. A client can only send indices and a conversation it was shown, and every
  lookup is scoped to the user (`user_id=`), so another user's ids are simply not found.
- Identity comes from the signed session cookie on each event's request (`deps.identify`, the
  same resolver the REST API uses), never from anything the browser can put in the state.
- Turns go through `chat.turns` (validation, logging at submit and at the end) like every
  other surface. Stop cancels the session's in-flight turn, which stores it as interrupted.
- Problems are friendly notices (message too long, model down, not found), never tracebacks;
  the unsent text stays in the box.
- Sliders arrive as five named arguments in `store.attributes.NAMES` order.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from typing import Any

import gradio as gr

from chat import turns
from chat.backends.base import BackendError
from chat.inflight import ServiceClosing
from chat.notices import reference_for
from chat.threads import NEGATIVE_REASONS, POSITIVE_REASONS, descend, display_markdown, thread_view
from chat.turns import Turn
from chat.ui.layout import PAGE_SIZE, new_state
from chat.ui.render import (
    edited_text,
    friendly_error,
    level_line,
    render,
    who_line,
)
from chat.ui.views import (
    ChatUI,
    attributes_from,
    conv_choices,
    kind_of,
    message_at,
    notice,
    older_button,
    refuse,
    session_key,
    view_updates,
    who_or_notice,
)
from store import InvalidInput, NotFound
from store.attributes import InvalidAttributes

log = logging.getLogger("advisor.ui")

STREAM_EVERY_S = 0.05  # at most ~20 screen updates a second while streaming
REFUSED = (InvalidInput, InvalidAttributes, NotFound, ServiceClosing)


# --------------------------------------------------------------------------- streaming a turn


def stream(ui: ChatUI, turn: Turn, st: dict, ident: Any, request: gr.Request, *,
           new_conversation: bool) -> Iterator[dict]:
    """Stream `turn` into the chat, then show the stored result."""
    st = {**st, "conv": turn.conversation_id}
    prefix = thread_view(ui.deps.store(), turn.conversation_id, ident.user_id, leaf_id=turn.user_message.id)
    messages, feedback, ids = render(prefix)
    try:
        ui.deps.inflight.add(turn, session_key(ident, request))
    except ServiceClosing as exc:
        yield view_updates(ui, st, ident.user_id, leaf=turn.user_message.id, note=str(exc))
        return
    yield _first_frame(ui, st, ids, messages, feedback, ident, turn, new_conversation)
    note = yield from _deltas(ui, turn, messages)
    leaf = turn.answer.id if turn.answer is not None else turn.user_message.id
    yield view_updates(ui, st, ident.user_id, leaf=leaf, note=note)


def _first_frame(ui: ChatUI, st: dict, ids: list, messages: list, feedback: list, ident: Any, turn: Turn,
                 new_conversation: bool) -> dict:
    v = ui.view
    first = {v.state: {**st, "ids": ids + [None]},
             v.chatbot: gr.update(value=messages + [{"role": "assistant", "content": "…"}],
                                  feedback_value=feedback + [None]),
             v.notice: notice(None), v.box: "", v.send: gr.update(visible=False), v.stop: gr.update(visible=True),
             v.rating_panel: gr.update(visible=False), v.branch_bar: gr.update(visible=False)}
    if new_conversation:
        first[v.convs] = conv_choices(ui, ident.user_id, turn.conversation_id)
    return first


def _deltas(ui: ChatUI, turn: Turn, messages: list) -> Iterator[dict]:
    """Yield screen updates while the model writes (rate-limited); returns a notice or None."""
    note, last = None, 0.0
    try:
        for _ in turn:
            now = time.monotonic()
            if now - last >= STREAM_EVERY_S:
                last = now
                partial = {"role": "assistant", "content": display_markdown(turn.text) + " ▍"}
                yield {ui.view.chatbot: gr.update(value=messages + [partial])}
    except Exception as exc:  # stored as an error answer by the turn; say it kindly, log it in full
        ui.deps.hooks.on_error("backend" if isinstance(exc, BackendError) else "internal")
        note = friendly_error(exc, reference_for(turn))
    finally:
        ui.deps.inflight.remove(turn)
        try:
            ui.deps.hooks.on_turn("ui", turn)
        except Exception:
            log.exception("turn hook failed")
    return note


# --------------------------------------------------------------------------- page load


def on_load(ui: ChatUI, st: dict, request: gr.Request) -> dict:
    v = ui.view
    ident = ui.deps.identify(request)
    if ident is None:
        return {v.state: new_state(), v.who: "Your session could not be read. Please reload the page.",
                v.convs: gr.update(choices=[], value=None)}
    own = ui.deps.store().users.training_consent(ident.user_id)
    return {v.state: new_state(), v.shown: PAGE_SIZE, v.who: who_line(ident), v.convs: conv_choices(ui, ident.user_id),
            v.older: older_button(ui, ident.user_id, PAGE_SIZE),
            v.consent: gr.update(value=ui.deps.consent_default if own is None else own)}


# --------------------------------------------------------------------------- asking


def on_send(ui: ChatUI, text: str, st: dict, helpfulness: float, correctness: float, coherence: float,
            complexity: float, verbosity: float, request: gr.Request) -> Iterator[dict]:
    ident, problem = who_or_notice(ui, request)
    if problem:
        yield refuse(ui, st, text, problem, "session")
        return
    parent = st.get("leaf") if st.get("conv") else None
    try:
        attrs = attributes_from([helpfulness, correctness, coherence, complexity, verbosity])
        ctx = ui.deps.turn_context("ui")
        if st.get("conv"):
            ui.deps.store().conversations.get(st["conv"], user_id=ident.user_id)
        turn = turns.send(ctx, user_id=ident.user_id, text=text, conversation_id=st.get("conv"),
                          parent_id=parent, attributes=attrs, params=ui.deps.sampling())
    except REFUSED as exc:
        yield refuse(ui, st, text, friendly_error(exc), kind_of(exc))
        return
    if parent is not None:
        _keep(ui, parent, ident.user_id, st)
    yield from stream(ui, turn, st, ident, request, new_conversation=turn.new_conversation)


def on_example(ui: ChatUI, data: gr.SelectData) -> str:
    return data.value.get("text", "") if isinstance(data.value, dict) else str(data.value)


def on_stop(ui: ChatUI, request: gr.Request) -> None:
    ident = ui.deps.identify(request)
    if ident is not None:
        ui.deps.inflight.cancel(session_key(ident, request))


def on_retry(ui: ChatUI, st: dict, helpfulness: float, correctness: float, coherence: float, complexity: float,
             verbosity: float, data: gr.RetryData, request: gr.Request) -> Iterator[dict]:
    """The chatbot's regenerate button: another answer to the same question, a sibling."""
    ident, problem = who_or_notice(ui, request)
    if problem:
        yield refuse(ui, st, None, problem, "session")
        return
    ids = st.get("ids") or []
    target = message_at(st, data) or (ids[-1] if ids else None)
    if target is None:
        yield refuse(ui, st, None, "There is no answer to regenerate yet.", "invalid_input")
        return
    try:
        attrs = attributes_from([helpfulness, correctness, coherence, complexity, verbosity])
        turn = turns.regenerate(ui.deps.turn_context("ui"), user_id=ident.user_id, message_id=target,
                                attributes=attrs, params=ui.deps.sampling())
    except REFUSED as exc:
        yield refuse(ui, st, None, friendly_error(exc), "invalid_input")
        return
    yield from stream(ui, turn, st, ident, request, new_conversation=False)


def on_edit(ui: ChatUI, st: dict, helpfulness: float, correctness: float, coherence: float, complexity: float,
            verbosity: float, data: gr.EditData, request: gr.Request) -> Iterator[dict]:
    """An edited question becomes a sibling of the original, with its own answer."""
    ident, problem = who_or_notice(ui, request)
    if problem:
        yield refuse(ui, st, None, problem, "session")
        return
    target = message_at(st, data)
    if target is None:
        yield refuse(ui, st, None, "That message cannot be edited.", "invalid_input")
        return
    try:
        attrs = attributes_from([helpfulness, correctness, coherence, complexity, verbosity])
        turn = turns.edit(ui.deps.turn_context("ui"), user_id=ident.user_id, message_id=target,
                          text=edited_text(data.value), attributes=attrs, params=ui.deps.sampling())
    except REFUSED as exc:
        # The chatbot already shows the edited text: put the stored thread back.
        if st.get("conv"):
            yield view_updates(ui, st, ident.user_id, leaf=st.get("leaf"), note=friendly_error(exc))
        else:
            yield refuse(ui, st, None, friendly_error(exc), "invalid_input")
        return
    yield from stream(ui, turn, st, ident, request, new_conversation=False)


# --------------------------------------------------------------------------- branches: "‹ 2 / 3 ›"


def on_select(ui: ChatUI, st: dict, data: gr.SelectData, request: gr.Request) -> dict:
    ident = ui.deps.identify(request)
    target = message_at(st, data)
    if ident is None or target is None or not st.get("conv"):
        return {}
    return view_updates(ui, st, ident.user_id, leaf=st.get("leaf"), focus=target)


def _navigate(ui: ChatUI, st: dict, step: int, request: gr.Request) -> dict:
    ident, problem = who_or_notice(ui, request)
    if problem:
        return refuse(ui, st, None, problem, "session")
    view = next((x for x in st.get("views", []) if x["id"] == st.get("focus")), None)
    if view is None or not st.get("conv"):
        return {}
    sibs = view["siblings"]["ids"]
    pos = (view["siblings"]["index"] - 1 + step) % len(sibs)
    store = ui.deps.store()
    try:
        store.conversations.choose_sibling(sibs[pos], ident.user_id)  # the user keeps the one they move to
        leaf = descend(store, st["conv"], sibs[pos])
    except NotFound as exc:
        return refuse(ui, st, None, friendly_error(exc), "not_found")
    return view_updates(ui, st, ident.user_id, leaf=leaf, focus=sibs[pos])


def on_prev(ui: ChatUI, st: dict, request: gr.Request) -> dict:
    return _navigate(ui, st, -1, request)


def on_next(ui: ChatUI, st: dict, request: gr.Request) -> dict:
    return _navigate(ui, st, +1, request)


def _keep(ui: ChatUI, parent_id: str, user_id: str, st: dict) -> None:
    """Continuing from an answer (or question) that has siblings records it as the one kept."""
    view = next((x for x in st.get("views", []) if x["id"] == parent_id), None)
    if view and view["siblings"]["count"] > 1:
        try:
            ui.deps.store().conversations.choose_sibling(parent_id, user_id)
        except NotFound:
            pass


# --------------------------------------------------------------------------- like / dislike with reasons


def on_like(ui: ChatUI, st: dict, data: gr.LikeData, request: gr.Request) -> dict:
    v = ui.view
    ident, problem = who_or_notice(ui, request)
    if problem:
        return refuse(ui, st, None, problem, "session")
    target = message_at(st, data)
    if target is None:
        return {v.rating_panel: gr.update(visible=False)}
    # Clicking an active like (or dislike) again takes it back: a rating of 0, the latest counting.
    value = 1 if data.liked is True else -1 if data.liked is False else 0
    try:
        ui.deps.store().conversations.rate(target, ident.user_id, value)
    except (InvalidInput, NotFound) as exc:
        return refuse(ui, st, None, friendly_error(exc), "invalid_input")
    ui.deps.hooks.on_rating(value)
    if value == 0:
        out = view_updates(ui, {**st, "rate": None}, ident.user_id, leaf=st.get("leaf"), note="Your rating was taken back.")
        return {**out, v.rating_panel: gr.update(visible=False)}
    out = view_updates(ui, {**st, "rate": {"id": target, "value": value}}, ident.user_id, leaf=st.get("leaf"))
    out.update({
        v.rating_panel: gr.update(visible=True),
        v.rating_title: "**Thanks! What was good about it?**" if value > 0 else "**Sorry about that. What was wrong?**",
        v.reasons: gr.update(choices=list(POSITIVE_REASONS if value > 0 else NEGATIVE_REASONS), value=[]),
        v.comment: "",
    })
    return out


def on_rating_save(ui: ChatUI, st: dict, reasons: list[str], comment: str, request: gr.Request) -> dict:
    v = ui.view
    ident, problem = who_or_notice(ui, request)
    if problem:
        return refuse(ui, st, None, problem, "session")
    pending = st.get("rate")
    if not pending:
        return {v.rating_panel: gr.update(visible=False)}
    allowed = POSITIVE_REASONS if pending["value"] > 0 else NEGATIVE_REASONS
    reasons = [r for r in (reasons or []) if r in allowed]
    try:
        ui.deps.store().conversations.rate(pending["id"], ident.user_id, pending["value"], reasons=reasons, comment=comment or "")
    except (InvalidInput, NotFound) as exc:
        return refuse(ui, st, None, friendly_error(exc), "invalid_input")
    out = view_updates(ui, {**st, "rate": None}, ident.user_id, leaf=st.get("leaf"),
                       note="Thanks — your feedback was saved.")
    out.update({v.rating_panel: gr.update(visible=False), v.comment: ""})
    return out


def on_rating_close(ui: ChatUI, st: dict) -> tuple[dict, dict]:
    return {**st, "rate": None}, gr.update(visible=False)


# --------------------------------------------------------------------------- steering previews


def on_verbosity(ui: ChatUI, value: float) -> str:
    return level_line("verbosity", value)


def on_complexity(ui: ChatUI, value: float) -> str:
    return level_line("complexity", value)
