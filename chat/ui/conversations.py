"""Chat-page handlers for the conversation list and the person's data: new, open, search, show
older, rename, delete one conversation (after asking), delete all my data, and "use my
conversations to improve the advisor". Deleting goes through the composition root's functions
(`UIDeps.forget`, `UIDeps.delete_conversation`), which reach every copy under the data directory.
"""


from __future__ import annotations

import gradio as gr

from chat.ui.layout import PAGE_SIZE, new_state
from chat.ui.render import (
    friendly_error,
)
from chat.ui.views import (
    ChatUI,
    conv_choices,
    notice,
    older_button,
    refuse,
    view_updates,
    who_or_notice,
)
from store import InvalidInput, NotFound

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
        ui.deps.store().conversations.get(conv_id, user_id=ident.user_id)
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
    counts = ui.deps.forget(ident.user_id)["deleted"] if ui.deps.forget else ui.deps.store().privacy.forget_user(ident.user_id)
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
        ui.deps.store().conversations.rename(st["conv"], ident.user_id, title or "")
    except (InvalidInput, NotFound) as exc:
        return gr.update(), notice(friendly_error(exc)), title
    return conv_choices(ui, ident.user_id, st["conv"]), notice("Renamed."), ""


def on_consent(ui: ChatUI, value: bool, request: gr.Request) -> dict:
    ident = ui.deps.identify(request)
    if ident is None:
        return notice("Your session has expired. Please reload the page.")
    ui.deps.store().users.set_training_consent(ident.user_id, bool(value))
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
            ui.deps.store().privacy.delete_conversation(st["conv"], ident.user_id)
    except NotFound as exc:
        return {**refuse(ui, st, None, friendly_error(exc), "not_found"), v.conv_confirm: gr.update(visible=False)}
    out = view_updates(ui, new_state(), ident.user_id, note="The conversation was deleted.")
    return {**out, v.convs: conv_choices(ui, ident.user_id), v.conv_confirm: gr.update(visible=False)}
