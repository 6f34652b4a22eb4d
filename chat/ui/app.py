"""The chat page (Gradio 6 Blocks) that everyone sees at `/`.

`build_ui(deps)` lays out the page (`chat.ui.layout`), wires its events (`chat.ui.events`) and
loads, per visitor: who you are and your conversations. The operator screen is a page of its own
(`/operator`, built by `deploy.operator`), linked from the who-line for admins, so the chat stays
one screen on a phone and `chat` never imports the operator screen.
"""

from __future__ import annotations

import gradio as gr

from chat.ui.deps import UIDeps
from chat.ui.events import HIDDEN, bind, wire
from chat.ui.handlers import ChatUI, on_load
from chat.ui.layout import OPEN_DRAWERS_JS, build_chat_page


def build_ui(deps: UIDeps) -> gr.Blocks:
    with gr.Blocks(title="Advisor", fill_height=True, fill_width=True) as demo:
        ui = ChatUI(deps=deps, view=build_chat_page(deps.privacy_notice))
        wire(ui)
        v = ui.view
        demo.load(bind(on_load, ui), [v.state], [v.state, v.shown, v.who, v.convs, v.older, v.consent],
                  js=OPEN_DRAWERS_JS, **HIDDEN)
    demo.queue(default_concurrency_limit=64)
    return demo
