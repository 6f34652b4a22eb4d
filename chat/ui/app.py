"""The web UI (Gradio 6 Blocks): the chat tab everyone sees, and the operator tab for admins.

`build_ui(deps)` lays out the tabs, wires the chat tab (`chat.ui.events`) and chains the page
load: who you are, your conversations, and — for an admin — the operator tab, whose contents the
composition root builds (`UIDeps.operator_tab`), so `chat` never imports the operator screen.
Admin is checked on the server at every operator call; hiding the tab is a convenience only.
"""

from __future__ import annotations

import gradio as gr

from chat.ui.deps import UIDeps
from chat.ui.events import HIDDEN, bind, wire
from chat.ui.handlers import ChatUI, on_load
from chat.ui.layout import build_chat_tab


def build_ui(deps: UIDeps) -> gr.Blocks:
    with gr.Blocks(title="Advisor", fill_height=True, fill_width=True) as demo:
        with gr.Tabs(elem_id="tabs"):
            with gr.Tab("Chat", id="chat", elem_id="chat-tab"):
                ui = ChatUI(deps=deps, view=build_chat_tab())
                wire(ui)
            op_tab = gr.Tab("Operator", id="operator", visible=False, elem_id="operator-tab")
            with op_tab:
                refresh_operator = deps.operator_tab(deps.identify) if deps.operator_tab is not None else []
        load_chat = bind(on_load, ui)

        def load_page(st: dict, request: gr.Request) -> dict:
            ident = deps.identify(request)
            return {**load_chat(st, request), op_tab: gr.update(visible=bool(ident and ident.is_admin))}

        v = ui.view
        load = demo.load(load_page, [v.state], [v.state, v.who, v.convs, op_tab], **HIDDEN)
        for refresh in refresh_operator:
            load = load.then(**refresh)
    demo.queue(default_concurrency_limit=64)
    return demo
