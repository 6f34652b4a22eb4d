"""The chat page's layout: every component, built once, held in a typed `ChatView`.

The conversation fills the page (notices, the chatbot, the branch bar "◀ 2 / 3 ▶", the rating
panel, the input); two drawers hold the rest: on the left who you are, new chat, your
conversations and delete my data; on the right the steering sliders (verbosity and complexity with
a one-line preview of each level, the other attributes under "More"). Gradio's `Sidebar` is a
drawer on a phone and a side panel on a desktop, so on a 390-pixel screen the conversation and the
input come first and each drawer is one tap away; `OPEN_DRAWERS_JS` labels the two toggles for
screen readers and opens the conversations on wide screens. Handlers refer to components by
attribute, never by string.
"""

from __future__ import annotations

from dataclasses import dataclass

import gradio as gr

from chat.threads import NEGATIVE_REASONS
from chat.ui.render import level_line
from feedback.attributes import NAMES

EXAMPLES = [
    "My roommate never does the dishes. How do I bring it up without a fight?",
    "I got a job offer with more pay but a longer commute. How should I decide?",
    "How can I stop procrastinating on my thesis?",
]

CSS = """
#chatbot { height: calc(100dvh - 190px) !important; min-height: 280px; }
#input-row { flex-wrap: nowrap; align-items: stretch; }
#input-row > * { min-width: 0; }
#send, #stop { min-width: 72px !important; max-width: 110px; }
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
#sidebar .toggle-button, #steering .toggle-button { outline-offset: 2px; }
"""

# The drawers' toggles are Gradio's own buttons, labelled only "Toggle Sidebar": name them for
# people using a screen reader, and open the conversation list where there is room for it.
OPEN_DRAWERS_JS = """() => {
  const name = (id, label) => { const b = document.querySelector(`#${id} > .toggle-button`);
    if (b) { b.setAttribute('aria-label', label); b.setAttribute('title', label); } return b; };
  const history = name('sidebar', 'Your conversations');
  name('steering', 'Steer the answer');
  if (window.innerWidth >= 1100 && history && !document.querySelector('#sidebar.open')) history.click();
}"""


@dataclass
class ChatView:
    """Every component of the chat tab that an event reads or writes."""

    state: gr.State
    who: gr.Markdown
    new: gr.Button
    convs: gr.Radio
    delete: gr.Button
    confirm_box: gr.Group
    confirm_yes: gr.Button
    confirm_no: gr.Button
    notice: gr.Markdown
    chatbot: gr.Chatbot
    branch_bar: gr.Row
    prev: gr.Button
    branch_label: gr.Markdown
    next: gr.Button
    rating_panel: gr.Group
    rating_title: gr.Markdown
    reasons: gr.CheckboxGroup
    comment: gr.Textbox
    rating_save: gr.Button
    rating_close: gr.Button
    box: gr.Textbox
    send: gr.Button
    stop: gr.Button
    sliders: dict[str, gr.Slider]  # by attribute name, in `feedback.attributes.NAMES` order
    previews: dict[str, gr.Markdown]  # verbosity and complexity

    @property
    def slider_list(self) -> list[gr.Slider]:
        return [self.sliders[n] for n in NAMES]

    @property
    def thread_outputs(self) -> list:
        """What every action that redraws the conversation writes."""
        return [self.state, self.chatbot, self.notice, self.branch_bar, self.branch_label, self.convs,
                self.box, self.send, self.stop, self.rating_panel]

    @property
    def rating_outputs(self) -> list:
        return [self.state, self.chatbot, self.notice, self.branch_bar, self.branch_label, self.send, self.stop,
                self.rating_panel, self.rating_title, self.reasons, self.comment]


def new_state() -> dict:
    """A fresh session: no conversation open. `ids` maps chatbot indices to message ids."""
    return {"conv": None, "leaf": None, "ids": [], "views": [], "focus": None, "rate": None}


def build_chat_page() -> ChatView:
    """Build the chat page's components inside the caller's Blocks context."""
    state = gr.State(new_state())
    with gr.Sidebar(position="left", open=False, elem_id="sidebar", label="Your conversations", width=300):
        sidebar = _sidebar()
    with gr.Sidebar(position="right", open=False, elem_id="steering", label="Steer the answer", width=300):
        sliders, previews = _steering()
    with gr.Column(elem_id="main"):
        main = _conversation()
    return ChatView(state=state, **sidebar, **main, sliders=sliders, previews=previews)


def _sidebar() -> dict:
    parts = {
        "who": gr.Markdown(elem_id="who"),
        "new": gr.Button("+ New chat", elem_id="new-chat", variant="secondary"),
        "convs": gr.Radio(label="Your conversations", choices=[], elem_id="conversations", interactive=True),
        "delete": gr.Button("Delete my data", variant="stop", size="sm", elem_id="delete-data"),
    }
    with gr.Group(visible=False, elem_id="delete-confirm") as parts["confirm_box"]:
        gr.Markdown("**Delete all your data?** Every conversation, answer and rating of yours is "
                    "removed for good and never used for training. This cannot be undone.")
        with gr.Row():
            parts["confirm_yes"] = gr.Button("Yes, delete everything", variant="stop", elem_id="delete-yes")
            parts["confirm_no"] = gr.Button("Cancel", elem_id="delete-no")
    return parts


def _conversation() -> dict:
    parts = {
        "notice": gr.Markdown(visible=False, elem_id="notice"),
        "chatbot": gr.Chatbot(
            elem_id="chatbot", editable="user", sanitize_html=True, allow_tags=False,
            render_markdown=True, feedback_options=("Like", "Dislike"), group_consecutive_messages=False,
            buttons=["copy"], layout="bubble", show_label=False,
            placeholder=("**Ask for advice** on an everyday dilemma. Press Enter to send, Shift+Enter for a new "
                         "line. *Steer the answer* (top right) sets its length and complexity; your past chats "
                         "are at the top left."),
            examples=[{"text": e} for e in EXAMPLES],
        ),
    }
    with gr.Row(visible=False, elem_id="branch-bar") as parts["branch_bar"]:
        parts["prev"] = gr.Button("◀", size="sm", elem_id="branch-prev", scale=0)
        parts["branch_label"] = gr.Markdown(elem_id="branch-label")
        parts["next"] = gr.Button("▶", size="sm", elem_id="branch-next", scale=0)
    with gr.Group(visible=False, elem_id="rating-panel") as parts["rating_panel"]:
        parts["rating_title"] = gr.Markdown(elem_id="rating-title")
        parts["reasons"] = gr.CheckboxGroup(choices=list(NEGATIVE_REASONS), label="Reasons", elem_id="reasons")
        parts["comment"] = gr.Textbox(label="Comment (optional)", lines=1, elem_id="rating-comment")
        with gr.Row():
            parts["rating_save"] = gr.Button("Send feedback", variant="primary", size="sm", elem_id="rating-save")
            parts["rating_close"] = gr.Button("Close", size="sm", elem_id="rating-close")
    # lines=1 with max_lines > 1 is Gradio's chat box: Enter sends, Shift+Enter adds a line, and the
    # box grows with what is typed (with lines > 1 it is the other way round).
    with gr.Row(equal_height=True, elem_id="input-row"):
        parts["box"] = gr.Textbox(placeholder="Describe your situation…", label="Your message", show_label=False,
                                  lines=1, max_lines=12, scale=8, elem_id="input", autofocus=True)
        parts["send"] = gr.Button("Send", variant="primary", scale=1, elem_id="send")
        parts["stop"] = gr.Button("Stop", variant="stop", scale=1, visible=False, elem_id="stop")
    return parts


def _steering() -> tuple[dict[str, gr.Slider], dict[str, gr.Markdown]]:
    gr.Markdown("#### Steer the answer")
    sliders, previews = {}, {}
    for name, label in (("verbosity", "Verbosity (length)"), ("complexity", "Complexity (language)")):
        sliders[name] = gr.Slider(0, 4, value=2, step=1, label=label, elem_id=name)
        previews[name] = gr.Markdown(level_line(name, 2), elem_classes=["level-preview"], elem_id=f"{name}-preview")
    with gr.Accordion("More", open=False, elem_id="more"):
        for name in ("helpfulness", "correctness", "coherence"):
            sliders[name] = gr.Slider(0, 4, value=4, step=1, label=name.capitalize(), elem_id=name)
    return sliders, previews
