"""The REST API for a person's own conversations and data (issues 16 and 18): consent on /api/me,
their export, delete / rename / search / page conversations, taking a rating back, and a guest's
conversations following them into the account they sign up for."""

from __future__ import annotations

import pytest
from service_helpers import live  # noqa: F401
from store_peek import peek


def _ask(client, content="My sister keeps borrowing money. What should I do?", **extra):
    r = client.post("/api/messages", json={"content": content, **extra})
    assert r.status_code == 200, r.text
    return r.json()


def test_consent_is_a_setting_on_me(live):
    with live.client() as c:
        me = c.get("/api/me").json()
        assert me["training_consent"] is None and me["training_consent_effective"] is True
        assert c.patch("/api/me", json={"training_consent": False}).json()["training_consent_effective"] is False
        assert live.store.users.training_consent(me["user_id"]) is False
        assert c.patch("/api/me", json={"training_consent": None}).json()["training_consent_effective"] is True
        assert c.patch("/api/me", json={"training_consent": "yes please"}).status_code == 400


def test_my_export_holds_my_conversations_ratings_and_settings_only(live):
    with live.client() as alice, live.client() as bob:
        a = _ask(alice, content="Alice's question about her noisy neighbour")
        _ask(bob, content="Bob's question about his brother")
        alice.post(f"/api/messages/{a['answer']['id']}/rating", json={"value": "like", "reasons": ["clear"]})
        r = alice.get("/api/me/export")
        assert r.status_code == 200 and "attachment" in r.headers["content-disposition"]
        data = r.json()
        text = str(data)
        assert "noisy neighbour" in text and "brother" not in text
        answer = data["conversations"][0]["messages"][1]
        assert answer["ratings"][0]["reasons"] == ["clear"] and "training_consent" in data["settings"]


def test_delete_one_conversation_removes_it_from_the_list_the_api_and_the_store(live):
    with live.client() as c, live.client() as other:
        keep = _ask(c, content="A conversation I keep")
        gone = _ask(c, content="A conversation I delete")
        conv = gone["conversation_id"]
        assert other.delete(f"/api/conversations/{conv}").status_code == 404  # not theirs
        r = c.delete(f"/api/conversations/{conv}")
        assert r.status_code == 200 and r.json()["deleted"]["messages"] == 2
        ids = [x["id"] for x in c.get("/api/conversations").json()["conversations"]]
        assert conv not in ids and keep["conversation_id"] in ids
        assert c.get(f"/api/conversations/{conv}").status_code == 404
        assert peek(live.store, "SELECT count(*) FROM messages WHERE conversation_id = ?", [conv])[0][0] == 0


def test_rename_search_and_pages(live):
    with live.client() as c:
        convs = [_ask(c, content=f"Question {i} about my {'garden' if i % 2 else 'kitchen'}")["conversation_id"]
                 for i in range(5)]
        r = c.patch(f"/api/conversations/{convs[0]}", json={"title": "Kitchen trouble"})
        assert r.status_code == 200 and r.json()["title"] == "Kitchen trouble"
        assert c.patch(f"/api/conversations/{convs[0]}", json={"title": ""}).status_code == 400
        found = c.get("/api/conversations", params={"q": "GARDEN"}).json()["conversations"]
        assert sorted(x["id"] for x in found) == sorted(convs[1::2])  # text search, case-insensitive
        assert [x["id"] for x in c.get("/api/conversations", params={"q": "trouble"}).json()["conversations"]] \
            == [convs[0]]  # titles too
        first = c.get("/api/conversations", params={"limit": 2}).json()
        second = c.get("/api/conversations", params={"limit": 2, "before": first["next_before"]}).json()
        seen = [x["id"] for x in first["conversations"] + second["conversations"]]
        assert len(set(seen)) == 4 and set(seen) <= set(convs)


def test_a_withdrawn_like_no_longer_counts(live):
    with live.client() as c, live.admin() as admin:
        before = admin.get("/api/admin/stats").json()["rated_liked"]
        ans = _ask(c)["answer"]["id"]
        assert c.post(f"/api/messages/{ans}/rating", json={"value": "like"}).status_code == 201
        assert admin.get("/api/admin/stats").json()["rated_liked"] == before + 1
        r = c.post(f"/api/messages/{ans}/rating", json={"value": "withdraw"})
        assert r.status_code == 201 and r.json()["value"] == 0
        assert admin.get("/api/admin/stats").json()["rated_liked"] == before
        conv = c.get(f"/api/conversations/{_conv_of(live, ans)}").json()
        assert conv["messages"][-1]["rating"] is None
        assert c.post(f"/api/messages/{ans}/rating", json={"value": 0, "reasons": ["clear"]}).status_code == 400


def _conv_of(live, message_id: str) -> str:
    return live.store.conversations.get_message(message_id).conversation_id


@pytest.mark.parametrize("how", ["signup", "login"])
def test_a_guests_conversations_follow_them_into_their_account(live, how):
    name = f"guest-{how}"
    if how == "login":
        with live.client() as setup:
            assert setup.post("/api/signup", json={"name": name, "password": "long enough pw"}).status_code == 200
    with live.client() as c:
        guest = c.get("/api/me").json()["user_id"]
        conv = _ask(c, content=f"A question I asked as a guest before {how}")["conversation_id"]
        c.patch("/api/me", json={"training_consent": False})
        r = c.post(f"/api/{how}", json={"name": name, "password": "long enough pw"})
        assert r.status_code == 200, r.text
        account = r.json()["user_id"]
        assert account != guest
        assert conv in [x["id"] for x in c.get("/api/conversations").json()["conversations"]]
        assert live.store.conversations.list(guest) == []
        assert live.store.users.training_consent(account) is False
