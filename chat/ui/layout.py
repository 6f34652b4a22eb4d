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
from store.attributes import NAMES

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
body.privacy-seen #privacy-banner { display: none; }
.drawer-title h2 { font-size: 1.05rem; margin: 0 0 6px 0; }
.sr-only { position: absolute; width: 1px; height: 1px; padding: 0; margin: -1px; overflow: hidden;
           clip: rect(0, 0, 0, 0); white-space: nowrap; border: 0; }
#privacy-banner { padding: 6px 10px; }
#privacy-banner p { font-size: 0.9em; margin: 0 0 4px 0; }
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
  if (localStorage.getItem('advisor-privacy-seen')) document.body.classList.add('privacy-seen');
}"""

# "Got it" on the privacy notice: remembered in this browser, so the notice shows on a first visit.
PRIVACY_SEEN_JS = "() => { localStorage.setItem('advisor-privacy-seen', '1'); document.body.classList.add('privacy-seen'); }"


def theme() -> gr.themes.Base:
    """Gradio's Soft theme with text dark enough for WCAG AA (4.5:1), as axe-core checks it: its
    label chips (indigo 500 on indigo 100, 3.6:1), hints (grey 400 on white, 2.5:1) and primary
    buttons (white on indigo 500, 4.46:1) fall just short."""
    return gr.themes.Soft().set(
        block_label_text_color="*primary_800", block_title_text_color="*primary_800",
        body_text_color_subdued="*neutral_600", button_primary_background_fill="*primary_600",
        button_primary_background_fill_hover="*primary_700", checkbox_label_background_fill_selected="*primary_600",
    )


@dataclass
class ChatView:
    """Every component of the chat tab that an event reads or writes."""

    state: gr.State
    shown: gr.State  # how many conversations the list shows (grows with "Show older")
    who: gr.Markdown
    new: gr.Button
    search: gr.Textbox
    convs: gr.Radio
    older: gr.Button
    rename_box: gr.Textbox
    rename: gr.Button
    consent: gr.Checkbox
    delete: gr.Button
    confirm_box: gr.Group
    confirm_yes: gr.Button
    confirm_no: gr.Button
    privacy: gr.Markdown
    privacy_ok: gr.Button
    notice: gr.Markdown
    conv_confirm: gr.Group
    conv_delete_yes: gr.Button
    conv_delete_no: gr.Button
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
    sliders: dict[str, gr.Slider]  # by attribute name, in `store.attributes.NAMES` order
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


PAGE_SIZE = 50  # conversations the list shows at first, and adds per "Show older"


def build_chat_page(privacy_notice: list[str]) -> ChatView:
    """Build the chat page's components inside the caller's Blocks context."""
    state = gr.State(new_state())
    shown = gr.State(PAGE_SIZE)
    with gr.Sidebar(position="left", open=False, elem_id="sidebar", label="Your conversations", width=300):
        sidebar = _sidebar()
    with gr.Sidebar(position="right", open=False, elem_id="steering", label="Steer the answer", width=300):
        sliders, previews = _steering()
    with gr.Column(elem_id="main"):
        main = _conversation(privacy_notice)
    return ChatView(state=state, shown=shown, **sidebar, **main, sliders=sliders, previews=previews)


def _sidebar() -> dict:
    gr.HTML('<h1 class="sr-only">Advisor</h1>', elem_id="page-title")
    parts = {
        "who": gr.Markdown(elem_id="who"),
        "new": gr.Button("+ New chat", elem_id="new-chat", variant="secondary"),
        "search": gr.Textbox(label="Search your conversations", placeholder="Words in a title or a message",
                             elem_id="conv-search", max_lines=1),
        "convs": gr.Radio(label="Your conversations", choices=[], elem_id="conversations", interactive=True),
        "older": gr.Button("Show older", size="sm", visible=False, elem_id="conv-older"),
    }
    with gr.Row(elem_id="rename-row"):
        parts["rename_box"] = gr.Textbox(label="Rename this conversation", max_lines=1, scale=3, elem_id="rename")
        parts["rename"] = gr.Button("Rename", size="sm", scale=1, elem_id="rename-save")
    parts["consent"] = gr.Checkbox(label="Use my conversations to improve the advisor", value=True,
                                   elem_id="consent", info="Personal data is replaced before any text is used.")
    gr.Markdown("[Download my data](/api/me/export)", elem_id="download-data")
    parts["delete"] = gr.Button("Delete my data", variant="stop", size="sm", elem_id="delete-data")
    with gr.Group(visible=False, elem_id="delete-confirm") as parts["confirm_box"]:
        gr.Markdown("**Delete all your data?** Every conversation, answer and rating of yours is "
                    "removed for good and never used for training. This cannot be undone.")
        with gr.Row():
            parts["confirm_yes"] = gr.Button("Yes, delete everything", variant="stop", elem_id="delete-yes")
            parts["confirm_no"] = gr.Button("Cancel", elem_id="delete-no")
    return parts


def _conversation(privacy_notice: list[str]) -> dict:
    with gr.Group(elem_id="privacy-banner"):
        parts = {"privacy": gr.Markdown("**Your data.** " + " ".join(privacy_notice), elem_id="privacy-text"),
                 "privacy_ok": gr.Button("Got it", size="sm", elem_id="privacy-ok")}
    parts["notice"] = gr.Markdown(visible=False, elem_id="notice")
    with gr.Group(visible=False, elem_id="conv-delete-confirm") as parts["conv_confirm"]:
        gr.Markdown("**Delete this conversation?** Its messages, answers and ratings are removed for good, "
                    "including from any copy kept for training.")
        with gr.Row():
            parts["conv_delete_yes"] = gr.Button("Delete it", variant="stop", size="sm", elem_id="conv-delete-yes")
            parts["conv_delete_no"] = gr.Button("Keep it", size="sm", elem_id="conv-delete-no")
    parts.update({
        "chatbot": gr.Chatbot(
            elem_id="chatbot", editable="user", label="Conversation", sanitize_html=True, allow_tags=False,
            render_markdown=True, feedback_options=("Like", "Dislike"), group_consecutive_messages=False,
            buttons=["copy"], layout="bubble", show_label=False,
            placeholder=("**Ask for advice** on an everyday dilemma. Press Enter to send, Shift+Enter for a new "
                         "line. *Steer the answer* (top right) sets its length and complexity; your past chats "
                         "are at the top left."),
            examples=[{"text": e} for e in EXAMPLES],
        ),
    })
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
    gr.Markdown("## Steer the answer", elem_classes=["drawer-title"])
    sliders, previews = {}, {}
    for name, label in (("verbosity", "Verbosity (length)"), ("complexity", "Complexity (language)")):
        sliders[name] = gr.Slider(0, 4, value=2, step=1, label=label, elem_id=name)
        previews[name] = gr.Markdown(level_line(name, 2), elem_classes=["level-preview"], elem_id=f"{name}-preview")
    with gr.Accordion("More", open=False, elem_id="more"):
        for name in ("helpfulness", "correctness", "coherence"):
            sliders[name] = gr.Slider(0, 4, value=4, step=1, label=name.capitalize(), elem_id=name)
    return sliders, previews
