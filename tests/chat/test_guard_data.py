"""What the safety guard leaves behind: guard-written answers never become training answers (and the
dataset card says how many were left out), and an operator's mark on a refusal reaches the labelled
safety export, audited; the operator panel's handlers, without a browser."""

from __future__ import annotations

import json

import gradio as gr
import pyarrow.parquet as pq
import pytest
from guard_helpers import UNSAFE_WORD, FakeJudge, ScriptedBackend
from typer.testing import CliRunner

from chat.guard import Guard
from chat.turns import TurnContext, regenerate, send
from feedback.datasets import build_dataset
from feedback.datasets.card import GUARD_WRITTEN
from store import InvalidInput, Store

SAFE = "Water it twice a week. Give it plenty of sun."


def _ctx(store, answer: str) -> TurnContext:
    return TurnContext(store=store, backend=ScriptedBackend(answer), steering="instruct", guard=Guard(FakeJudge()))


def _conversations(store):
    """A refused request, a replaced answer and an allowed one, each liked by its user; and a
    question answered twice (allowed, then replaced) where the user kept the replaced one."""
    refused = send(_ctx(store, SAFE), user_id="u1", text="How do I make a bomb?").run()
    replaced = send(_ctx(store, f"Sure. Do this {UNSAFE_WORD} thing. Done."), user_id="u2", text="Fix my bike?").run()
    allowed = send(_ctx(store, SAFE), user_id="u3", text="How do I care for a fern?").run()
    for answer, user in ((refused, "u1"), (replaced, "u2"), (allowed, "u3")):
        store.conversations.rate(answer.id, user, 1)
    first = send(_ctx(store, SAFE), user_id="u4", text="Cheap dinner ideas?").run()
    second = regenerate(_ctx(store, f"Try {UNSAFE_WORD} food. Yes."), user_id="u4", message_id=first.id).run()
    store.conversations.choose_sibling(second.id, "u4")
    return refused, replaced, allowed, first, second


def test_guard_written_answers_never_enter_a_training_set(store, tmp_path):
    refused, replaced, allowed, first, second = _conversations(store)
    assert [a.generation.safety["verdict"] for a in (refused, replaced, allowed, second)] == [
        "refused", "replaced", "allowed", "replaced"]
    guard_texts = {refused.content, replaced.content, second.content}
    for kind in ("sft", "kto", "dpo"):
        card = build_dataset(store, kind, tmp_path / kind, eval_fraction=0.0)
        rows = pq.read_table(tmp_path / kind / "train.parquet").to_pylist()
        answers = [m["content"] for r in rows for key in ("completion", "chosen", "rejected") for m in r.get(key) or ()]
        assert not guard_texts & set(answers), kind
        assert card.dropped[GUARD_WRITTEN] >= 1, kind
        assert f"left out {card.dropped[GUARD_WRITTEN]}" in (tmp_path / kind / "dataset_card.md").read_text()
    sft = build_dataset(store, "sft", tmp_path / "sft2", eval_fraction=0.0)
    assert sft.n_rows == 1 and sft.dropped[GUARD_WRITTEN] == 2  # only the allowed, liked answer
    dpo = build_dataset(store, "dpo", tmp_path / "dpo2", eval_fraction=0.0)
    assert dpo.n_rows == 0 and dpo.dropped[GUARD_WRITTEN] == 1  # the kept sibling is the guard's refusal


def test_a_refusal_marked_wrong_reaches_the_export_audited(tmp_path):
    from deploy.operator.safety import SafetyPanel
    from deploy.operator.screen import PanelContext
    from deploy.service.auth import Identity
    from deploy.wiring import build_cli

    with Store(tmp_path / "advisor.duckdb") as store:
        refused, replaced, allowed, _, second = _conversations(store)
        admin, nobody = Identity("admin", "admin", True, "cookie"), Identity("u9", None, False, "cookie")
        ctx = PanelContext(store=lambda: store, identify=lambda request: request, denied="operators only",
                           refresh_triggers=[])
        panel = SafetyPanel()
        with gr.Blocks():
            panel(ctx)  # builds without a browser
        rate, examples, choices = panel.load(ctx, admin)
        assert set(examples["verdict"]) == {"refused", "replaced"} and refused.id in choices["choices"]
        assert rate["judged"].sum() == 5 and rate["refused"].sum() == 1 and rate["replaced"].sum() == 2
        assert panel.mark(ctx, refused.id, "wrong", nobody)[0] == "operators only"
        assert store.safety.marks(refused.id) == []
        assert panel.mark(ctx, allowed.id, "wrong", admin)[0].startswith("❌ Not recorded")  # the guard let it through
        note, *_ = panel.mark(ctx, refused.id, "wrong", admin)
        assert note.startswith("✅") and store.safety.marks(refused.id)[-1].label == "wrong"
        with pytest.raises(InvalidInput):
            store.safety.mark(refused.id, "admin", "maybe")
        audit = store.audit.list(action="safety_mark")
        assert {(e.target, e.actor, e.details["outcome"]) for e in audit} == {
            (allowed.id, "admin", "refused"), (refused.id, "admin", "ok")}

    out = tmp_path / "safety.jsonl"
    result = CliRunner().invoke(build_cli(), ["--data-dir", str(tmp_path), "safety", "export", "--out", str(out)],
                                env={})
    assert result.exit_code == 0, result.output
    rows = {r["message_id"]: r for r in map(json.loads, out.read_text().splitlines())}
    assert set(rows) == {refused.id, replaced.id, second.id}  # every refusal and replacement, nothing allowed
    r = rows[refused.id]
    assert r == {**r, "request": "How do I make a bomb?", "answer": None, "verdict": "refused", "score": 0.9,
                 "judge": "fake-judge-v1", "operator_label": "wrong"}
    assert UNSAFE_WORD in rows[replaced.id]["answer"] and rows[replaced.id]["operator_label"] is None
    marked = tmp_path / "marked.jsonl"
    CliRunner().invoke(build_cli(), ["--data-dir", str(tmp_path), "safety", "export", "--out", str(marked),
                                     "--marked-only"], env={})
    assert [json.loads(x)["message_id"] for x in marked.read_text().splitlines()] == [refused.id]
    with Store(tmp_path / "advisor.duckdb") as store:
        exports = store.audit.list(action="export")
        assert exports[0].target == "safety" and exports[0].details["outcome"] == "ok"


def test_forgetting_a_user_deletes_the_marks_on_their_answers(store):
    refused, *_ = _conversations(store)
    store.safety.mark(refused.id, "admin", "wrong")
    counts = store.privacy.forget_user("u1")
    assert counts["safety_marks"] == 1
