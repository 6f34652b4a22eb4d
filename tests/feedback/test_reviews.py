"""Operators audit mined feedback: reviews in the store, estimated precision with Wilson intervals,
the gold export round trip (loaded by `load_gold` and scored by `evaluate`), the admin API, the
operator panel's handlers (no browser), the CLI export, and forgetting a user's reviews."""

from __future__ import annotations

import json
from datetime import datetime, timedelta, timezone

import pytest
from service_helpers import start_service, tiny_settings
from store_peek import peek, poke
from typer.testing import CliRunner

from feedback.extract import LLMExtractor, evaluate, load_gold, predict
from feedback.extract.reviews import export_gold, precision, week_of, wilson
from store import FeedbackEvent, InvalidInput, NotFound, Store

REQUEST = "How do I fall asleep faster?"
ANSWER = "Keep a consistent schedule and build a wind-down routine without screens."


def conversation(store: Store, turns: list[str], user: str = "u1") -> list:
    conv = store.conversations.create(user)
    out, parent = [], None
    for k, text in enumerate(turns):
        msg = store.conversations.add_message(conv.id, "user" if k % 2 == 0 else "assistant", text, parent_id=parent)
        out.append(msg)
        parent = msg.id
    return out


def mine(store: Store, message, target, category: str, span: str, extractor: str = "fast") -> FeedbackEvent:
    start = message.content.index(span)
    event = FeedbackEvent(message.conversation_id, message.id, target.id, category, span, start, start + len(span),
                          extractor, f"{extractor}-test")
    assert store.events.add([event]) == 1
    return event


@pytest.fixture
def mined(store):
    """Three conversations, five mined events."""
    a = conversation(store, [REQUEST, ANSWER, "Thanks! What do you mean by wind-down?", "A calm hour.", "Ok, got it."])
    b = conversation(store, ["How do I budget?", "Use the 50/30/20 rule.", "No, I asked about saving, not spending."])
    c = conversation(store, ["Best tea?", "Green tea.", "Which green tea?"], user="u2")
    events = {
        "thanks": mine(store, a[2], a[1], "positive", "Thanks!"),
        "meaning": mine(store, a[2], a[1], "ask_clarification", "What do you mean by wind-down?"),
        "meaning_llm": mine(store, a[2], a[1], "ask_clarification", "What do you mean by wind-down?", "llm"),
        "saving": mine(store, b[2], b[1], "aware_without_correction", "No, I asked about saving, not spending."),
        "which": mine(store, c[2], c[1], "positive", "Which green tea?"),
    }
    return store, events, (a, b, c)


def test_reviews_are_validated_and_the_latest_counts(mined):
    store, ev, _ = mined
    with pytest.raises(InvalidInput, match="verdict"):
        store.events.add_review(ev["thanks"].id, "alice", "great")
    with pytest.raises(InvalidInput, match="exactly when"):
        store.events.add_review(ev["thanks"].id, "alice", "wrong_category")
    with pytest.raises(InvalidInput, match="exactly when"):
        store.events.add_review(ev["thanks"].id, "alice", "correct", "positive")
    with pytest.raises(InvalidInput, match="already 'positive'"):
        store.events.add_review(ev["thanks"].id, "alice", "wrong_category", "positive")
    with pytest.raises(InvalidInput, match="category must be one of"):
        store.events.add_review(ev["thanks"].id, "alice", "wrong_category", "praise")
    with pytest.raises(NotFound):
        store.events.add_review("no-such-event", "alice", "correct")
    store.events.add_review(ev["saving"].id, "alice", "correct")
    second = store.events.add_review(ev["saving"].id, "bob", "wrong_category", "aware_with_correction")
    assert [r.reviewer for r in store.events.event_reviews(ev["saving"].id)] == ["alice", "bob"]
    latest, = store.events.reviewed_events()
    assert latest.reviewer == "bob" and latest.true_category == "aware_with_correction"
    assert second.as_dict()["corrected_category"] == "aware_with_correction"


def test_sample_is_random_repeatable_with_a_seed_and_skips_reviewed(mined):
    store, ev, _ = mined
    first = store.events.review_sample(10, seed=7)
    assert {e["id"] for e in first} == {e.id for e in ev.values()}
    assert [e["id"] for e in store.events.review_sample(10, seed=7)] == [e["id"] for e in first]
    assert any([e["id"] for e in store.events.review_sample(10, seed=s)] != [e["id"] for e in first] for s in range(8))
    head = first[0]
    assert head["message"][head["span_start"]:head["span_end"]] == head["span"]
    assert head["answer"] and head["request"] and head["reviews"] == 0
    store.events.add_review(head["id"], "alice", "correct")
    assert head["id"] not in {e["id"] for e in store.events.review_sample(10)}
    assert head["id"] in {e["id"] for e in store.events.review_sample(10, include_reviewed=True)}
    assert {e["category"] for e in store.events.review_sample(10, category="positive")} == {"positive"}
    assert [e["id"] for e in store.events.review_sample(10, extractor="llm", include_reviewed=True)] == [ev["meaning_llm"].id]


def test_wilson_interval():
    p, low, high = wilson(8, 10)
    assert p == 0.8 and low == pytest.approx(0.4902, abs=1e-3) and high == pytest.approx(0.9433, abs=1e-3)
    assert wilson(0, 0) == (0.0, 0.0, 1.0)
    assert wilson(3, 3)[1] == pytest.approx(0.4385, abs=1e-3) and wilson(3, 3)[2] == 1.0
    assert week_of(datetime(2024, 5, 9, 23, 30, tzinfo=timezone.utc)) == "2024-05-06"


def test_precision_by_category_and_week(mined):
    store, ev, _ = mined
    last_week = datetime.now(timezone.utc) - timedelta(days=7)
    poke(store, "UPDATE feedback_events SET created_at = ? WHERE id = ?", [last_week, ev["which"].id])
    store.events.add_review(ev["thanks"].id, "alice", "correct")
    store.events.add_review(ev["which"].id, "alice", "wrong_category", "ask_clarification")
    store.events.add_review(ev["meaning"].id, "alice", "correct")
    store.events.add_review(ev["saving"].id, "alice", "not_feedback")
    p = precision(store.events.reviewed_events())
    assert p["overall"]["positive"] == {"reviewed": 2, "correct": 1, "precision": 0.5,
                                        "low": pytest.approx(0.0945, abs=1e-3), "high": pytest.approx(0.9055, abs=1e-3)}
    assert p["overall"]["all"]["reviewed"] == 4 and p["overall"]["all"]["correct"] == 2
    assert p["overall"]["repeat_rephrase"]["reviewed"] == 0
    weeks = {(w["week"], w["category"]): w for w in p["weeks"]}
    assert weeks[(week_of(last_week), "positive")]["precision"] == 0.0
    assert weeks[(week_of(datetime.now(timezone.utc)), "positive")]["precision"] == 1.0
    assert p["corrections"]["positive"] == {"ask_clarification": 1}
    assert p["corrections"]["aware_without_correction"] == {"not_feedback": 1}
    assert precision(store.events.reviewed_events(extractor="llm"))["overall"]["all"]["reviewed"] == 0
    by_version = {(v["version"], v["category"]): v for v in p["by_version"]}
    assert set(by_version) == {("fast fast-test", c) for c in ("positive", "ask_clarification",
                                                               "aware_without_correction", "all")}
    assert by_version[("fast fast-test", "all")]["reviewed"] == 4 and by_version[("fast fast-test", "all")]["correct"] == 2


def test_precision_by_extractor_version_matches_what_training_sets_name(mined):
    """A training set's card and a canary's verdict name the extractor versions of the events they
    used (`extractor_versions`); the review estimate is keyed by the same names."""
    from store.analytics import extractor_versions

    store, ev, (a, b, c) = mined
    store.events.add_review(ev["meaning"].id, "alice", "correct")
    store.events.add_review(ev["meaning_llm"].id, "alice", "not_feedback")
    versions = {v["version"]: v for v in precision(store.events.reviewed_events())["by_version"] if v["category"] == "all"}
    assert versions["fast fast-test"]["precision"] == 1.0 and versions["llm llm-test"]["precision"] == 0.0
    assert extractor_versions(store, conversations=[a[0].conversation_id]) == {"fast fast-test": 2, "llm llm-test": 1}
    assert extractor_versions(store, answers=[b[1].id, c[1].id]) == {"fast fast-test": 2}
    assert extractor_versions(store) == {}


def test_export_round_trips_through_load_gold_and_evaluate(mined, tmp_path):
    store, ev, (a, b, c) = mined
    store.events.add_review(ev["thanks"].id, "alice", "correct")
    store.events.add_review(ev["meaning"].id, "alice", "correct")
    store.events.add_review(ev["meaning_llm"].id, "bob", "correct")  # the same span, found by both: one item
    store.events.add_review(ev["saving"].id, "alice", "wrong_category", "aware_with_correction")
    store.events.add_review(ev["which"].id, "bob", "not_feedback")
    path = tmp_path / "reviews.jsonl"
    assert export_gold(store, path) == 3
    gold = {g.id: g for g in load_gold(path)}
    first = gold[f"review/{a[2].id}"]
    assert [m["content"] for m in first.messages] == [REQUEST, ANSWER, a[2].content]  # up to the reviewed turn
    assert [(f.message, f.category, f.span) for f in first.feedback] == [
        (2, "positive", "Thanks!"), (2, "ask_clarification", "What do you mean by wind-down?")]
    assert first.extra["annotated_messages"] == [2] and first.split is None
    assert first.extra["source"]["reviewers"] == ["alice", "bob"]
    assert [(f.category, f.span) for f in gold[f"review/{b[2].id}"].feedback] == [
        ("aware_with_correction", "No, I asked about saving, not spending.")]
    assert gold[f"review/{c[2].id}"].feedback == ()  # not feedback: the message holds none
    # Scoring an extractor on the export: the reviewed messages only.
    reply = '{"User Response Pattern": "UR5", "User Response Text": "Thanks!"}'
    predictions, run = predict(LLMExtractor(lambda batch: [reply] * len(batch)), list(gold.values()))
    metrics = evaluate(list(gold.values()), predictions, n_bootstrap=50)
    assert run.stats["prompts"] == 3 and metrics["n_gold"] == 3 and metrics["span_precision"]["value"] == 1.0
    assert metrics["span_recall"]["value"] == pytest.approx(1 / 3, abs=1e-3)


def test_forgetting_a_user_deletes_their_events_reviews(mined):
    store, ev, _ = mined
    store.events.add_review(ev["which"].id, "alice", "correct")  # u2's
    store.events.add_review(ev["thanks"].id, "alice", "correct")  # u1's
    counts = store.privacy.forget_user("u2")
    assert counts["event_reviews"] == 1
    assert peek(store, "SELECT event_id FROM event_reviews") == [(ev["thanks"].id,)]


def test_cli_export_writes_a_gold_file(tmp_path):
    from deploy.wiring import build_cli

    data_dir = tmp_path / "data"
    with Store(data_dir / "advisor.duckdb") as store:
        turns = conversation(store, [REQUEST, ANSWER, "Thanks, that helps!"])
        event = mine(store, turns[2], turns[1], "positive", "Thanks, that helps!")
        store.events.add_review(event.id, "alice", "correct")
    out = tmp_path / "gold" / "reviews.jsonl"
    runner = CliRunner()
    result = runner.invoke(build_cli(), ["--data-dir", str(data_dir), "extract", "reviews", "export", "--out", str(out)])
    assert result.exit_code == 0, result.output
    gold, = load_gold(out)
    assert [(f.category, f.span) for f in gold.feedback] == [("positive", "Thanks, that helps!")]
    result = runner.invoke(build_cli(), ["--data-dir", str(data_dir), "extract", "reviews", "precision", "--json"])
    assert json.loads(result.stdout)["overall"]["positive"]["precision"] == 1.0
    with Store(data_dir / "advisor.duckdb") as store:
        entry, = store.audit.list(action="export")
        assert entry.target == "reviews-gold" and entry.details["rows"] == 1 and entry.actor.startswith("cli")


# ---------------------------------------------------------------- the admin API and the panel


@pytest.fixture(scope="module")
def svc(tiny_model_dir, tmp_path_factory):
    service = start_service(tiny_settings(tmp_path_factory.mktemp("reviews-api"), tiny_model_dir), ui=False)
    yield service
    service.stop()


def _seed(store: Store, text: str) -> FeedbackEvent:
    turns = conversation(store, [REQUEST, ANSWER, text])
    return mine(store, turns[2], turns[1], "positive", text)


def test_admin_api_samples_reviews_and_reports_precision(svc):
    ok, wrong = _seed(svc.store, "Thanks, that worked!"), _seed(svc.store, "Is that right?")
    with svc.client() as anon:
        assert anon.get("/api/admin/feedback/sample").status_code == 401
        assert anon.post(f"/api/admin/feedback/{ok.id}/review", json={"verdict": "correct"}).status_code == 401
    with svc.admin() as admin:
        sample = admin.get("/api/admin/feedback/sample", params={"limit": 50, "seed": "s1"}).json()["events"]
        assert {ok.id, wrong.id} <= {e["id"] for e in sample}
        e = next(e for e in sample if e["id"] == ok.id)
        assert e["message"][e["span_start"]:e["span_end"]] == e["span"] and e["answer"] == ANSWER
        r = admin.post(f"/api/admin/feedback/{ok.id}/review", json={"verdict": "correct"})
        assert r.status_code == 201 and r.json()["reviewer"] == "admin-token"
        r = admin.post(f"/api/admin/feedback/{wrong.id}/review", json={"verdict": "wrong_category"})
        assert r.status_code == 400 and "exactly when" in r.json()["error"]["message"]
        r = admin.post(f"/api/admin/feedback/{wrong.id}/review",
                       json={"verdict": "wrong_category", "category": "aware_without_correction"})
        assert r.status_code == 201
        assert admin.post("/api/admin/feedback/nope/review", json={"verdict": "correct"}).status_code == 404
        assert admin.post(f"/api/admin/feedback/{ok.id}/review", json={"verdict": "meh"}).status_code in (400, 422)
        assert ok.id not in {e["id"] for e in admin.get("/api/admin/feedback/sample").json()["events"]}
        p = admin.get("/api/admin/feedback/precision").json()
        assert p["overall"]["positive"]["reviewed"] >= 2 and "Wilson" in p["method"]
    reviews = svc.store.audit.list(action="review")
    assert {(e.target, e.details["outcome"]) for e in reviews} >= {
        (ok.id, "ok"), (wrong.id, "refused"), (wrong.id, "ok"), ("nope", "refused")}
    assert all(e.actor == "admin-token" and e.details["surface"] == "api" for e in reviews)


def test_review_panel_handlers_without_a_browser(svc):
    import gradio as gr

    from deploy.operator.review import ReviewPanel
    from deploy.operator.screen import PanelContext
    from deploy.service.auth import Identity
    from deploy.wiring import operator_panels

    panel, = [b for b in operator_panels(svc.services) if isinstance(b, ReviewPanel)]
    admin, nobody = Identity("admin", "admin", True, "cookie"), Identity("u9", None, False, "cookie")
    ctx = PanelContext(store=lambda: svc.store, identify=lambda request: request, denied="operators only",
                       refresh_triggers=[])
    with gr.Blocks():
        panel(ctx)  # builds without a browser
    events = [_seed(svc.store, f"Great tip number {k}, thanks!") for k in range(3)]

    assert panel.draw(ctx, "any", "any", nobody) == ([], "", "operators only")
    queue, card, note = panel.draw(ctx, "positive", "fast", admin)
    assert {e.id for e in events} <= {e["id"] for e in queue} and note.endswith("drawn.")
    assert "<mark" in card and "found by fast" in card
    head = queue[0]
    denied = panel.submit(ctx, queue, "correct", None, nobody)
    assert denied[2] == "operators only" and svc.store.events.event_reviews(head["id"]) == []
    assert panel.submit(ctx, queue, None, None, admin)[2] == "Choose a verdict."
    queue2, card2, note, table, plot = panel.submit(ctx, queue, "correct", None, admin)
    assert queue2 == queue[1:] and note.startswith("✅") and svc.store.events.event_reviews(head["id"])[0].verdict == "correct"
    refused = panel.submit(ctx, queue2, "wrong category", None, admin)
    assert refused[2].startswith("❌ Not recorded") and refused[0] == queue2  # stays at the head
    queue3, *_ = panel.submit(ctx, queue2, "wrong category", "ask_clarification", admin)
    queue4, _, _, table, plot = panel.submit(ctx, queue3, "not feedback", None, admin)
    assert len(queue4) == len(queue) - 3
    overall = table[(table["week"] == "all weeks") & (table["extractor version"] == "all versions")]
    overall = overall.set_index("category")
    assert overall.loc["positive", "reviewed"] >= 3 and 0 <= overall.loc["positive", "95% low"] <= 1
    versions = table[table["extractor version"] != "all versions"]
    assert set(versions["extractor version"]) == {"fast fast-test"} and (versions["reviewed"] > 0).all()
    assert set(plot["category"]) <= {"positive", "aware_without_correction"} and not plot.empty
    entries = [e for e in svc.store.audit.list(action="review") if e.details["surface"] == "operator"]
    assert len(entries) == 4 and {e.actor for e in entries} == {"admin"}
    assert panel.load(ctx, nobody)[1] is None and not panel.load(ctx, admin)[0].empty
