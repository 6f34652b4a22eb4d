"""What every chat-page handler writes back: the redrawn thread, notices, refusals, the
conversation list; and `ChatUI`, the first argument of every handler (`chat.ui.handlers`,
`chat.ui.conversations`).

The store is the source of truth: after every action the visible thread is rebuilt from
`thread_view`; `state["ids"]` maps chatbot indices to message ids, and every lookup is scoped to
the user, so another user's ids are simply not found.
"""


from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

import gradio as gr

from chat.inflight import ServiceClosing
from chat.threads import thread_view
from chat.ui.deps import UIDeps
from chat.ui.layout import PAGE_SIZE, ChatView
from chat.ui.render import (
    branch_label,
    conversation_label,
    focus_of,
    render,
)
from store import InvalidInput, NotFound
from store.attributes import NAMES, Attributes, InvalidAttributes

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
    convs = ui.deps.store().conversations.list(user_id, limit=limit, query=query or None)
    choices = [(conversation_label(conv.title, conv.updated_at), conv.id) for conv in convs]
    label = f"Conversations matching “{query.strip()}”" if query and query.strip() else "Your conversations"
    return gr.update(choices=choices, value=value, label=label)


def older_button(ui: ChatUI, user_id: str, limit: int, query: str | None = None) -> dict:
    """"Show older" only while there is something older to show."""
    more = len(ui.deps.store().conversations.list(user_id, limit=limit + 1, query=query or None)) > limit
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


def message_at(st: dict, data: Any) -> str | None:
    ids = st.get("ids") or []
    idx = _index(data)
    return ids[idx] if isinstance(idx, int) and 0 <= idx < len(ids) else None


def kind_of(exc: Exception) -> str:
    return "not_found" if isinstance(exc, NotFound) else "invalid_input"
