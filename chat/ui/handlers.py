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
- Sliders arrive as five named arguments in `feedback.attributes.NAMES` order.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import gradio as gr

from chat import turns
from chat.backends.base import BackendError
from chat.inflight import ServiceClosing
from chat.notices import reference_for
from chat.threads import NEGATIVE_REASONS, POSITIVE_REASONS, descend, display_markdown, thread_view
from chat.turns import Turn
from chat.ui.deps import UIDeps
from chat.ui.layout import PAGE_SIZE, ChatView, new_state
from chat.ui.render import (
    branch_label,
    conversation_label,
    edited_text,
    focus_of,
    friendly_error,
    level_line,
    render,
    who_line,
)
from feedback.attributes import NAMES, Attributes, InvalidAttributes
from feedback.store import InvalidInput, NotFound

log = logging.getLogger("advisor.ui")

STREAM_EVERY_S = 0.05  # at most ~20 screen updates a second while streaming
REFUSED = (InvalidInput, InvalidAttributes, NotFound, ServiceClosing)


@dataclass
class ChatUI:
    """What every handler gets first: the composition root's dependencies and the components."""

    deps: UIDeps
    view: ChatView


# --------------------------------------------------------------------------- helpers


def notice(text: str | None) -> dict:
    return gr.update(value=text or "", visible=bool(text))


def who_or_notice(ui: ChatUI, request: gr.Request) -> tuple[Any, str | None]:
    ident = ui.deps.identify(request)
    if ident is None:
        return None, "Your session has expired or your data was deleted. Please reload the page."
    return ident, None


def conv_choices(ui: ChatUI, user_id: str, value: str | None = None, *, query: str | None = None,
                 limit: int = PAGE_SIZE) -> dict:
    """The conversation list: titles with their last activity, newest first, `limit` of them."""
    convs = ui.deps.store().list_conversations(user_id, limit=limit, query=query or None)
    choices = [(conversation_label(conv.title, conv.updated_at), conv.id) for conv in convs]
    label = f"Conversations matching “{query.strip()}”" if query and query.strip() else "Your conversations"
    return gr.update(choices=choices, value=value, label=label)


def older_button(ui: ChatUI, user_id: str, limit: int, query: str | None = None) -> dict:
    """"Show older" only while there is something older to show."""
    more = len(ui.deps.store().list_conversations(user_id, limit=limit + 1, query=query or None)) > limit
    return gr.update(visible=more)


def view_updates(ui: ChatUI, st: dict, user_id: str, *, leaf: str | None = None, focus: str | None = None,
                 refresh_list: bool = False, note: str | None = None) -> dict:
    """Re-read the visible thread from the store and produce every chat output."""
    v = ui.view
    views = thread_view(ui.deps.store(), st["conv"], user_id, leaf_id=leaf) if st["conv"] else []
    messages, feedback, ids = render(views)
    st = {**st, "ids": ids, "views": [x.as_dict() for x in views], "leaf": views[-1].id if views else None}
    st["focus"] = focus_of(views, focus or st.get("focus"))
    focused = next((x for x in views if x.id == st["focus"]), None)
    out = {
        v.state: st, v.chatbot: gr.update(value=messages, feedback_value=feedback), v.notice: notice(note),
        v.branch_bar: gr.update(visible=focused is not None),
        v.branch_label: branch_label(focused) if focused else "",
        v.send: gr.update(visible=True), v.stop: gr.update(visible=False),
    }
    if refresh_list:
        out[v.convs] = conv_choices(ui, user_id, st["conv"])
    return out


def refuse(ui: ChatUI, st: dict, text: str | None, note: str, kind: str) -> dict:
    """A notice instead of an action; what the user typed stays in the box."""
    ui.deps.hooks.on_error(kind)
    v = ui.view
    out = {v.state: st, v.notice: notice(note), v.send: gr.update(visible=True), v.stop: gr.update(visible=False)}
    if text is not None:
        out[v.box] = text
    return out


def attributes_from(values: list) -> Attributes:
    try:
        return Attributes(**{n: int(round(float(x))) for n, x in zip(NAMES, values)})
    except (TypeError, ValueError) as exc:
        raise InvalidAttributes(f"The steering values must be whole numbers from 0 to 4 ({exc}).") from None


def session_key(ident: Any, request: gr.Request) -> str:
    return f"{ident.user_id}:{getattr(request, 'session_hash', None) or 'ui'}"


def _index(data: Any) -> Any:
    return data.index[0] if isinstance(data.index, (list, tuple)) else data.index


def _message_at(st: dict, data: Any) -> str | None:
    ids = st.get("ids") or []
    idx = _index(data)
    return ids[idx] if isinstance(idx, int) and 0 <= idx < len(ids) else None


def _kind(exc: Exception) -> str:
    return "not_found" if isinstance(exc, NotFound) else "invalid_input"


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
    own = ui.deps.store().training_consent(ident.user_id)
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
            ui.deps.store().get_conversation(st["conv"], user_id=ident.user_id)
        turn = turns.send(ctx, user_id=ident.user_id, text=text, conversation_id=st.get("conv"),
                          parent_id=parent, attributes=attrs, params=ui.deps.sampling())
    except REFUSED as exc:
        yield refuse(ui, st, text, friendly_error(exc), _kind(exc))
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
    target = _message_at(st, data) or (ids[-1] if ids else None)
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
    target = _message_at(st, data)
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
    target = _message_at(st, data)
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
        store.choose_sibling(sibs[pos], ident.user_id)  # the user keeps the one they move to
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
            ui.deps.store().choose_sibling(parent_id, user_id)
        except NotFound:
            pass


# --------------------------------------------------------------------------- like / dislike with reasons


def on_like(ui: ChatUI, st: dict, data: gr.LikeData, request: gr.Request) -> dict:
    v = ui.view
    ident, problem = who_or_notice(ui, request)
    if problem:
        return refuse(ui, st, None, problem, "session")
    target = _message_at(st, data)
    if target is None:
        return {v.rating_panel: gr.update(visible=False)}
    # Clicking an active like (or dislike) again takes it back: a rating of 0, the latest counting.
    value = 1 if data.liked is True else -1 if data.liked is False else 0
    try:
        ui.deps.store().rate(target, ident.user_id, value)
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
        ui.deps.store().rate(pending["id"], ident.user_id, pending["value"], reasons=reasons, comment=comment or "")
    except (InvalidInput, NotFound) as exc:
        return refuse(ui, st, None, friendly_error(exc), "invalid_input")
    out = view_updates(ui, {**st, "rate": None}, ident.user_id, leaf=st.get("leaf"),
                       note="Thanks — your feedback was saved.")
    out.update({v.rating_panel: gr.update(visible=False), v.comment: ""})
    return out


def on_rating_close(ui: ChatUI, st: dict) -> tuple[dict, dict]:
    return {**st, "rate": None}, gr.update(visible=False)


# --------------------------------------------------------------------------- conversations


def on_new(ui: ChatUI, st: dict, request: gr.Request) -> dict:
    ident = ui.deps.identify(request)
    out = view_updates(ui, new_state(), ident.user_id if ident else "", note=None)
    out[ui.view.convs] = gr.update(value=None)
    out[ui.view.rating_panel] = gr.update(visible=False)
    return out


def on_open(ui: ChatUI, conv_id: str | None, st: dict, request: gr.Request) -> dict:
    ident, problem = who_or_notice(ui, request)
    if problem:
        return refuse(ui, st, None, problem, "session")
    if not conv_id:
        return {}
    try:
        ui.deps.store().get_conversation(conv_id, user_id=ident.user_id)
    except NotFound:
        return refuse(ui, st, None, "That conversation is not available (it may have been deleted).", "not_found")
    out = view_updates(ui, {**new_state(), "conv": conv_id}, ident.user_id)
    out[ui.view.rating_panel] = gr.update(visible=False)
    return out


# --------------------------------------------------------------------------- delete my data


def on_delete_ask(ui: ChatUI) -> dict:
    return gr.update(visible=True)


def on_delete_cancel(ui: ChatUI) -> dict:
    return gr.update(visible=False)


def on_forget(ui: ChatUI, st: dict, request: gr.Request) -> dict:
    v = ui.view
    ident, problem = who_or_notice(ui, request)
    if problem:
        return refuse(ui, st, None, problem, "session")
    if ident.is_admin and ident.user_id == "admin":
        return refuse(ui, st, None, "The operator account cannot delete itself here; use `advisor forget`.",
                      "invalid_input")
    ui.deps.inflight.cancel(ident.user_id)
    counts = ui.deps.forget(ident.user_id)["deleted"] if ui.deps.forget else ui.deps.store().forget_user(ident.user_id)
    n = sum(count for table, count in counts.items() if table != "users")
    return {v.state: new_state(), v.chatbot: gr.update(value=[], feedback_value=[]),
            v.convs: gr.update(choices=[], value=None), v.confirm_box: gr.update(visible=False),
            v.notice: notice(f"Your data was deleted ({n} records). Starting a fresh session…")}


# --------------------------------------------------------------------------- the conversation list


def on_search(ui: ChatUI, query: str, st: dict, request: gr.Request) -> tuple:
    ident = ui.deps.identify(request)
    if ident is None:
        return gr.update(), PAGE_SIZE, gr.update(visible=False)
    return (conv_choices(ui, ident.user_id, st.get("conv"), query=query), PAGE_SIZE,
            older_button(ui, ident.user_id, PAGE_SIZE, query))


def on_older(ui: ChatUI, query: str, shown: int, st: dict, request: gr.Request) -> tuple:
    ident = ui.deps.identify(request)
    if ident is None:
        return gr.update(), shown, gr.update(visible=False)
    shown = int(shown or PAGE_SIZE) + PAGE_SIZE
    return (conv_choices(ui, ident.user_id, st.get("conv"), query=query, limit=shown), shown,
            older_button(ui, ident.user_id, shown, query))


def on_rename(ui: ChatUI, title: str, st: dict, request: gr.Request) -> tuple:
    ident, problem = who_or_notice(ui, request)
    if problem or not st.get("conv"):
        return gr.update(), notice(problem or "Open a conversation first, then rename it."), title
    try:
        ui.deps.store().rename_conversation(st["conv"], ident.user_id, title or "")
    except (InvalidInput, NotFound) as exc:
        return gr.update(), notice(friendly_error(exc)), title
    return conv_choices(ui, ident.user_id, st["conv"]), notice("Renamed."), ""


def on_consent(ui: ChatUI, value: bool, request: gr.Request) -> dict:
    ident = ui.deps.identify(request)
    if ident is None:
        return notice("Your session has expired. Please reload the page.")
    ui.deps.store().set_training_consent(ident.user_id, bool(value))
    return notice("Your conversations may be used to improve the advisor (personal data removed first)." if value
                  else "Your conversations will not be used to improve the advisor.")


def on_conv_delete_ask(ui: ChatUI, st: dict, request: gr.Request) -> dict:
    """The chatbot's trash icon: ask first, and put the thread back on screen meanwhile."""
    ident = ui.deps.identify(request)
    if ident is None or not st.get("conv"):
        return {**on_new(ui, st, request), ui.view.conv_confirm: gr.update(visible=False)}
    out = view_updates(ui, st, ident.user_id, leaf=st.get("leaf"))
    return {**out, ui.view.conv_confirm: gr.update(visible=True)}


def on_conv_delete_no(ui: ChatUI, st: dict) -> dict:
    return gr.update(visible=False)


def on_conv_delete_yes(ui: ChatUI, st: dict, request: gr.Request) -> dict:
    v = ui.view
    ident, problem = who_or_notice(ui, request)
    if problem or not st.get("conv"):
        return {**refuse(ui, st, None, problem or "There is no conversation open.", "invalid_input"),
                v.conv_confirm: gr.update(visible=False)}
    try:
        if ui.deps.delete_conversation:
            ui.deps.delete_conversation(st["conv"], ident.user_id)
        else:
            ui.deps.store().delete_conversation(st["conv"], ident.user_id)
    except NotFound as exc:
        return {**refuse(ui, st, None, friendly_error(exc), "not_found"), v.conv_confirm: gr.update(visible=False)}
    out = view_updates(ui, new_state(), ident.user_id, note="The conversation was deleted.")
    return {**out, v.convs: conv_choices(ui, ident.user_id), v.conv_confirm: gr.update(visible=False)}


# --------------------------------------------------------------------------- steering previews


def on_verbosity(ui: ChatUI, value: float) -> str:
    return level_line("verbosity", value)


def on_complexity(ui: ChatUI, value: float) -> str:
    return level_line("complexity", value)
