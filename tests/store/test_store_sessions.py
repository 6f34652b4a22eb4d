"""The store's sessions, log-in attempts and audit log (store/users.py, audit.py)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

NOW = datetime(2030, 1, 1, 12, 0, tzinfo=UTC)
DAY = timedelta(days=1)


def test_a_session_row_is_written_once_and_read_with_its_user_name(store):
    store.users.create("erin", password_hash="x")
    uid = store.users.get_by_name("erin").id
    assert store.users.create_session("h1", uid, expires_at=NOW + DAY, now=NOW, user_agent="ua " * 200)
    assert not store.users.create_session("h1", "someone-else", expires_at=NOW + DAY, now=NOW)  # left as it was
    s = store.users.get_session("h1")
    assert (s.user_id, s.user_name, s.revoked_at, len(s.user_agent)) == (uid, "erin", None, 200)
    assert store.users.get_session("nope") is None


def test_revoking_sticks_even_for_a_session_without_a_row(store):
    store.users.revoke_session("guest", user_id="g1", now=NOW, expires_at=NOW + DAY)
    s = store.users.get_session("guest")
    assert s.revoked_at == NOW and s.expires_at == NOW + DAY
    store.users.create_session("guest", "g1", expires_at=NOW + 2 * DAY, now=NOW)  # a later lazy write keeps it revoked
    assert store.users.get_session("guest").revoked_at == NOW
    store.users.touch_session("guest", now=NOW + DAY, expires_at=NOW + 9 * DAY)  # a revoked row is not slid
    assert store.users.get_session("guest").expires_at == NOW + DAY


def test_password_change_ends_the_other_sessions_in_one_go(store):
    user = store.users.create("fay", password_hash="old")
    for sid in ("a", "b", "c"):
        store.users.create_session(sid, user.id, expires_at=NOW + DAY, now=NOW)
    assert store.users.change_password(user.id, "new", now=NOW, keep="b") == 2
    assert store.users.get(user.id).password_hash == "new"
    assert [s.id for s in store.users.list_sessions(user.id, now=NOW)] == ["b"]
    assert store.users.revoke_user_sessions(user.id, now=NOW) == 1 and store.users.list_sessions(user.id, now=NOW) == []


def test_forgetting_a_user_deletes_their_sessions(store):
    store.users.ensure("gus")
    store.users.create_session("s1", "gus", expires_at=NOW + DAY, now=NOW)
    assert store.users.session_owner("gus") == (True, False)
    assert store.privacy.forget_user("gus")["sessions"] == 1
    assert store.users.get_session("s1") is None and store.users.session_owner("gus") == (False, True)


def test_pruning_keeps_revoked_rows_until_they_would_have_expired(store):
    store.users.create_session("old", "u", expires_at=NOW - DAY, now=NOW - 2 * DAY)
    store.users.revoke_session("revoked", user_id="u", now=NOW, expires_at=NOW + DAY)
    assert store.users.prune_sessions(before=NOW) == 1
    assert store.users.get_session("old") is None and store.users.get_session("revoked").revoked_at == NOW


def test_login_attempts_are_kept_by_lower_cased_name(store):
    store.users.record_login_attempt("Hana", False, now=NOW - timedelta(minutes=30))
    store.users.record_login_attempt("HANA", False, now=NOW)
    store.users.record_login_attempt("hana", True, now=NOW + timedelta(seconds=1))
    assert store.users.login_attempts("hAnA", since=NOW - timedelta(minutes=1)) == [(False, NOW), (True, NOW + timedelta(seconds=1))]
    assert store.users.prune_login_attempts(before=NOW) == 1


def test_audit_log_is_appended_and_listed_newest_first(store):
    first = store.audit.record("cli:ops", "promote", "r-1", {"force": True})
    store.audit.record("admin", "rollback", "r-1")
    assert first.details == {"force": True} and first.created_at is not None
    assert [e.action for e in store.audit.list()] == ["rollback", "promote"]
    assert [e.as_dict()["actor"] for e in store.audit.list(action="promote")] == ["cli:ops"]
    assert store.audit.list(limit=1)[0].action == "rollback" and store.audit.list(action="forget") == []
