"""Sessions that end, through the real service over HTTP: sign-out, sign-out everywhere, a password
change, admin expiry, forgotten users, forged and old cookies, guests' lazy rows, and the log-in
throttle (its settings made small so the test takes seconds)."""

from __future__ import annotations

import time
from datetime import timedelta

import pytest
from itsdangerous import TimestampSigner, URLSafeTimedSerializer
from service_helpers import ADMIN_PASSWORD, start_service, tiny_settings

from deploy.service.auth import COOKIE_NAME
from deploy.service.sessions import row_id

THROTTLE = {"server.login_delay_s": 0.5, "server.login_max_failures": 3, "server.login_window_minutes": 0.1,
            "server.login_lockout_minutes": 0.05}  # 0.5 s, then 1 s; 3 failures in 6 s lock for 3 s


@pytest.fixture(scope="module")
def svc(tiny_model_dir, tmp_path_factory):
    service = start_service(tiny_settings(tmp_path_factory.mktemp("sessions"), tiny_model_dir, **THROTTLE))
    yield service
    service.stop()


def _cookie(client) -> str:
    return client.cookies[COOKIE_NAME]


def _holding(svc, cookie: str):
    """A second client that holds a copy of someone's cookie (another device, or a thief)."""
    return svc.client(cookies={COOKIE_NAME: cookie})


def _signed_up(svc, name: str, password: str = "a long password"):
    c = svc.client()
    r = c.post("/api/signup", json={"name": name, "password": password})
    assert r.status_code == 200, r.text
    return c, r.json()["user_id"]


def _refused_everywhere(svc, cookie: str, user_id: str) -> None:
    """Neither the API nor the UI's resolver (`Auth.from_cookies`) accepts the cookie any more."""
    with _holding(svc, cookie) as other:
        me = other.get("/api/me").json()
        assert me["user_id"] != user_id and me["name"] is None and not me["is_admin"]
    assert svc.services.auth.from_cookies({COOKIE_NAME: cookie}) is None


def test_sign_out_ends_the_session_for_every_copy_of_the_cookie(svc):
    c, uid = _signed_up(svc, "ana")
    cookie = _cookie(c)
    with _holding(svc, cookie) as copy:
        assert copy.get("/api/me").json()["name"] == "ana"
        assert svc.services.auth.from_cookies({COOKIE_NAME: cookie}).user_id == uid
        assert c.post("/api/logout").json()["name"] is None
        assert copy.get("/api/me").json()["name"] is None  # at once: the revocation dropped the cache
    assert svc.store.users.get_session(row_id(svc.services.auth.sessions.parse(cookie).token)).revoked_at is not None
    _refused_everywhere(svc, cookie, uid)
    assert c.post("/api/login", json={"name": "ana", "password": "a long password"}).status_code == 200


def test_sign_out_everywhere_ends_every_session_of_the_user(svc):
    laptop, uid = _signed_up(svc, "ben")
    phone = svc.client()
    assert phone.post("/api/login", json={"name": "ben", "password": "a long password"}).status_code == 200
    old = {"laptop": _cookie(laptop), "phone": _cookie(phone)}
    r = phone.post("/api/logout", params={"everywhere": "true"})
    assert r.status_code == 200 and r.json()["ended_elsewhere"] == 1 and r.json()["name"] is None
    for cookie in old.values():
        _refused_everywhere(svc, cookie, uid)
    assert laptop.get("/api/me").json()["name"] is None
    # The sign-in page's button does the same with a form post.
    assert phone.post("/api/login", json={"name": "ben", "password": "a long password"}).status_code == 200
    again = _cookie(phone)
    assert 'id="signout-everywhere"' in phone.get("/signin").text
    assert phone.post("/signout", data={"everywhere": "1"}).status_code == 303
    _refused_everywhere(svc, again, uid)


def test_a_password_change_ends_the_other_sessions_and_keeps_this_one(svc):
    here, uid = _signed_up(svc, "cora", "old password 1")
    there = svc.client()
    there.post("/api/login", json={"name": "cora", "password": "old password 1"})
    there_cookie = _cookie(there)
    wrong = here.post("/api/me/password", json={"old_password": "not it at all", "new_password": "new password 2"})
    assert wrong.status_code == 400 and "current password" in wrong.json()["error"]["message"]
    time.sleep(0.6)  # the throttle counted that failure
    r = here.post("/api/me/password", json={"old_password": "old password 1", "new_password": "new password 2"})
    assert r.status_code == 200 and r.json() == {"changed": True, "ended_elsewhere": 1}
    assert here.get("/api/me").json()["name"] == "cora"
    _refused_everywhere(svc, there_cookie, uid)
    with svc.client() as fresh:
        assert fresh.post("/api/login", json={"name": "cora", "password": "old password 1"}).status_code == 401
        time.sleep(0.6)
        assert fresh.post("/api/login", json={"name": "cora", "password": "new password 2"}).status_code == 200
    with svc.client() as guest:
        assert guest.post("/api/me/password", json={"old_password": "x", "new_password": "long enough"}).status_code == 400


def test_an_admin_session_expires_within_its_hours(svc):
    auth = svc.services.auth
    with svc.client() as op:
        r = op.post("/api/login", json={"name": "admin", "password": ADMIN_PASSWORD})
        assert r.json()["is_admin"] and "Max-Age=28800" in r.headers["set-cookie"]  # 8 h, not a year
        cookie = _cookie(op)
        assert op.get("/api/admin/stats").status_code == 200
        real = auth.clock
        try:
            auth.clock = lambda: real() + timedelta(hours=7, minutes=59)
            assert op.get("/api/admin/stats").status_code == 200  # busy: touched, but not extended
            time.sleep(1.1)  # past the session cache
            auth.clock = lambda: real() + timedelta(hours=8, minutes=1)
            assert op.get("/api/admin/stats").status_code == 401
            assert op.get("/api/me").json()["is_admin"] is False
            assert auth.from_cookies({COOKIE_NAME: cookie}) is None
        finally:
            auth.clock = real


def test_a_named_session_lasts_while_used_and_ends_when_idle(svc):
    auth = svc.services.auth
    c, uid = _signed_up(svc, "dov")
    real = auth.clock
    try:
        auth.clock = lambda: real() + timedelta(days=29)
        assert c.get("/api/me").json()["user_id"] == uid  # used on day 29: slides to day 59
        time.sleep(1.1)
        auth.clock = lambda: real() + timedelta(days=58)
        assert c.get("/api/me").json()["user_id"] == uid
        cookie = _cookie(c)
        time.sleep(1.1)
        auth.clock = lambda: real() + timedelta(days=89)  # 31 idle days
        assert auth.from_cookies({COOKIE_NAME: cookie}) is None
    finally:
        auth.clock = real


def test_guests_get_a_session_row_only_once_they_write(svc):
    with svc.client() as guest:
        uid = guest.get("/api/me").json()["user_id"]
        guest.get("/healthz")
        assert svc.store.users.list_sessions(uid) == []  # a visit that never chats writes nothing
        r = guest.post("/api/messages", json={"content": "Should I take the job offer?"})
        assert r.status_code == 200, r.text
        time.sleep(1.1)  # past the cache: the next check sees the user row and writes the session's
        assert guest.get("/api/me").json()["user_id"] == uid
        assert [s.user_id for s in svc.store.users.list_sessions(uid)] == [uid]
    with svc.client() as visitor:  # a guest without a row can still sign out for good
        uid = visitor.get("/api/me").json()["user_id"]
        cookie = _cookie(visitor)
        visitor.post("/api/logout")
        _refused_everywhere(svc, cookie, uid)


def test_forgotten_users_lose_every_session(svc):
    c, uid = _signed_up(svc, "eli")
    with svc.client() as other:
        assert other.post("/api/login", json={"name": "eli", "password": "a long password"}).status_code == 200
        other_cookie = _cookie(other)
    r = c.delete("/api/me", params={"confirm": "true"})
    assert r.status_code == 200 and r.json()["deleted"]["sessions"] == 2
    _refused_everywhere(svc, other_cookie, uid)
    with svc.client() as guest:  # and a guest who deletes their own data
        guest.post("/api/messages", json={"content": "Forget me after this"})
        gid, gcookie = guest.get("/api/me").json()["user_id"], _cookie(guest)
        assert guest.delete("/api/me", params={"confirm": "true"}).status_code == 200
    _refused_everywhere(svc, gcookie, gid)


def test_forged_and_old_cookies(svc):
    secret = svc.services.auth._secret
    with svc.client() as c:
        uid = c.get("/api/me").json()["user_id"]
        good = _cookie(c)
    forged = [good[:-3] + ("AAA" if not good.endswith("AAA") else "BBB"), "garbage",
              URLSafeTimedSerializer("not-the-secret", salt="advisor-session-v2").dumps({"s": "x", "u": uid, "t": 0})]
    for cookie in forged:
        _refused_everywhere(svc, cookie, uid)
    # Cookies from before server-side sessions: an anonymous one keeps its conversations, an admin one is dead.
    v1 = URLSafeTimedSerializer(secret, salt="advisor-session-v1")
    with _holding(svc, v1.dumps({"u": "old-guest", "n": None, "a": False})) as old_guest:
        assert old_guest.get("/api/me").json()["user_id"] == "old-guest"

    class MintedLongAgo(TimestampSigner):
        def get_timestamp(self) -> int:
            return int(time.time()) - days * 86400

    svc.store.users.ensure("regular")  # an active guest whose v1 cookie was minted 100 days ago
    for days, user, works in ((100, "regular", True), (366, "ancient", False)):
        old = URLSafeTimedSerializer(secret, salt="advisor-session-v1", signer=MintedLongAgo)
        cookie = old.dumps({"u": user, "n": None, "a": False})
        with _holding(svc, cookie) as c:
            assert (c.get("/api/me").json()["user_id"] == user) is works
    regular = svc.store.users.list_sessions("regular")  # from now on an ordinary session, idle rule included
    assert len(regular) == 1 and regular[0].expires_at - regular[0].created_at == timedelta(days=30)
    old_admin = v1.dumps({"u": "admin", "n": "admin", "a": True})
    with _holding(svc, old_admin) as c:
        assert c.get("/api/admin/stats").status_code == 401
    assert svc.services.auth.from_cookies({COOKIE_NAME: old_admin}) is None


def test_failed_log_ins_are_slowed_then_refused_then_allowed_again(svc):
    _signed_up(svc, "fox", "the right password")
    with svc.client() as c:
        def login(name: str, password: str = "a wrong password"):
            return c.post("/api/login", json={"name": name, "password": password})

        for name in ("fox", "nobody-by-this-name"):  # the same answers for an unknown name: no enumeration
            first = login(name)
            assert first.status_code == 401 and first.json()["error"]["message"] == "Wrong user name or password."
            slowed = login(name, "the right password")
            assert slowed.status_code == 429 and slowed.headers["retry-after"] == "1"
            assert "wait 1 second" in slowed.json()["error"]["message"]
            time.sleep(0.55)
            assert login(name).status_code == 401
            assert login(name).status_code == 429  # now 1 s
            time.sleep(1.05)
            assert login(name).status_code == 401  # the third failure within the window: locked
            locked = login(name, "the right password")
            assert locked.status_code == 429 and "paused for 1 more minute" in locked.json()["error"]["message"]
            assert int(locked.headers["retry-after"]) in (2, 3)
        page = c.post("/signin", data={"name": "fox", "password": "the right password"})
        assert page.status_code == 429 and "paused" in page.text
        time.sleep(3.1)
        assert login("fox", "the right password").status_code == 200
