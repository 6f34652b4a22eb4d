"""Operator panel: how much natural feedback the extractor finds, and a sample to check by eye.

- Prevalence: the share of active conversations with feedback per category and day
  (`store.reports.feedback_prevalence`), as a line per category plus "any". The
  paper behind the taxonomy found about 30% of chats hold explicit feedback; a sudden drop
  or jump here usually means the extractor, not the users, changed.
- Sample: the newest mined events with the whole user message and the span highlighted, so a
  person can judge whether the spans are right. Message text is user input: it is escaped
  before it becomes HTML, and the span is marked by its stored offsets (validated by the
  extractor to be the message's own text), never by searching the HTML.
"""

from __future__ import annotations

from html import escape
from typing import Any

import gradio as gr
import pandas as pd

from deploy.operator.screen import PanelBuilder, PanelContext
from store.reports import feedback_prevalence, recent_feedback
from store.taxonomy import CATEGORY_IDS

SAMPLE_SIZE = 20
PREVALENCE_DAYS = 30
ALL = "all categories"


def prevalence_frame(store: Any, days: int = PREVALENCE_DAYS) -> pd.DataFrame:
    rows = feedback_prevalence(store, days=days)
    frame = pd.DataFrame(rows, columns=["day", "category", "conversations", "with_feedback", "share"])
    if not frame.empty:
        frame["day"] = pd.to_datetime(frame["day"], utc=True)
    return frame


def highlighted(message: str, start: int | None, end: int | None, category: str) -> str:
    """The message as HTML with its span in a <mark>; the whole message escaped."""
    if start is None or end is None or not 0 <= start < end <= len(message):
        return escape(message)
    return (escape(message[:start]) + f'<mark title="{escape(category)}">' + escape(message[start:end])
            + "</mark>" + escape(message[end:]))


def sample_html(events: list[dict]) -> str:
    if not events:
        return "<p class='muted'>No mined feedback yet. Run the extraction, or wait for its schedule.</p>"
    rows = "".join(
        f"<tr><td>{escape(str(e['created_at'])[:16])}</td><td>{escape(e['category'])}</td>"
        f"<td>{escape(e['extractor'] or '')}</td>"
        f"<td>{highlighted(e['message'], e['span_start'], e['span_end'], e['category'])}</td></tr>"
        for e in events
    )
    return ("<table class='feedback-sample'><thead><tr><th>mined</th><th>category</th><th>extractor</th>"
            f"<th>user message (span highlighted)</th></tr></thead><tbody>{rows}</tbody></table>")


def feedback_panel(ctx: PanelContext) -> None:
    gr.Markdown("#### Natural feedback")
    prevalence = gr.LinePlot(x="day", y="share", color="category", title="Share of conversations with feedback",
                             elem_id="operator-prevalence", height=280)
    with gr.Row():
        category = gr.Dropdown([ALL, *CATEGORY_IDS], value=ALL, label="Sample of mined feedback", scale=3,
                               elem_id="operator-feedback-category")
        resample = gr.Button("Show", scale=1, elem_id="operator-feedback-show")
    sample = gr.HTML(elem_id="operator-feedback-sample")

    def load(chosen: str, request: gr.Request):
        if not ctx.is_admin(request):
            return None, ""
        store = ctx.store()
        events = recent_feedback(store, limit=SAMPLE_SIZE, category=None if chosen in (None, ALL) else chosen)
        return prevalence_frame(store), sample_html(events)

    def load_sample(chosen: str, request: gr.Request):
        return load(chosen, request)[1]

    ctx.on_refresh(load, [prevalence, sample], [category])
    for event in (resample.click, category.change):
        event(load_sample, [category], [sample], api_visibility="undocumented")


def operator_panel(services: Any) -> PanelBuilder:
    return feedback_panel
