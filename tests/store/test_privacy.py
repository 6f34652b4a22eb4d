"""People's data: consent, PII kept out of training, retention, deletion that reaches
every copy under the data directory, and a person's own export.

The PII redactor here is the real one (Presidio); the training sets are built by the same
function every training path calls. Copies are checked by grepping the data directory's bytes."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from data_helpers import V1, Chat
from store_peek import poke

from deploy.loop.privacy import apply_retention, delete_conversation_everywhere, forget_everywhere, training_data_rules
from deploy.settings import load_settings
from feedback.datasets import build_dataset
from feedback.export import user_export
from store import Store
from store.taxonomy import POSITIVE

SECRET = "Zorblax Quuxington at zorblax.quux@example.org"  # distinctive: greppable, a name and an e-mail


def settings_for(data_dir: Path, **overrides):
    return load_settings(environ={}, overrides={"data_dir": str(data_dir), **overrides})


def liked_chat(store, user: str, question: str, answer: str = "Talk to them calmly, then agree on a rota."):
    chat = Chat(store, user)
    q = chat.user_says(question)
    a = chat.answer(q, answer, V1)
    thanks = chat.user_says("Thanks, that really helped!", parent=a)
    chat.feedback(thanks, a, POSITIVE)
    store.conversations.rate(a.id, user, 1)
    return chat, q, a


def grep(root: Path, needle: str) -> list[str]:
    out = subprocess.run(["grep", "-rl", "--binary-files=text", needle, str(root)], capture_output=True, text=True)
    return out.stdout.split()


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "data"


@pytest.fixture
def settings(data_dir):
    return settings_for(data_dir)


@pytest.fixture
def db(settings):
    with Store(settings.db_path) as store:
        yield store


def rows(out_dir: Path) -> list[dict]:
    return [*pq.read_table(out_dir / "train.parquet").to_pylist(), *pq.read_table(out_dir / "eval.parquet").to_pylist()]


def test_opted_out_users_never_reach_a_training_set(db, settings, tmp_path):
    liked_chat(db, "keen", "My flatmate leaves dishes everywhere. What should I say?")
    liked_chat(db, "shy", "My sister borrows money and never pays back. How do I raise it?")
    liked_chat(db, "unsure", "My boss emails me at midnight. Should I answer?")
    db.users.set_training_consent("shy", False)
    db.users.set_training_consent("keen", True)
    card = build_dataset(db, "kto", tmp_path / "with-default-on", consent_default=True)
    users = {r["user_id"] for r in rows(tmp_path / "with-default-on")}
    assert users == {"keen", "unsure"} and card.dropped["opted_out_conversations"] == 1
    assert card.users == ["keen", "unsure"]
    card = build_dataset(db, "kto", tmp_path / "with-default-off", consent_default=False)
    assert {r["user_id"] for r in rows(tmp_path / "with-default-off")} == {"keen"}
    assert card.dropped["opted_out_conversations"] == 2
    assert "opted_out_conversations: 2" in (tmp_path / "with-default-off" / "dataset_card.md").read_text()


def test_personal_data_is_absent_from_the_training_set_and_present_in_the_users_own_view(db, settings, tmp_path):
    question = (f"My landlord {SECRET} (call him on +44 20 7946 0958) keeps my deposit. "
                "How do I ask for it back?")
    chat, q, a = liked_chat(db, "tenant", question)
    build_dataset(db, "kto", tmp_path / "set", **training_data_rules(settings))
    text = json.dumps(rows(tmp_path / "set"))
    for leaked in ("Zorblax", "zorblax.quux@example.org", "7946 0958"):
        assert leaked not in text
    assert "<EMAIL>" in text and "<PHONE>" in text and "<PERSON>" in text
    card = json.loads((tmp_path / "set" / "dataset_card.json").read_text())
    assert card["redaction"]["replaced"]["EMAIL"] >= 1
    # The stored conversation stays as the user wrote it: they see their own words.
    assert db.conversations.get_messages(chat.id)[0].content == question
    mine = user_export(db, "tenant")
    assert mine["conversations"][0]["messages"][0]["content"] == question


def test_retention_deletes_exactly_the_old_conversations(db, data_dir):
    settings = settings_for(data_dir, **{"privacy.retention_days": 30})
    old, _, _ = liked_chat(db, "ann", f"An old question from {SECRET} about my neighbour's dog")
    recent, _, _ = liked_chat(db, "ann", "A recent question about my neighbour's cat")
    other_old, _, _ = liked_chat(db, "bob", "Another old question about my garden fence")
    long_ago = datetime.now(timezone.utc) - timedelta(days=45)
    for conv in (old, other_old):
        poke(db, "UPDATE conversations SET updated_at = ? WHERE id = ?", [long_ago, conv.id])
    out = apply_retention(db, settings)
    assert out["deleted"]["conversations"] == 2
    assert [c.id for c in db.conversations.list("ann")] == [recent.id] and db.conversations.list("bob") == []
    assert db.conversations.get_messages(recent.id) and not grep(data_dir, "Zorblax")
    assert apply_retention(db, settings_for(data_dir, **{"privacy.retention_days": 0}))["status"] == "skipped"


def test_retention_is_on_by_default_a_year(db, data_dir):
    default = settings_for(data_dir)
    assert default.privacy.retention_days == 365
    stale, _, _ = liked_chat(db, "ann", "A question from two years ago about my neighbour's dog")
    idle, _, _ = liked_chat(db, "ann", "A question from eleven months ago about my neighbour's cat")
    now = datetime.now(timezone.utc)
    poke(db, "UPDATE conversations SET updated_at = ? WHERE id = ?", [now - timedelta(days=730), stale.id])
    poke(db, "UPDATE conversations SET updated_at = ? WHERE id = ?", [now - timedelta(days=335), idle.id])
    out = apply_retention(db, default)
    assert out["deleted"]["conversations"] == 1 and [c.id for c in db.conversations.list("ann")] == [idle.id]


def test_forget_leaves_no_trace_under_the_data_directory_and_marks_releases(db, settings, data_dir):
    liked_chat(db, "gone", f"My ex, {SECRET}, keeps texting me. What do I do?")
    liked_chat(db, "stays", "How do I tell my friend I cannot come to her wedding?")
    # Copies a deployment makes: a run's training snapshot, a dataset directory, an export.
    run_dir = data_dir / "runs" / "run-1"
    card = build_dataset(db, "kto", run_dir, consent_default=True, redactor=None)
    db.jobs.create_training_run(run_id="run-1", method="kto", run_dir=str(run_dir), base_model="m")
    db.privacy.record_run_users("run-1", card.users)
    release = db.releases.create(base_model="m", adapter_path=str(run_dir / "adapter"), run_id="run-1")
    build_dataset(db, "sft", data_dir / "datasets" / "mine", consent_default=True)
    from feedback.export import export_jsonl

    export_jsonl(db, data_dir / "exports" / "all.jsonl")
    (data_dir / "reports").mkdir()
    (data_dir / "reports" / "notes.md").write_text(f"Example seen: My ex, {SECRET}, keeps texting me. What do I do?\n")
    assert len(grep(data_dir, "Zorblax")) >= 4

    out = forget_everywhere(db, settings, "gone")
    assert out["deleted"]["conversations"] == 1 and out["copies"]["files_changed"] >= 4
    assert grep(data_dir, "Zorblax") == [], "a copy of the forgotten user's words survived"
    assert grep(data_dir, "zorblax.quux") == []
    # Everyone else's rows survive the purge.
    assert any(r["user_id"] == "stays" for r in rows(run_dir))
    assert "wedding" in (data_dir / "exports" / "all.jsonl").read_text()
    assert db.privacy.forgotten_users_per_release() == {release.id: 1}


def test_deleting_one_conversation_reaches_its_copies_too(db, settings, data_dir):
    chat, _, _ = liked_chat(db, "ann", f"Question naming {SECRET} that I regret asking")
    keep, _, _ = liked_chat(db, "ann", "A question about my neighbour's cat that I keep")
    build_dataset(db, "kto", data_dir / "runs" / "r", consent_default=True)
    out = delete_conversation_everywhere(db, settings, chat.id, "ann")
    assert out["deleted"]["conversations"] == 1
    assert grep(data_dir, "Zorblax") == [] and [c.id for c in db.conversations.list("ann")] == [keep.id]
