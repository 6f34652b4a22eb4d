"""Which event runs which handler, with which inputs and outputs: the chat tab's wiring.

Handlers are module-level functions of `(ui, *inputs)` (`chat.ui.handlers`); `bind` turns one
into the function Gradio calls. Gradio finds `gr.Request`, `gr.LikeData` and friends by the
parameters' type hints and streams when the function is a generator, so the bound function
keeps the handler's signature (minus `ui`), resolved hints and generator-ness. A
`functools.partial` would lose the hints and Gradio would not pass the request.
"""

from __future__ import annotations

import functools
import inspect
import typing
from collections.abc import Callable
from typing import Any

from chat.ui import conversations as c
from chat.ui import handlers as h
from chat.ui.handlers import ChatUI
from chat.ui.layout import PRIVACY_SEEN_JS

HIDDEN = {"api_visibility": "undocumented"}  # events are the UI's, not a public API
RELOAD_JS = "() => { setTimeout(() => window.location.reload(), 1200); }"


def bind(fn: Callable[..., Any], ui: ChatUI) -> Callable[..., Any]:
    """`fn` with its first argument (`ui`) filled in, as Gradio needs to see it."""
    signature = inspect.signature(fn)
    params = list(signature.parameters.values())[1:]
    hints = {k: v for k, v in typing.get_type_hints(fn).items() if k in {p.name for p in params} or k == "return"}
    if inspect.isgeneratorfunction(fn):
        def bound(*args: Any) -> Any:
            yield from fn(ui, *args)
    else:
        def bound(*args: Any) -> Any:
            return fn(ui, *args)
    functools.update_wrapper(bound, fn)
    del bound.__wrapped__  # let inspect/typing read the bound signature, not the handler's
    bound.__signature__ = signature.replace(parameters=params)
    bound.__annotations__ = hints
    return bound


def wire(ui: ChatUI) -> None:
    """Connect every chat-tab event to its handler."""
    v = ui.view
    b = functools.partial(bind, ui=ui)
    sliders = v.slider_list
    send = {"fn": b(h.on_send), "inputs": [v.box, v.state, *sliders], "outputs": v.thread_outputs, **HIDDEN}
    v.send.click(**send)
    v.box.submit(**send)
    v.chatbot.example_select(b(h.on_example), None, [v.box], queue=False, **HIDDEN)
    v.stop.click(b(h.on_stop), None, None, queue=False, **HIDDEN)
    v.chatbot.retry(b(h.on_retry), [v.state, *sliders], v.thread_outputs, **HIDDEN)
    v.chatbot.edit(b(h.on_edit), [v.state, *sliders], v.thread_outputs, **HIDDEN)
    v.chatbot.select(b(h.on_select), [v.state], v.thread_outputs, **HIDDEN)
    v.prev.click(b(h.on_prev), [v.state], v.thread_outputs, **HIDDEN)
    v.next.click(b(h.on_next), [v.state], v.thread_outputs, **HIDDEN)
    _wire_ratings(ui, b)
    _wire_conversations(ui, b)
    for name, handler in (("verbosity", h.on_verbosity), ("complexity", h.on_complexity)):
        v.sliders[name].change(b(handler), [v.sliders[name]], [v.previews[name]], queue=False,
                               show_progress="hidden", **HIDDEN)


def _wire_ratings(ui: ChatUI, b: Callable) -> None:
    v = ui.view
    v.chatbot.like(b(h.on_like), [v.state], v.rating_outputs, **HIDDEN)
    v.rating_save.click(b(h.on_rating_save), [v.state, v.reasons, v.comment], v.rating_outputs, **HIDDEN)
    v.rating_close.click(b(h.on_rating_close), [v.state], [v.state, v.rating_panel], queue=False, **HIDDEN)


def _wire_conversations(ui: ChatUI, b: Callable) -> None:
    v = ui.view
    v.new.click(b(c.on_new), [v.state], v.thread_outputs, **HIDDEN)
    # The chatbot's own trash icon deletes the conversation, after asking.
    v.chatbot.clear(b(c.on_conv_delete_ask), [v.state], [*v.thread_outputs, v.conv_confirm], **HIDDEN)
    v.conv_delete_no.click(b(c.on_conv_delete_no), [v.state], [v.conv_confirm], queue=False, **HIDDEN)
    v.conv_delete_yes.click(b(c.on_conv_delete_yes), [v.state], [*v.thread_outputs, v.conv_confirm], **HIDDEN)
    v.convs.input(b(c.on_open), [v.convs, v.state], v.thread_outputs, **HIDDEN)
    v.search.submit(b(c.on_search), [v.search, v.state], [v.convs, v.shown, v.older], **HIDDEN)
    v.search.change(b(c.on_search), [v.search, v.state], [v.convs, v.shown, v.older], show_progress="hidden",
                    trigger_mode="always_last", **HIDDEN)
    v.older.click(b(c.on_older), [v.search, v.shown, v.state], [v.convs, v.shown, v.older], **HIDDEN)
    v.rename.click(b(c.on_rename), [v.rename_box, v.state], [v.convs, v.notice, v.rename_box], **HIDDEN)
    v.rename_box.submit(b(c.on_rename), [v.rename_box, v.state], [v.convs, v.notice, v.rename_box], **HIDDEN)
    v.consent.input(b(c.on_consent), [v.consent], [v.notice], **HIDDEN)
    v.privacy_ok.click(None, None, None, js=PRIVACY_SEEN_JS, **HIDDEN)
    v.delete.click(b(c.on_delete_ask), None, [v.confirm_box], queue=False, **HIDDEN)
    v.confirm_no.click(b(c.on_delete_cancel), None, [v.confirm_box], queue=False, **HIDDEN)
    forget = v.confirm_yes.click(b(c.on_forget), [v.state], [v.state, v.chatbot, v.convs, v.confirm_box, v.notice],
                                 **HIDDEN)
    forget.then(None, None, None, js=RELOAD_JS)
