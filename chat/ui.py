"""The chat UI (Gradio 6 Blocks): what end users see.

Layout (DESIGN.md, "Screens"): a sidebar (new chat, the user's own conversations titled by their
first question, delete my data), the conversation in the middle (streaming answers; copy, like,
dislike with reason chips, regenerate; edit of a question; "‹ 2 / 3 ›" on answers that have
siblings and a branch bar to move between them; stop), and the steering panel at the side
(verbosity and complexity with a one-line preview of each level, the other attributes under "More").

Design choices:
- The store is the source of truth. After every action the visible thread is rebuilt from
  `thread_view`; the chatbot's list is a rendering, and `state["ids"]` maps chatbot indices to
  message ids. A client can only send indices and a conversation it was shown, and every
  lookup is scoped to the user (`user_id=`), so another user's ids are simply not found.
- Identity comes from the signed session cookie on each event's request (`deps.identify`, the
  same resolver the REST API uses), never from anything the browser can put in the state.
- Turns go through `chat.turns` (validation, logging at submit and at the end) like every
  other surface. Stop cancels the session's in-flight turn, which stores it as interrupted.
- Text from both sides is Markdown with HTML neutralised (`display_markdown`), and the
  Chatbot's sanitizer stays on: a `<script>` or `onerror=` payload shows as text.
- Problems are friendly notices (message too long, model down, not found), never tracebacks;
  the unsent text stays in the box.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import gradio as gr

from chat import turns
from chat.backends.base import BackendError, BackendUnavailable, SamplingParams
from chat.turns import Turn, TurnContext
from chat.ui_common import (NEGATIVE_REASONS, POSITIVE_REASONS, ChatHooks, InFlight, MessageView, ServiceClosing,
                            descend, display_markdown, thread_view)
from feedback.attributes import LEVEL_WORDS, NAMES, Attributes, InvalidAttributes
from feedback.store import InvalidInput, NotFound, Store

log = logging.getLogger("advisor.ui")

STREAM_EVERY_S = 0.05  # at most ~20 screen updates a second while streaming
EXAMPLES = [
    "My roommate never does the dishes. How do I bring it up without a fight?",
    "I got a job offer with more pay but a longer commute. How should I decide?",
    "How can I stop procrastinating on my thesis?",
]

CSS = """
#sidebar { border-right: 1px solid var(--border-color-primary); padding-right: 8px; }
#conversations .wrap { flex-direction: column; align-items: stretch; }
#conversations label { width: 100%; justify-content: flex-start; }
#notice { border-left: 4px solid var(--color-accent); padding: 4px 10px; background: var(--background-fill-secondary); }
#branch-bar { align-items: center; justify-content: flex-start; gap: 8px; }
#branch-bar button { max-width: 44px; min-width: 36px; flex: 0 0 auto; }
#branch-label { flex: 0 0 auto !important; width: auto !important; min-width: 0 !important; }
#branch-label p { margin: 0; }
.feedback-sample { width: 100%; font-size: 0.9em; }
.feedback-sample td { vertical-align: top; padding: 2px 6px; }
.feedback-sample mark { background: #ffe28a; padding: 0 2px; border-radius: 3px; }
.level-preview p { margin: -6px 0 8px 0; color: var(--body-text-color-subdued); font-size: 0.9em; }
#who p { margin: 0; }
"""


@dataclass
class UIDeps:
    """What the UI needs from the composition root (deploy); all late-bound, because the store
    and backend are opened by the service's lifespan after the UI is built."""

    store: Callable[[], Store]
    turn_context: Callable[[str], TurnContext]  # source → context
    sampling: Callable[..., SamplingParams]
    identify: Callable[[Any], Any]  # gr.Request → Identity (user_id, name, is_admin) | None
    inflight: InFlight
    hooks: ChatHooks
    max_message_chars: int = 8000
    operator: Any = None  # chat.ui_operator.OperatorDeps | None


def _new_state() -> dict:
    return {"conv": None, "leaf": None, "ids": [], "views": [], "focus": None, "rate": None}


# --------------------------------------------------------------------------- rendering


def friendly_error(exc: BaseException | str) -> str:
    text = str(exc)
    if isinstance(exc, BackendUnavailable):
        return f"The model is not available right now. Please try again in a minute. ({text})"
    if isinstance(exc, BackendError):
        return f"The model could not finish this answer. Try again, or rephrase. ({text})"
    if isinstance(exc, NotFound):
        return "That conversation or message is not available (it may have been deleted). Start a new chat."
    if isinstance(exc, (ServiceClosing, InvalidInput, InvalidAttributes)):
        return text
    return "Something went wrong on our side and it was logged. Please try again."


def _answer_footer(v: MessageView) -> str:
    parts = []
    if v.sibling_count > 1:
        parts.append(f"‹ {v.sibling_index + 1} / {v.sibling_count} ›")
    if v.rating:
        # Words, not only an emoji: the reasons must read right in every font and screen reader.
        verdict = "Liked" if v.rating["value"] > 0 else "Disliked"
        reasons = ", ".join(v.rating["reasons"])
        parts.append(f"{verdict}: {reasons}" if reasons else verdict)
    return ("\n\n<sub>" + " &nbsp; ".join(p.replace("<", "&lt;") for p in parts) + "</sub>") if parts else ""


def _assistant_text(v: MessageView) -> str:
    if v.status == "error":
        err = (v.generation or {}).get("error") or "unknown error"
        body = f"⚠️ *The model could not answer this time.* Use regenerate to try again.\n\n<sub>{display_markdown(err)}</sub>"
        return body
    body = display_markdown(v.content) if v.content else "*(no answer)*"
    if v.status == "interrupted":
        body += "\n\n*— stopped*"
    return body + _answer_footer(v)


def render(views: list[MessageView]) -> tuple[list[dict], list[str | None], list[str]]:
    """(chatbot messages, feedback_value per answer, message ids per chatbot index)."""
    messages, feedback, ids = [], [], []
    for v in views:
        if v.role == "system":
            continue  # system prompts (from API clients) are not part of the visible chat
        if v.role == "user":
            messages.append({"role": "user", "content": display_markdown(v.content)})
        else:
            messages.append({"role": "assistant", "content": _assistant_text(v)})
            value = (v.rating or {}).get("value")
            feedback.append("Like" if value == 1 else "Dislike" if value == -1 else None)
        ids.append(v.id)
    return messages, feedback, ids


def _focus(views: list[MessageView], preferred: str | None = None) -> str | None:
    """The message the branch bar is about: the preferred one if it has siblings, else the
    deepest message in the thread that has siblings."""
    with_sibs = [v for v in views if v.sibling_count > 1 and v.role != "system"]
    if preferred and any(v.id == preferred for v in with_sibs):
        return preferred
    return with_sibs[-1].id if with_sibs else None


def _branch_label(v: MessageView) -> str:
    what = "Answer" if v.role == "assistant" else "Your question, version"
    return (f"**{what} {v.sibling_index + 1} / {v.sibling_count}** "
            "<sub>— the one you stay on is kept</sub>")


def level_line(name: str, value: Any) -> str:
    try:
        level = int(round(float(value)))
        return f"{level} — {LEVEL_WORDS[name][level]}"
    except (ValueError, TypeError, IndexError):
        return ""


# --------------------------------------------------------------------------- the app


def build_ui(deps: UIDeps) -> gr.Blocks:
    with gr.Blocks(title="Advisor", fill_height=True, fill_width=True) as demo:
        state = gr.State(_new_state())
        with gr.Tabs(elem_id="tabs"):
            with gr.Tab("Chat", id="chat", elem_id="chat-tab"):
                c = _chat_tab(deps, state)
            op_tab = gr.Tab("Operator", id="operator", visible=False, elem_id="operator-tab")
            with op_tab:
                refresh_operator: list[dict] = []
                if deps.operator is not None:
                    from chat.ui_operator import build_operator

                    refresh_operator = build_operator(deps.operator, deps.identify)

        def on_load(st: dict, request: gr.Request):
            ident = deps.identify(request)
            st = _new_state()
            if ident is None:
                return {state: st, c["who"]: "Your session could not be read. Please reload the page.",
                        c["convs"]: gr.update(choices=[], value=None), op_tab: gr.update(visible=False)}
            return {state: st, c["who"]: _who(ident), c["convs"]: _conv_choices(deps, ident.user_id),
                    op_tab: gr.update(visible=bool(ident.is_admin))}

        load = demo.load(on_load, [state], [state, c["who"], c["convs"], op_tab], api_visibility="undocumented")
        for refresh in refresh_operator:
            load = load.then(**refresh)
    demo.queue(default_concurrency_limit=64)
    return demo


def _who(ident: Any) -> str:
    if getattr(ident, "name", None):
        role = " (operator)" if ident.is_admin else ""
        return f"Signed in as **{ident.name.replace('<', '&lt;')}**{role} · [Sign out](/signout)"
    return "Chatting as a guest · [Sign in](/signin)"


def _conv_choices(deps: UIDeps, user_id: str, value: str | None = None):
    convs = deps.store().list_conversations(user_id, limit=200)
    choices = [((conv.title or "New conversation")[:60], conv.id) for conv in convs]
    return gr.update(choices=choices, value=value)


def _chat_tab(deps: UIDeps, state: gr.State) -> dict:
    c: dict[str, Any] = {}
    with gr.Row(equal_height=False):
        with gr.Column(scale=1, min_width=220, elem_id="sidebar"):
            c["who"] = gr.Markdown(elem_id="who")
            c["new"] = gr.Button("+ New chat", elem_id="new-chat", variant="secondary")
            c["convs"] = gr.Radio(label="Your conversations", choices=[], elem_id="conversations",
                                  interactive=True)
            c["delete"] = gr.Button("Delete my data", variant="stop", size="sm", elem_id="delete-data")
            with gr.Group(visible=False, elem_id="delete-confirm") as c["confirm_box"]:
                gr.Markdown("**Delete all your data?** Every conversation, answer and rating of yours is "
                            "removed for good and never used for training. This cannot be undone.")
                with gr.Row():
                    c["confirm_yes"] = gr.Button("Yes, delete everything", variant="stop", elem_id="delete-yes")
                    c["confirm_no"] = gr.Button("Cancel", elem_id="delete-no")
        with gr.Column(scale=4, elem_id="main"):
            c["notice"] = gr.Markdown(visible=False, elem_id="notice")
            c["chatbot"] = gr.Chatbot(
                elem_id="chatbot", height="62vh", editable="user", sanitize_html=True, allow_tags=False,
                render_markdown=True, feedback_options=("Like", "Dislike"), group_consecutive_messages=False,
                buttons=["copy"], layout="bubble", show_label=False,
                placeholder="**Ask for advice** on an everyday dilemma. Steer the answer with the sliders on the right.",
                examples=[{"text": e} for e in EXAMPLES],
            )
            with gr.Row(visible=False, elem_id="branch-bar") as c["branch_bar"]:
                c["prev"] = gr.Button("◀", size="sm", elem_id="branch-prev", scale=0)
                c["branch_label"] = gr.Markdown(elem_id="branch-label")
                c["next"] = gr.Button("▶", size="sm", elem_id="branch-next", scale=0)
            with gr.Group(visible=False, elem_id="rating-panel") as c["rating_panel"]:
                c["rating_title"] = gr.Markdown(elem_id="rating-title")
                c["reasons"] = gr.CheckboxGroup(choices=list(NEGATIVE_REASONS), label="Reasons", elem_id="reasons")
                c["comment"] = gr.Textbox(label="Comment (optional)", lines=1, elem_id="rating-comment")
                with gr.Row():
                    c["rating_save"] = gr.Button("Send feedback", variant="primary", size="sm", elem_id="rating-save")
                    c["rating_close"] = gr.Button("Close", size="sm", elem_id="rating-close")
            with gr.Row(equal_height=True):
                c["box"] = gr.Textbox(placeholder="Describe your situation…", show_label=False, lines=2,
                                      max_lines=12, scale=8, elem_id="input", autofocus=True)
                c["send"] = gr.Button("Send", variant="primary", scale=1, elem_id="send")
                c["stop"] = gr.Button("Stop", variant="stop", scale=1, visible=False, elem_id="stop")
        with gr.Column(scale=1, min_width=240, elem_id="steering"):
            gr.Markdown("#### Steer the answer")
            c["verbosity"] = gr.Slider(0, 4, value=2, step=1, label="Verbosity (length)", elem_id="verbosity")
            c["verbosity_preview"] = gr.Markdown(level_line("verbosity", 2), elem_classes=["level-preview"],
                                                 elem_id="verbosity-preview")
            c["complexity"] = gr.Slider(0, 4, value=2, step=1, label="Complexity (language)", elem_id="complexity")
            c["complexity_preview"] = gr.Markdown(level_line("complexity", 2), elem_classes=["level-preview"],
                                                  elem_id="complexity-preview")
            with gr.Accordion("More", open=False, elem_id="more"):
                for name in ("helpfulness", "correctness", "coherence"):
                    c[name] = gr.Slider(0, 4, value=4, step=1, label=name.capitalize(), elem_id=name)
    _wire(deps, state, c)
    return c


# --------------------------------------------------------------------------- event handlers


def _wire(deps: UIDeps, state: gr.State, c: dict) -> None:  # noqa: C901 — one place for all events
    sliders = [c[n] for n in NAMES]
    chat_outputs = [state, c["chatbot"], c["notice"], c["branch_bar"], c["branch_label"], c["convs"],
                    c["box"], c["send"], c["stop"], c["rating_panel"]]
    hidden = {"api_visibility": "undocumented"}

    def notice(text: str | None) -> dict:
        return gr.update(value=text or "", visible=bool(text))

    def who_or_notice(request: gr.Request):
        ident = deps.identify(request)
        if ident is None:
            return None, "Your session has expired or your data was deleted. Please reload the page."
        return ident, None

    def view_updates(st: dict, user_id: str, *, leaf: str | None = None, focus: str | None = None,
                     refresh_list: bool = False, note: str | None = None) -> dict:
        """Re-read the visible thread from the store and produce every chat output."""
        store = deps.store()
        views = thread_view(store, st["conv"], user_id, leaf_id=leaf) if st["conv"] else []
        messages, feedback, ids = render(views)
        st = {**st, "ids": ids, "views": [v.as_dict() for v in views],
              "leaf": views[-1].id if views else None}
        st["focus"] = _focus(views, focus or st.get("focus"))
        focused = next((v for v in views if v.id == st["focus"]), None)
        out = {
            state: st,
            c["chatbot"]: gr.update(value=messages, feedback_value=feedback),
            c["notice"]: notice(note),
            c["branch_bar"]: gr.update(visible=focused is not None),
            c["branch_label"]: _branch_label(focused) if focused else "",
            c["send"]: gr.update(visible=True),
            c["stop"]: gr.update(visible=False),
        }
        if refresh_list:
            out[c["convs"]] = _conv_choices(deps, user_id, st["conv"])
        return out

    def attributes_from(values: list) -> Attributes:
        try:
            return Attributes(**{n: int(round(float(v))) for n, v in zip(NAMES, values)})
        except (TypeError, ValueError) as exc:
            raise InvalidAttributes(f"The steering values must be whole numbers from 0 to 4 ({exc}).") from None

    def session_key(ident: Any, request: gr.Request) -> str:
        return f"{ident.user_id}:{getattr(request, 'session_hash', None) or 'ui'}"

    def stream(turn: Turn, st: dict, ident: Any, request: gr.Request, *, new_conversation: bool) -> Iterator[dict]:
        """Stream `turn` into the chat, then show the stored result."""
        st = {**st, "conv": turn.conversation_id}
        prefix = thread_view(deps.store(), turn.conversation_id, ident.user_id, leaf_id=turn.user_message.id)
        messages, feedback, ids = render(prefix)
        try:
            deps.inflight.add(turn, session_key(ident, request))
        except ServiceClosing as exc:
            yield view_updates(st, ident.user_id, leaf=turn.user_message.id, note=str(exc))
            return
        first = {state: {**st, "ids": ids + [None]},
                 c["chatbot"]: gr.update(value=messages + [{"role": "assistant", "content": "…"}],
                                         feedback_value=feedback + [None]),
                 c["notice"]: notice(None), c["box"]: "", c["send"]: gr.update(visible=False),
                 c["stop"]: gr.update(visible=True), c["rating_panel"]: gr.update(visible=False),
                 c["branch_bar"]: gr.update(visible=False)}
        if new_conversation:
            first[c["convs"]] = _conv_choices(deps, ident.user_id, turn.conversation_id)
        yield first
        note, last = None, 0.0
        try:
            for _ in turn:
                now = time.monotonic()
                if now - last >= STREAM_EVERY_S:
                    last = now
                    yield {c["chatbot"]: gr.update(value=messages + [
                        {"role": "assistant", "content": display_markdown(turn.text) + " ▍"}])}
        except Exception as exc:  # stored as an error answer by the turn; say it kindly
            if not isinstance(exc, BackendError):
                log.exception("turn failed")
            deps.hooks.on_error("backend" if isinstance(exc, BackendError) else "internal")
            note = friendly_error(exc)
        finally:
            deps.inflight.remove(turn)
            try:
                deps.hooks.on_turn("ui", turn)
            except Exception:
                log.exception("turn hook failed")
        leaf = turn.answer.id if turn.answer is not None else turn.user_message.id
        yield view_updates(st, ident.user_id, leaf=leaf, note=note)

    def refuse(st: dict, text: str | None, note: str, kind: str) -> dict:
        deps.hooks.on_error(kind)
        out = {state: st, c["notice"]: notice(note), c["send"]: gr.update(visible=True),
               c["stop"]: gr.update(visible=False)}
        if text is not None:
            out[c["box"]] = text  # keep what the user typed
        return out

    # ---- send

    def on_send(text: str, st: dict, v0, v1, v2, v3, v4, request: gr.Request):
        values = [v0, v1, v2, v3, v4]
        ident, problem = who_or_notice(request)
        if problem:
            yield refuse(st, text, problem, "session")
            return
        try:
            attrs = attributes_from(values)
            ctx = deps.turn_context("ui")
            if st.get("conv"):
                deps.store().get_conversation(st["conv"], user_id=ident.user_id)
            parent = st.get("leaf") if st.get("conv") else None
            turn = turns.send(ctx, user_id=ident.user_id, text=text, conversation_id=st.get("conv"),
                              parent_id=parent, attributes=attrs, params=deps.sampling())
        except (InvalidInput, InvalidAttributes, NotFound, ServiceClosing) as exc:
            yield refuse(st, text, friendly_error(exc), "not_found" if isinstance(exc, NotFound) else "invalid_input")
            return
        if parent is not None:
            _keep(deps, parent, ident.user_id, st)
        yield from stream(turn, st, ident, request, new_conversation=turn.new_conversation)

    send_kwargs = dict(fn=on_send, inputs=[c["box"], state, *sliders], outputs=chat_outputs, **hidden)
    c["send"].click(**send_kwargs)
    c["box"].submit(**send_kwargs)

    def on_example(data: gr.SelectData):
        return data.value.get("text", "") if isinstance(data.value, dict) else str(data.value)

    c["chatbot"].example_select(on_example, None, [c["box"]], queue=False, **hidden)

    # ---- stop

    def on_stop(request: gr.Request):
        ident = deps.identify(request)
        if ident is not None:
            deps.inflight.cancel(session_key(ident, request))

    c["stop"].click(on_stop, None, None, queue=False, **hidden)

    # ---- regenerate (the chatbot's retry button) and edit

    def on_retry(st: dict, v0, v1, v2, v3, v4, data: gr.RetryData, request: gr.Request):
        values = [v0, v1, v2, v3, v4]
        ident, problem = who_or_notice(request)
        if problem:
            yield refuse(st, None, problem, "session")
            return
        ids = st.get("ids") or []
        idx = data.index[0] if isinstance(data.index, (list, tuple)) else data.index
        target = ids[idx] if isinstance(idx, int) and 0 <= idx < len(ids) else (ids[-1] if ids else None)
        if target is None:
            yield refuse(st, None, "There is no answer to regenerate yet.", "invalid_input")
            return
        try:
            attrs = attributes_from(values)
            turn = turns.regenerate(deps.turn_context("ui"), user_id=ident.user_id, message_id=target,
                                    attributes=attrs, params=deps.sampling())
        except (InvalidInput, InvalidAttributes, NotFound, ServiceClosing) as exc:
            yield refuse(st, None, friendly_error(exc), "invalid_input")
            return
        yield from stream(turn, st, ident, request, new_conversation=False)

    c["chatbot"].retry(on_retry, [state, *sliders], chat_outputs, **hidden)

    def on_edit(st: dict, v0, v1, v2, v3, v4, data: gr.EditData, request: gr.Request):
        ident, problem = who_or_notice(request)
        if problem:
            yield refuse(st, None, problem, "session")
            return
        ids = st.get("ids") or []
        idx = data.index[0] if isinstance(data.index, (list, tuple)) else data.index
        target = ids[idx] if isinstance(idx, int) and 0 <= idx < len(ids) else None
        new_text = _edited_text(data.value)
        if target is None:
            yield refuse(st, None, "That message cannot be edited.", "invalid_input")
            return
        try:
            attrs = attributes_from([v0, v1, v2, v3, v4])
            turn = turns.edit(deps.turn_context("ui"), user_id=ident.user_id, message_id=target, text=new_text,
                              attributes=attrs, params=deps.sampling())
        except (InvalidInput, InvalidAttributes, NotFound, ServiceClosing) as exc:
            # The chatbot already shows the edited text: put the stored thread back.
            out = view_updates(st, ident.user_id, leaf=st.get("leaf"), note=friendly_error(exc)) if st.get("conv") \
                else refuse(st, None, friendly_error(exc), "invalid_input")
            yield out
            return
        yield from stream(turn, st, ident, request, new_conversation=False)

    c["chatbot"].edit(on_edit, [state, *sliders], chat_outputs, **hidden)

    # ---- branches: "‹ 2 / 3 ›"

    def on_select(st: dict, data: gr.SelectData, request: gr.Request):
        ident = deps.identify(request)
        ids = st.get("ids") or []
        idx = data.index[0] if isinstance(data.index, (list, tuple)) else data.index
        if ident is None or not isinstance(idx, int) or not 0 <= idx < len(ids) or not st.get("conv"):
            return {}
        return view_updates(st, ident.user_id, leaf=st.get("leaf"), focus=ids[idx])

    c["chatbot"].select(on_select, [state], chat_outputs, **hidden)

    def navigate(step: int):
        def on_navigate(st: dict, request: gr.Request):
            ident, problem = who_or_notice(request)
            if problem:
                return refuse(st, None, problem, "session")
            view = next((v for v in st.get("views", []) if v["id"] == st.get("focus")), None)
            if view is None or not st.get("conv"):
                return {}
            sibs = view["siblings"]["ids"]
            pos = (view["siblings"]["index"] - 1 + step) % len(sibs)
            store = deps.store()
            try:
                store.choose_sibling(sibs[pos], ident.user_id)  # the user keeps the one they move to
                leaf = descend(store, st["conv"], sibs[pos])
            except NotFound as exc:
                return refuse(st, None, friendly_error(exc), "not_found")
            return view_updates(st, ident.user_id, leaf=leaf, focus=sibs[pos])

        return on_navigate

    c["prev"].click(navigate(-1), [state], chat_outputs, **hidden)
    c["next"].click(navigate(+1), [state], chat_outputs, **hidden)

    # ---- like / dislike with reasons

    rating_outputs = [state, c["chatbot"], c["notice"], c["branch_bar"], c["branch_label"], c["send"], c["stop"],
                      c["rating_panel"], c["rating_title"], c["reasons"], c["comment"]]

    def on_like(st: dict, data: gr.LikeData, request: gr.Request):
        ident, problem = who_or_notice(request)
        if problem:
            return refuse(st, None, problem, "session")
        ids = st.get("ids") or []
        idx = data.index[0] if isinstance(data.index, (list, tuple)) else data.index
        if not isinstance(idx, int) or not 0 <= idx < len(ids) or ids[idx] is None:
            return {c["rating_panel"]: gr.update(visible=False)}
        if data.liked not in (True, False):  # un-liked: ratings are append-only; just close the panel
            return {c["rating_panel"]: gr.update(visible=False), state: {**st, "rate": None}}
        value = 1 if data.liked is True else -1
        try:
            deps.store().rate(ids[idx], ident.user_id, value)
        except (InvalidInput, NotFound) as exc:
            return refuse(st, None, friendly_error(exc), "invalid_input")
        deps.hooks.on_rating(value)
        out = view_updates({**st, "rate": {"id": ids[idx], "value": value}}, ident.user_id, leaf=st.get("leaf"))
        choices = list(POSITIVE_REASONS if value > 0 else NEGATIVE_REASONS)
        out.update({
            c["rating_panel"]: gr.update(visible=True),
            c["rating_title"]: "**Thanks! What was good about it?**" if value > 0
            else "**Sorry about that. What was wrong?**",
            c["reasons"]: gr.update(choices=choices, value=[]),
            c["comment"]: "",
        })
        return out

    c["chatbot"].like(on_like, [state], rating_outputs, **hidden)

    def on_rating_save(st: dict, reasons: list[str], comment: str, request: gr.Request):
        ident, problem = who_or_notice(request)
        if problem:
            return refuse(st, None, problem, "session")
        pending = st.get("rate")
        if not pending:
            return {c["rating_panel"]: gr.update(visible=False)}
        allowed = POSITIVE_REASONS if pending["value"] > 0 else NEGATIVE_REASONS
        reasons = [r for r in (reasons or []) if r in allowed]
        try:
            deps.store().rate(pending["id"], ident.user_id, pending["value"], reasons=reasons, comment=comment or "")
        except (InvalidInput, NotFound) as exc:
            return {**refuse(st, None, friendly_error(exc), "invalid_input")}
        out = view_updates({**st, "rate": None}, ident.user_id, leaf=st.get("leaf"),
                           note="Thanks — your feedback was saved.")
        out.update({c["rating_panel"]: gr.update(visible=False), c["comment"]: ""})
        return out

    c["rating_save"].click(on_rating_save, [state, c["reasons"], c["comment"]], rating_outputs, **hidden)
    c["rating_close"].click(lambda st: ({**st, "rate": None}, gr.update(visible=False)), [state],
                            [state, c["rating_panel"]], queue=False, **hidden)

    # ---- conversations

    def on_new(st: dict, request: gr.Request):
        ident = deps.identify(request)
        out = view_updates(_new_state(), ident.user_id if ident else "", note=None)
        out[c["convs"]] = gr.update(value=None)
        out[c["rating_panel"]] = gr.update(visible=False)
        return out

    c["new"].click(on_new, [state], chat_outputs, **hidden)
    c["chatbot"].clear(on_new, [state], chat_outputs, **hidden)  # the chatbot's own trash button

    def on_open(conv_id: str | None, st: dict, request: gr.Request):
        ident, problem = who_or_notice(request)
        if problem:
            return refuse(st, None, problem, "session")
        if not conv_id:
            return {}
        try:
            deps.store().get_conversation(conv_id, user_id=ident.user_id)
        except NotFound:
            return refuse(st, None, "That conversation is not available (it may have been deleted).", "not_found")
        out = view_updates({**_new_state(), "conv": conv_id}, ident.user_id)
        out[c["rating_panel"]] = gr.update(visible=False)
        return out

    c["convs"].input(on_open, [c["convs"], state], chat_outputs, **hidden)

    # ---- delete my data

    c["delete"].click(lambda: gr.update(visible=True), None, [c["confirm_box"]], queue=False, **hidden)
    c["confirm_no"].click(lambda: gr.update(visible=False), None, [c["confirm_box"]], queue=False, **hidden)

    def on_forget(st: dict, request: gr.Request):
        ident, problem = who_or_notice(request)
        if problem:
            return refuse(st, None, problem, "session")
        if ident.is_admin and ident.user_id == "admin":
            return refuse(st, None, "The operator account cannot delete itself here; use `advisor forget`.",
                          "invalid_input")
        deps.inflight.cancel(ident.user_id)
        counts = deps.store().forget_user(ident.user_id)
        n = sum(v for k, v in counts.items() if k != "users")
        return {state: _new_state(), c["chatbot"]: gr.update(value=[], feedback_value=[]),
                c["convs"]: gr.update(choices=[], value=None), c["confirm_box"]: gr.update(visible=False),
                c["notice"]: notice(f"Your data was deleted ({n} records). Starting a fresh session…")}

    c["confirm_yes"].click(on_forget, [state], [state, c["chatbot"], c["convs"], c["confirm_box"], c["notice"]],
                           **hidden).then(None, None, None, js="() => { setTimeout(() => window.location.reload(), 1200); }")

    # ---- steering previews

    for name in ("verbosity", "complexity"):
        c[name].change(lambda v, n=name: level_line(n, v), [c[name]], [c[f"{name}_preview"]], queue=False,
                       show_progress="hidden", **hidden)


def _keep(deps: UIDeps, parent_id: str, user_id: str, st: dict) -> None:
    """Continuing from an answer (or question) that has siblings records it as the one kept."""
    view = next((v for v in st.get("views", []) if v["id"] == parent_id), None)
    if view and view["siblings"]["count"] > 1:
        try:
            deps.store().choose_sibling(parent_id, user_id)
        except NotFound:
            pass


def _edited_text(value: Any) -> str:
    """The chatbot hands back the edited text (a string or a list of content blocks); undo the
    display escaping we applied so the stored text is what the user sees."""
    if isinstance(value, list):
        value = "".join(b.get("text", "") if isinstance(b, dict) else str(b) for b in value)
    elif isinstance(value, dict):
        value = value.get("text", "")
    return str(value or "").replace("&lt;", "<")
