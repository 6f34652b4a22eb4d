"""Operator panel "Safety guard": how often the guard refuses, what it refused, and the operators'
marks on its refusals.

- The refusal rate per day (refused + replaced over the answers the guard judged,
  `store.safety.refusal_rate`) as a plot, with the daily counts beside it.
- The newest refused and replaced answers with the request, the model's withdrawn text (replaced
  answers), the score, the judge and the latest mark.
- Marking: pick an answer, say "wrong" (it should have been answered) or "right". Admin is checked
  on every click and the mark goes through `deploy.audit.record_safety_mark` (action
  "safety_mark"), so the audit log names the operator. `advisor safety export` writes the marks
  with the decisions as labelled safety data.

The handlers are methods taking the tab's `PanelContext` and the request, so tests drive them
without a browser.
"""

from __future__ import annotations

from typing import Any

import gradio as gr
import pandas as pd

from deploy.audit import actor_of, record_safety_mark
from deploy.operator.screen import PanelBuilder, PanelContext
from store.safety import MARK_LABELS, guard_decisions, refusal_rate

RATE_DAYS = 30
EXAMPLES = 30
EXAMPLE_COLUMNS = ["time", "verdict", "score", "request", "model's answer", "mark", "answer id"]


def _short(text: str | None, n: int = 160) -> str:
    text = text or ""
    return text if len(text) <= n else text[:n - 1] + "…"


def rate_frame(store: Any, days: int = RATE_DAYS) -> pd.DataFrame:
    frame = pd.DataFrame(refusal_rate(store, days=days), columns=["day", "judged", "refused", "replaced", "rate"])
    if not frame.empty:
        frame["day"] = pd.to_datetime(frame["day"], utc=True)
    return frame


def examples_frame(store: Any, limit: int = EXAMPLES) -> pd.DataFrame:
    return pd.DataFrame([
        {"time": str(d["time"])[:19], "verdict": d["verdict"], "score": d["score"], "request": _short(d["request"]),
         "model's answer": _short(d["model_answer"]), "mark": d["operator_label"] or "", "answer id": d["message_id"]}
        for d in guard_decisions(store, limit=limit)
    ], columns=EXAMPLE_COLUMNS)


class SafetyPanel:
    def load(self, ctx: PanelContext, request: Any) -> tuple:
        """(rate plot frame, examples table, answer-id choices)."""
        if not ctx.is_admin(request):
            return pd.DataFrame(columns=["day", "rate"]), pd.DataFrame(columns=EXAMPLE_COLUMNS), gr.update(choices=[])
        store = ctx.store()
        examples = examples_frame(store)
        return rate_frame(store), examples, gr.update(choices=list(examples["answer id"]))

    def mark(self, ctx: PanelContext, message_id: str | None, label: str | None, request: Any) -> tuple:
        """Record a mark: (note, rate frame, examples, choices)."""
        if not ctx.is_admin(request):
            return ctx.denied, *self.load(ctx, request)
        if not message_id or label not in MARK_LABELS:
            return "Pick an answer and say whether its refusal was wrong or right.", *self.load(ctx, request)
        try:
            record_safety_mark(ctx.store(), actor_of(ctx.identify(request)), message_id, label, surface="operator")
        except Exception as exc:  # the reason in words; nothing was recorded
            return f"❌ Not recorded: {exc}", *self.load(ctx, request)
        return f"✅ {message_id[:12]} marked {label}.", *self.load(ctx, request)

    def __call__(self, ctx: PanelContext) -> None:
        gr.Markdown("#### Safety guard\nRefusal rate per day (refused + replaced over answers judged), the newest "
                    "refusals, and your marks on them. Export: `advisor safety export --out FILE.jsonl`.")
        plot = gr.LinePlot(x="day", y="rate", title="Share of answers the guard wrote, per day",
                           elem_id="safety-rate-plot", height=240)
        table = gr.Dataframe(interactive=False, wrap=True, elem_id="safety-examples", max_height=320)
        with gr.Row():
            answer = gr.Dropdown([], label="Answer (id)", elem_id="safety-answer", scale=3)
            label = gr.Radio(list(MARK_LABELS), label="The refusal was", elem_id="safety-label", scale=2)
            submit = gr.Button("Mark", variant="primary", elem_id="safety-mark", scale=1)
        note = gr.Markdown(elem_id="safety-note")

        def on_load(request: gr.Request):
            return self.load(ctx, request)

        def on_mark(answer_value: str, label_value: str, request: gr.Request):
            return self.mark(ctx, answer_value, label_value, request)

        submit.click(on_mark, [answer, label], [note, plot, table, answer], api_visibility="undocumented")
        ctx.on_refresh(on_load, [plot, table, answer])


def operator_panel(services: Any) -> PanelBuilder:
    return SafetyPanel()
