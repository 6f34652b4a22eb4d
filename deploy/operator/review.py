"""Operator panel "Review mined feedback": a reviewer checks sampled events one by one, and the
panel shows what the reviews say about the extractors' precision, per category and week.

A sample is drawn (optionally of one category or extractor); each event is shown with the request,
the answer the user reacted to, and the user's message with the span marked. The reviewer says
"correct", "wrong category" (and picks the right one) or "not feedback"; the next event follows.

Design choices:
- The handlers are methods (`load`, `draw`, `submit`) taking the screen's `PanelContext` and the
  request, so tests drive them without a browser; the Gradio wiring is a thin layer over them.
- Admin is checked on the server at every click, and every verdict goes through the same
  `record_review` as `POST /api/admin/feedback/{id}/review`: audited (action "review") with the
  signed-in admin as reviewer and actor.
- The queue of sampled events lives in the page's `gr.State` (ids and texts of at most
  `SAMPLE_SIZE` events), not on the server: two reviewers draw and work independently, and a
  reload simply draws again. An event reviewed meanwhile by someone else can be reviewed again;
  the latest verdict counts (`store.events`).
- Precision is the share of reviewed events called correct, by the week they were mined and by
  the extractor version that mined them, with Wilson 95% intervals
  (`feedback.extract.reviews.precision`); the table shows the intervals, the plot the point
  estimates. The version rows are what a dataset card's or a canary verdict's extractor versions
  are read against.
- User text is escaped before it becomes HTML; the span is marked by its stored offsets.
"""

from __future__ import annotations

from html import escape
from typing import Any

import gradio as gr
import pandas as pd

from deploy.audit import actor_of, record_review
from deploy.operator.feedback import highlighted
from deploy.operator.screen import PanelBuilder, PanelContext
from feedback.extract.reviews import ALL, precision
from store.taxonomy import CATEGORY_IDS

SAMPLE_SIZE = 20
ANY = "any"
VERDICT_LABELS = {"correct": "correct", "wrong category": "wrong_category", "not feedback": "not_feedback"}
TABLE_COLUMNS = ["week", "extractor version", "category", "reviewed", "correct", "precision", "95% low", "95% high"]
ALL_VERSIONS = "all versions"
CONTEXT_CHARS = 600


def _short(text: str | None, n: int = CONTEXT_CHARS) -> str:
    text = text or ""
    return text if len(text) <= n else text[:n - 1] + "…"


def card_html(queue: list[dict]) -> str:
    """The event at the head of the queue, for a person to judge."""
    if not queue:
        return "<p class='muted'>Nothing to review. Draw a sample (all mined events may already be reviewed).</p>"
    e = queue[0]
    earlier = f" · reviewed {e['reviews']}× before" if e.get("reviews") else ""
    return (f"<div class='review-card'><p><b>{escape(e['category'])}</b> · found by {escape(e['extractor'])} · "
            f"mined {escape(str(e['created_at'])[:16])}{earlier} · {len(queue)} left in this sample</p>"
            f"<p><small>request</small><br>{escape(_short(e.get('request')))}</p>"
            f"<p><small>answer</small><br>{escape(_short(e.get('answer')))}</p>"
            f"<p><small>user (span marked)</small><br>"
            f"{highlighted(e['message'], e['span_start'], e['span_end'], e['category'])}</p></div>")


def precision_frames(store: Any) -> tuple[pd.DataFrame, pd.DataFrame]:
    """(table with intervals: per week and overall; plot frame: precision per category and week)."""
    p = precision(store.events.reviewed_events())
    def row(week: str, version: str, category: str, cell: dict) -> dict:
        return {"week": week, "extractor version": version, "category": category, "reviewed": cell["reviewed"],
                "correct": cell["correct"], "precision": cell["precision"], "95% low": cell["low"],
                "95% high": cell["high"]}

    rows = [row(w["week"], ALL_VERSIONS, w["category"], w) for w in p["weeks"]]
    rows += [row("all weeks", ALL_VERSIONS, c, v) for c, v in p["overall"].items() if v["reviewed"]]
    rows += [row("all weeks", v["version"], v["category"], v) for v in p["by_version"]]
    table = pd.DataFrame(rows, columns=TABLE_COLUMNS)
    plot = pd.DataFrame([{"week": w["week"], "category": w["category"], "precision": w["precision"]}
                         for w in p["weeks"] if w["category"] != ALL], columns=["week", "category", "precision"])
    if not plot.empty:
        plot["week"] = pd.to_datetime(plot["week"], utc=True)
    return table, plot


class ReviewPanel:
    """The panel builder; its handlers are methods so they run without a browser."""

    def load(self, ctx: PanelContext, request: Any) -> tuple[pd.DataFrame, Any]:
        if not ctx.is_admin(request):
            return pd.DataFrame(columns=TABLE_COLUMNS), None
        return precision_frames(ctx.store())

    def draw(self, ctx: PanelContext, category: str | None, extractor: str | None, request: Any) -> tuple:
        """A fresh sample of unreviewed events: (queue, card, note)."""
        if not ctx.is_admin(request):
            return [], "", ctx.denied
        queue = ctx.store().events.review_sample(SAMPLE_SIZE, category=None if category in (None, ANY) else category,
                                                 extractor=None if extractor in (None, ANY) else extractor)
        note = f"{len(queue)} events drawn." if queue else "No unreviewed events match."
        return queue, card_html(queue), note

    def submit(self, ctx: PanelContext, queue: list[dict], verdict: str | None, corrected: str | None,
               request: Any) -> tuple:
        """Record the verdict on the head of the queue and move on:
        (queue, card, note, precision table, precision plot)."""
        if not ctx.is_admin(request):  # checked on every click, not only when the screen loads
            return queue, "", ctx.denied, pd.DataFrame(columns=TABLE_COLUMNS), None
        if not queue:
            return queue, card_html(queue), "Draw a sample first.", *self.load(ctx, request)
        code = VERDICT_LABELS.get(verdict or "")
        if code is None:
            return queue, card_html(queue), "Choose a verdict.", *self.load(ctx, request)
        event = queue[0]
        try:
            record_review(ctx.store(), actor_of(ctx.identify(request)), event["id"], code,
                          corrected if code == "wrong_category" else None, surface="operator")
        except Exception as exc:  # the reason, in words; the event stays at the head of the queue
            return queue, card_html(queue), f"❌ Not recorded: {exc}", *self.load(ctx, request)
        rest = queue[1:]
        return rest, card_html(rest), f"✅ {event['category']} → {verdict}.", *self.load(ctx, request)

    def __call__(self, ctx: PanelContext) -> None:
        gr.Markdown("#### Review mined feedback\nAPI: `GET /api/admin/feedback/sample`, "
                    "`POST /api/admin/feedback/{id}/review`, `GET /api/admin/feedback/precision`; "
                    "as a gold file: `advisor extract reviews export --out FILE`.")
        with gr.Row():
            category = gr.Dropdown([ANY, *CATEGORY_IDS], value=ANY, label="Category", elem_id="review-category")
            extractor = gr.Dropdown([ANY, "fast", "llm"], value=ANY, label="Extractor", elem_id="review-extractor")
            draw = gr.Button("Draw sample", elem_id="review-draw")
        queue = gr.State([])
        card = gr.HTML(elem_id="review-card")
        with gr.Row():
            verdict = gr.Radio(list(VERDICT_LABELS), label="Verdict", elem_id="review-verdict", scale=3)
            corrected = gr.Dropdown(list(CATEGORY_IDS), value=None, label="Right category (if wrong)",
                                    elem_id="review-corrected", scale=2)
            submit = gr.Button("Submit and next", variant="primary", elem_id="review-submit", scale=1)
        note = gr.Markdown(elem_id="review-note")
        plot = gr.LinePlot(x="week", y="precision", color="category", title="Estimated precision by week",
                           elem_id="review-precision-plot", height=260)
        table = gr.Dataframe(interactive=False, wrap=True, elem_id="review-precision", max_height=300)

        def on_load(request: gr.Request):
            return self.load(ctx, request)

        def on_draw(category_value: str, extractor_value: str, request: gr.Request):
            return self.draw(ctx, category_value, extractor_value, request)

        def on_submit(queue_value: list, verdict_value: str, corrected_value: str, request: gr.Request):
            return self.submit(ctx, queue_value, verdict_value, corrected_value, request)

        draw.click(on_draw, [category, extractor], [queue, card, note], api_visibility="undocumented")
        submit.click(on_submit, [queue, verdict, corrected], [queue, card, note, table, plot],
                     api_visibility="undocumented")
        ctx.on_refresh(on_load, [table, plot])


def operator_panel(services: Any) -> PanelBuilder:
    return ReviewPanel()
