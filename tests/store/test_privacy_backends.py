"""People's data on both backends (DuckDB and a real PostgreSQL server): consent kept strictly when
a guest signs in, a person's own export holding every row keyed to them, forgetting end to end
(every table, the analytics mirror, the data directory, the database's freed space), and exports
recorded so forgetting can name the copies it cannot reach."""

from __future__ import annotations

import json
import subprocess
from datetime import datetime, timedelta, timezone
from pathlib import Path
from types import SimpleNamespace

import pytest
from data_helpers import V1, Chat
from store_peek import peek, poke, read
from typer.testing import CliRunner

from deploy.loop.privacy import forget_everywhere
from deploy.service.caller import adopt_guest_data
from deploy.service.sessions import Identity
from deploy.settings import load_settings
from deploy.wiring import build_cli
from feedback.datasets import build_dataset
from feedback.export import LEFT_OUT, export_jsonl, user_export
from store import Store
from store.privacy import DELETED_TABLES, EXPORTED_TABLES, NOT_EXPORTED
from store.taxonomy import POSITIVE

SECRET = "Zorblax Quuxington at zorblax.quux@example.org"
MERGED = "merged guest session: stricter consent kept"
# Rows keyed to a forgotten user that stay, on purpose: the id itself, so it is never written
# again, and which runs trained on them, so releases can be marked (weights cannot be un-trained).
KEPT_AFTER_FORGET = {"forgotten_users": 1, "run_users": 1}


@pytest.fixture
def data_dir(tmp_path):
    return tmp_path / "data"


@pytest.fixture
def both(store_target):
    """A store on each backend in turn; `store.dialect` says which."""
    with Store(store_target) as s:
        yield s


def settings_for(data_dir: Path):
    return load_settings(environ={}, overrides={"data_dir": str(data_dir)})


def user_id_tables(store) -> set[str]:
    """Every base table with a user_id column, as the backend itself has the schema."""
    return {t for (t,) in read(store, "SELECT c.table_name FROM information_schema.columns c "
                                      "JOIN information_schema.tables t ON t.table_name = c.table_name "
                                      "AND t.table_schema = c.table_schema WHERE c.column_name = 'user_id' "
                                      "AND t.table_type = 'BASE TABLE' AND c.table_schema = current_schema()")}


def everything_of(store, user: str, text: str = f"My ex, {SECRET}, keeps texting me. What do I do?"):
    """A person with a row in every table keyed to people: a conversation with a regenerated
    answer (kept by choice), a rating, a mined feedback event and its review, a session, a consent
    change, and a training run that used them."""
    chat = Chat(store, user)
    q = chat.user_says(text)
    first = chat.answer(q, "Block the number and tell a friend.", V1)
    kept = chat.answer(q, "Talk to someone you trust, then block the number.", V1)
    store.conversations.choose_sibling(kept.id, user)
    thanks = chat.user_says("Thanks, that really helped!", parent=kept)
    chat.feedback(thanks, kept, POSITIVE)
    store.conversations.rate(kept.id, user, 1, reasons=["clear"], comment="spot on")
    now = datetime.now(timezone.utc)
    store.users.create_session(f"hash-of-token-{user}", user, expires_at=now + timedelta(days=30), now=now,
                               user_agent="Firefox/140")
    store.users.set_training_consent(user, True)
    (event_id,) = read(store, "SELECT id FROM feedback_events WHERE message_id = ?", [thanks.id])[0]
    store.events.add_review(event_id, "admin", "correct")
    store.privacy.record_run_users(f"run-{user}", [user])
    return chat, first, kept


# --------------------------------------------------------------------------- consent on sign-in


def _sign_in(store, guest: str, account: str) -> dict:
    services = SimpleNamespace(store=store)
    return adopt_guest_data(services, Identity(guest, via="cookie"), Identity(account, name=account), surface="api")


def test_a_guests_opt_out_survives_signing_in_and_is_audited(both):
    account = both.users.create("dana", password_hash="x")
    both.users.set_training_consent(account.id, True)
    Chat(both, "guest-1").user_says("Keep this out of training, please.")
    both.users.set_training_consent("guest-1", False)

    moved = _sign_in(both, "guest-1", account.id)
    assert moved["conversations"] == 1 and moved["consent_changes"] == 1
    assert both.users.training_consent(account.id) is False, "signing in opted the guest's conversations back in"
    history = both.users.consent_history(account.id)
    assert [(old, new, why) for old, new, why, _ in history] == [
        (None, True, "set by the user"), (None, False, "set by the user"), (True, False, MERGED)]
    entry = both.audit.list(limit=1, action="consent")[0]
    assert (entry.actor, entry.target) == (account.id, account.id)
    assert entry.details["old"] is True and entry.details["new"] is False
    assert entry.details["reason"] == MERGED and entry.details["guest"] == "guest-1"


def test_signing_in_never_loosens_consent_and_changes_nothing_when_already_strict(both):
    strict = both.users.create("erin", password_hash="x")
    both.users.set_training_consent(strict.id, False)
    Chat(both, "guest-2").user_says("Use my chats, I don't mind.")
    both.users.set_training_consent("guest-2", True)
    moved = _sign_in(both, "guest-2", strict.id)
    assert both.users.training_consent(strict.id) is False and "consent" not in moved
    assert both.audit.list(action="consent") == []

    # A guest who never chose, under a deployment whose default may be "no": the account's
    # opt-in is not applied to the guest's conversations.
    keen = both.users.create("finn", password_hash="x")
    both.users.set_training_consent(keen.id, True)
    Chat(both, "guest-3").user_says("Hello")
    _sign_in(both, "guest-3", keen.id)
    assert both.users.training_consent(keen.id) is None


# --------------------------------------------------------------------------- the person's own export


def test_every_table_with_a_user_id_is_exported_or_left_out_with_a_reason(both):
    tables = user_id_tables(both)
    assert {"conversations", "ratings", "sessions", "consent_changes"} <= tables  # the query sees the schema
    unaccounted = tables - set(EXPORTED_TABLES) - set(NOT_EXPORTED)
    assert not unaccounted, (f"tables with a user_id column neither in the person's export nor listed as "
                             f"left out (store/privacy.py): {sorted(unaccounted)}")
    assert set(EXPORTED_TABLES) <= tables and set(NOT_EXPORTED) <= tables


def test_download_my_data_holds_every_row_keyed_to_the_person_and_no_secret(both):
    chat, first, kept = everything_of(both, "ann")
    everything_of(both, "bob", "Someone else's question about their landlord and the deposit")
    doc = json.loads(json.dumps(user_export(both, "ann"), default=str))

    assert doc["account"]["id"] == "ann" and "password_hash" not in doc["account"]
    (conv,) = doc["conversations"]
    assert conv["id"] == chat.id and len(conv["messages"]) == 4 and SECRET in conv["messages"][0]["content"]
    assert [(r["message_id"], r["value"], r["comment"]) for r in doc["ratings"]] == [(kept.id, 1, "spot on")]
    assert [c["message_id"] for c in doc["sibling_choices"]] == [kept.id]
    assert [(e["category"], e["target_message_id"]) for e in doc["feedback_events"]] == [(POSITIVE, kept.id)]
    (session,) = doc["sessions"]
    assert session["user_agent"] == "Firefox/140" and "id" not in session
    assert [(c["old_value"], c["new_value"]) for c in doc["consent_history"]] == [(None, True)]
    assert [r["run_id"] for r in doc["training_runs"]] == ["run-ann"]
    # What it leaves out, and why: every table left out, the secrets and what is shared across users.
    assert set(NOT_EXPORTED) | {"sessions.id", "users.password_hash", "trained adapters"} <= set(doc["left_out"])
    assert all(len(why) > 20 for why in doc["left_out"].values()) and doc["left_out"].keys() >= LEFT_OUT.keys()
    text = json.dumps(doc)
    assert "hash-of-token" not in text and "landlord" not in text and "run-bob" not in text


# --------------------------------------------------------------------------- forgetting, end to end


def _grep(root: Path, needle: str) -> list[str]:
    out = subprocess.run(["grep", "-rl", "--binary-files=text", needle, str(root)], capture_output=True, text=True)
    return out.stdout.split()


def test_forget_removes_every_row_mirror_copy_and_file_and_names_unreached_exports(both, data_dir, tmp_path):
    settings = settings_for(data_dir)
    before_any = tmp_path / "before.jsonl"
    both.privacy.record_export("cli:ops", "jsonl", str(before_any), 0)  # written before the user's first conversation
    poke(both, "UPDATE exports SET created_at = ?", [datetime.now(timezone.utc) - timedelta(days=1)])
    chat, _, _ = everything_of(both, "gone")
    everything_of(both, "stays", "How do I tell my friend I cannot come to her wedding?")
    # Copies: a dataset under the data directory, an export inside it and one outside, and stdout.
    build_dataset(both, "kto", data_dir / "datasets" / "kto", consent_default=True)
    export_jsonl(both, data_dir / "exports" / "all.jsonl")
    both.privacy.record_export("cli:ops", "jsonl", str((data_dir / "exports" / "all.jsonl").resolve()), 2)
    outside = tmp_path / "elsewhere" / "all.jsonl"
    export_jsonl(both, outside)
    both.privacy.record_export("cli:ops", "jsonl", str(outside), 2)
    both.privacy.record_export("cli:ops", "jsonl", "stdout", 2)
    assert peek(both, "SELECT count(*) FROM messages WHERE conversation_id = ?", [chat.id]) == [(4,)]
    assert len(_grep(data_dir, "Zorblax")) >= 2

    out = forget_everywhere(both, settings, "gone")

    # Rows: none left in any table keyed to the user, nor derived from their conversations.
    for table in user_id_tables(both):
        n = read(both, f"SELECT count(*) FROM {table} WHERE user_id = ?", ["gone"])[0][0]
        assert n == KEPT_AFTER_FORGET.get(table, 0), f"{table} still holds {n} row(s) of the forgotten user"
    for table in ("messages", "feedback_events", "sibling_choices"):
        assert read(both, f"SELECT count(*) FROM {table} WHERE conversation_id = ?", [chat.id]) == [(0,)]
    assert read(both, "SELECT count(*) FROM event_reviews") == [(1,)]  # the other user's review stays
    # The analytics mirror (PostgreSQL) or the file's own analytics (DuckDB) no longer shows them.
    assert peek(both, "SELECT count(*) FROM messages WHERE content LIKE '%Zorblax%'") == [(0,)]
    assert peek(both, "SELECT count(*) FROM conversations WHERE user_id = 'gone'") == [(0,)]
    assert peek(both, "SELECT count(*) FROM feedback_events WHERE conversation_id = ?", [chat.id]) == [(0,)]
    assert peek(both, "SELECT count(DISTINCT user_id) FROM conversations") == [(1,)]
    # Files under the data directory: purged (the DuckDB file rewritten), everyone else's rows kept.
    assert _grep(data_dir, "Zorblax") == [] and _grep(data_dir, "zorblax.quux") == []
    assert "wedding" in (data_dir / "exports" / "all.jsonl").read_text()
    # The copies it could not reach are named: outside the data directory or stdout, written
    # since the user's first conversation; the one inside was purged, the older one cannot hold them.
    assert out["unreached_exports"] == [str(outside), "stdout"]
    assert "Zorblax" in outside.read_text()  # still there: only the operator can delete it


def _table_files_holding(pg_server, url: str, needle: str) -> list[str]:
    """The files of this database's tables and indexes (not the server's WAL, not the other
    tests' databases) whose bytes hold `needle`, after a checkpoint wrote every page out."""
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        conn.execute("CHECKPOINT")
        (oid,) = conn.execute("SELECT oid FROM pg_database WHERE datname = current_database()").fetchone()
    return _grep(next(pg_server.root.rglob(f"base/{oid}")), needle)


def test_forget_on_postgres_vacuums_the_tables_it_deleted_from(pg_server, pg_url, data_dir):
    import psycopg

    with Store(pg_url) as store:
        everything_of(store, "gone")
        everything_of(store, "stays", "How do I tell my friend I cannot come to her wedding?")
        forget_everywhere(store, settings_for(data_dir), "gone")
    with psycopg.connect(pg_url, autocommit=True) as conn:
        vacuumed = dict(conn.execute("SELECT relname, last_vacuum IS NOT NULL FROM pg_stat_user_tables "
                                     "WHERE relname = ANY(%s)", [list(DELETED_TABLES)]).fetchall())
        conn.execute("CREATE EXTENSION IF NOT EXISTS pgstattuple")
        dead = {t: conn.execute("SELECT dead_tuple_count FROM pgstattuple(%s)", [t]).fetchone()[0]
                for t in DELETED_TABLES}
    assert set(vacuumed) == set(DELETED_TABLES) and all(vacuumed.values()), f"not vacuumed: {vacuumed}"
    assert all(n == 0 for n in dead.values()), f"dead rows left in the pages: {dead}"


def test_vacuum_full_leaves_no_deleted_bytes_in_the_table_files(pg_server, pg_url, data_dir):
    settings = load_settings(environ={}, overrides={"data_dir": str(data_dir), "privacy.vacuum_full": True})
    with Store(pg_url) as store:
        everything_of(store, "gone")
        everything_of(store, "stays", "How do I tell my friend I cannot come to her wedding?")
        assert _table_files_holding(pg_server, pg_url, "Zorblax")
        forget_everywhere(store, settings, "gone")
    assert _table_files_holding(pg_server, pg_url, "Zorblax") == []
    assert _table_files_holding(pg_server, pg_url, "wedding")  # the other user's rows are still there


def test_vacuum_refuses_to_run_inside_a_transaction(pg_url):
    from store import StoreError

    with Store(pg_url) as store, pytest.raises(StoreError, match="inside a transaction"):
        with store.transaction():
            store.privacy.reclaim_space()


# --------------------------------------------------------------------------- exports are recorded


def test_every_cli_export_is_recorded_and_forget_names_those_it_cannot_reach(store_target, data_dir, tmp_path):
    on_pg = isinstance(store_target, str)
    env = {"ADVISOR_STORE__URL": store_target} if on_pg else {}
    store_target = store_target if on_pg else data_dir / "advisor.duckdb"
    data_dir.mkdir(parents=True, exist_ok=True)
    with Store(store_target) as store:
        everything_of(store, "hana")
    runner, app, cli = CliRunner(), build_cli(), ["--data-dir", str(data_dir)]
    outside, inside = tmp_path / "out" / "all.jsonl", data_dir / "all.parquet"
    for args in (["export", "--out", str(outside)], ["export", "-f", "parquet", "--out", str(inside)],
                 ["export", "--for-sharing"]):
        result = runner.invoke(app, [*cli, *args], env=env)
        assert result.exit_code == 0, result.output
        assert "recorded this export" in result.output
    with Store(store_target) as store:
        records = store.privacy.exports_since(datetime.now(timezone.utc) - timedelta(hours=1))
        audit = store.audit.list(action="export")
    assert [(r.what, r.path) for r in records] == [
        ("jsonl", str(outside.resolve())), ("parquet", str(inside.resolve())), ("jsonl for sharing", "stdout")]
    assert records[0].row_count == 1 and records[1].row_count == 4
    assert {e.details["export_id"] for e in audit} == {r.id for r in records}

    result = runner.invoke(app, [*cli, "forget", "hana", "--yes"], env=env)
    assert result.exit_code == 0, result.output
    assert ("exports written before the forget that may still hold this user's data: "
            f"{outside.resolve()}, stdout") in " ".join(result.output.split())
    with Store(store_target) as store:
        entry = store.audit.list(limit=1, action="forget")[0]
    assert entry.details["unreached_exports"] == [str(outside.resolve()), "stdout"]
