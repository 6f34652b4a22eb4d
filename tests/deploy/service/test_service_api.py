"""The REST API, identity and operator endpoints, against the real service on a free port
(tiny random model: answers are gibberish, but every turn is real and stored)."""

from __future__ import annotations

import time

import pytest
from service_helpers import ADMIN_PASSWORD, live, sse_events  # noqa: F401

from deploy.service.auth import COOKIE_NAME, hash_password, verify_password


def _rows(store) -> dict:
    return store.stats()["rows"]


def _ask(client, content="My sister keeps borrowing money. What should I do?", **extra):
    r = client.post("/api/messages", json={"content": content, **extra})
    assert r.status_code == 200, r.text
    return r.json()


# --------------------------------------------------------------------------- identity


def test_anonymous_session_cookie_is_signed_http_only_and_same_site(live):
    with live.client() as c:
        r = c.get("/api/me")
        assert r.status_code == 200
        cookie = r.headers["set-cookie"]
        assert cookie.startswith(f"{COOKIE_NAME}=") and "HttpOnly" in cookie and "SameSite=Lax" in cookie
        me = r.json()
        assert me["name"] is None and not me["is_admin"]
        assert c.get("/api/me").json()["user_id"] == me["user_id"]  # same cookie, same user
    with live.client(cookies={COOKIE_NAME: "forged.value.sig"}) as c:
        assert c.get("/api/me").json()["user_id"] != me["user_id"]  # a bad signature is a stranger


def test_password_hash_round_trip():
    stored = hash_password("correct horse")
    assert stored.startswith("scrypt$") and "correct horse" not in stored
    assert verify_password("correct horse", stored)
    assert not verify_password("wrong", stored) and not verify_password("x", None)


def test_signup_login_logout(live):
    with live.client() as c:
        assert c.post("/api/signup", json={"name": "dana", "password": "short"}).status_code == 400
        r = c.post("/api/signup", json={"name": "dana", "password": "long enough pw"})
        assert r.status_code == 200 and r.json()["name"] == "dana"
        conv = _ask(c)["conversation_id"]
        stored = live.store.users.get_by_name("dana")
        assert stored.password_hash.startswith("scrypt$")
        c.post("/api/logout")
        assert c.get("/api/me").json()["name"] is None
        assert c.get(f"/api/conversations/{conv}").status_code == 404
        assert c.post("/api/login", json={"name": "dana", "password": "nope nope"}).status_code == 401
        assert c.post("/api/login", json={"name": "dana", "password": "long enough pw"}).status_code == 200
        assert c.get(f"/api/conversations/{conv}").status_code == 200


# --------------------------------------------------------------------------- chat turns


def test_send_stores_question_and_answer_with_generation_metadata(live):
    with live.client() as c:
        out = _ask(c, attributes={"verbosity": 1, "complexity": 3}, max_new_tokens=7, temperature=0.5, seed=3)
        ans = out["answer"]
        assert out["user_message"]["role"] == "user" and ans["role"] == "assistant"
        stored = live.store.conversations.get_message(ans["id"])
        g = stored.generation
        assert stored.status == "complete" and stored.parent_id == out["user_message"]["id"]
        assert (g.attributes.verbosity, g.attributes.complexity) == (1, 3)
        assert g.max_new_tokens == 7 and g.temperature == 0.5 and g.seed == 3
        assert g.latency_ms > 0 and g.completion_tokens and g.prompt_tokens and g.backend == "transformers"
        conv = c.get(f"/api/conversations/{out['conversation_id']}").json()
        assert [m["role"] for m in conv["messages"]] == ["user", "assistant"]
        assert conv["title"].startswith("My sister")
        assert [x["id"] for x in c.get("/api/conversations").json()["conversations"]] == [out["conversation_id"]]


def test_streaming_send_emits_deltas_and_stores_the_answer(live):
    with live.client() as c:
        conv = c.post("/api/conversations", json={"title": ""}).json()["id"]
        with c.stream("POST", f"/api/conversations/{conv}/messages",
                      json={"content": "Should I move abroad?", "stream": True}) as r:
            assert r.status_code == 200 and r.headers["content-type"].startswith("text/event-stream")
            events = sse_events(r)
        kinds = [e["type"] for e in events]
        assert kinds[0] == "start" and kinds[-1] == "done" and "delta" in kinds
        text = "".join(e["text"] for e in events if e["type"] == "delta")
        answer = events[-1]["answer"]
        assert answer["content"] == text == live.store.conversations.get_message(answer["id"]).content


def test_regenerate_makes_a_sibling_and_choose_records_the_kept_one(live):
    with live.client() as c:
        first = _ask(c)
        second = c.post(f"/api/messages/{first['answer']['id']}/regenerate", json={}).json()
        assert second["answer"]["parent_id"] == first["user_message"]["id"]
        conv = c.get(f"/api/conversations/{first['conversation_id']}").json()
        last = conv["messages"][-1]
        assert last["id"] == second["answer"]["id"] and last["siblings"]["count"] == 2
        assert c.post(f"/api/messages/{first['answer']['id']}/choose").status_code == 200
        conv = c.get(f"/api/conversations/{first['conversation_id']}").json()
        assert conv["messages"][-1]["id"] == first["answer"]["id"]
        assert conv["messages"][-1]["siblings"]["index"] == 1


def test_edit_branches_the_conversation(live):
    with live.client() as c:
        first = _ask(c, content="How do I ask for a raise?")
        out = c.post(f"/api/messages/{first['user_message']['id']}/edit",
                     json={"content": "How do I ask for a raise after one year?"}).json()
        assert out["user_message"]["parent_id"] is None and out["user_message"]["id"] != first["user_message"]["id"]
        msgs = c.get(f"/api/conversations/{first['conversation_id']}").json()["messages"]
        assert msgs[0]["content"].endswith("after one year?") and msgs[0]["siblings"]["count"] == 2
        old = c.get(f"/api/conversations/{first['conversation_id']}",
                    params={"leaf": first["answer"]["id"]}).json()["messages"]
        assert old[0]["content"] == "How do I ask for a raise?"


def test_rating_with_reasons_and_comment(live):
    with live.client() as c:
        ans = _ask(c)["answer"]["id"]
        r = c.post(f"/api/messages/{ans}/rating",
                   json={"value": "dislike", "reasons": ["too long", "too vague"], "comment": "shorter please"})
        assert r.status_code == 201, r.text
        stored = live.store.conversations.ratings(ans)[-1]
        assert stored.value == -1 and stored.reasons == ("too long", "too vague") and stored.comment == "shorter please"
        bad = c.post(f"/api/messages/{ans}/rating", json={"value": 1, "reasons": ["too long"]})
        assert bad.status_code == 400 and "accurate" in bad.json()["error"]["message"]
        assert len(live.store.conversations.ratings(ans)) == 1
        view = c.get(f"/api/conversations/{live.store.conversations.get_message(ans).conversation_id}").json()["messages"][-1]
        assert view["rating"] == {"value": -1, "reasons": ["too long", "too vague"], "comment": "shorter please"}


def test_client_that_disconnects_mid_stream_leaves_an_interrupted_answer(live):
    with live.client() as c:
        with c.stream("POST", "/api/messages", json={"content": "Tell me everything about budgeting.",
                                                     "stream": True, "max_new_tokens": 900}) as r:
            events = r.iter_lines()
            start = None
            for line in events:
                if line.startswith("data: ") and '"start"' in line:
                    import json

                    start = json.loads(line[6:])
                    break
        conv = start["conversation_id"]
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline:
            msgs = live.store.conversations.get_messages(conv)
            if len(msgs) == 2:
                break
            time.sleep(0.1)
        answer = live.store.conversations.get_messages(conv)[-1]
        assert answer.role == "assistant" and answer.status == "interrupted"
        assert answer.generation.finish_reason == "cancelled"


# --------------------------------------------------------------------------- bad input


BAD_BODIES = [
    ({"content": ""}, 400, "empty"),
    ({"content": "   \n\t "}, 400, "empty"),
    ({"content": "x" * 200_000}, 413, "limit is"),
    ({"content": "\x00\x01\x02\x1b\x7f"}, 400, "empty"),
    ({"content": 12345}, 400, "content"),
    ({"content": "hi", "attributes": {"verbosity": 9}}, 400, "between 0 and 4"),
    ({"content": "hi", "attributes": {"verbosity": "loud"}}, 400, "integer"),
    ({"content": "hi", "attributes": {"charm": 2}}, 400, "unknown attribute"),
    ({"content": "hi", "attributes": "verbosity=2"}, 400, "name:value"),
    ({"content": "hi", "temperature": 7}, 400, "temperature"),
]


@pytest.mark.parametrize("body,status,words", BAD_BODIES, ids=[w for _, _, w in BAD_BODIES])
def test_bad_input_gets_a_clear_error_and_changes_nothing(live, body, status, words):
    with live.client() as c:
        existing = _ask(c)
        before = _rows(live.store)
        thread_before = live.store.conversations.thread(existing["conversation_id"])
        r = c.post(f"/api/conversations/{existing['conversation_id']}/messages", json=body)
        assert r.status_code == status, r.text
        assert words.lower() in r.json()["error"]["message"].lower()
        assert _rows(live.store) == before
        assert live.store.conversations.thread(existing["conversation_id"]) == thread_before


def test_binary_junk_body_is_rejected_with_a_clear_error(live):
    with live.client() as c:
        before = _rows(live.store)
        r = c.post("/api/messages", content=bytes(range(256)) * 10, headers={"content-type": "application/json"})
        assert r.status_code == 400 and "not valid JSON" in r.json()["error"]["message"]
        r = c.post("/api/messages", content=b"\xff\xfe" * 1_000_000, headers={"content-type": "application/json"})
        assert r.status_code == 413
        assert _rows(live.store) == before


def test_unknown_and_foreign_ids_are_not_found_and_change_nothing(live):
    with live.client() as alice, live.client() as bob:
        a = _ask(alice, content="Private: my divorce plans")
        b_before = _rows(live.store)
        conv, q, ans = a["conversation_id"], a["user_message"]["id"], a["answer"]["id"]
        checks = [
            bob.get(f"/api/conversations/{conv}"),
            bob.get("/api/conversations/does-not-exist"),
            bob.post(f"/api/conversations/{conv}/messages", json={"content": "hijack"}),
            bob.post("/api/messages", json={"content": "hijack", "conversation_id": conv}),
            bob.post("/api/messages", json={"content": "hijack", "parent_id": ans}),
            bob.post(f"/api/messages/{ans}/regenerate", json={}),
            bob.post(f"/api/messages/{q}/edit", json={"content": "hijack"}),
            bob.post(f"/api/messages/{ans}/rating", json={"value": 1}),
            bob.post(f"/api/messages/{ans}/choose"),
            bob.post("/api/messages/nope/rating", json={"value": 1}),
        ]
        for r in checks:
            assert r.status_code == 404, (r.request.url, r.text)
            assert "Private" not in r.text
        assert _rows(live.store) == b_before
        assert bob.get("/api/conversations").json()["conversations"] == []
        assert len(live.store.conversations.get_messages(conv)) == 2


# --------------------------------------------------------------------------- delete my data


def test_delete_my_data_needs_confirmation_then_forgets_everything(live):
    with live.client() as c:
        me = c.get("/api/me").json()["user_id"]
        out = _ask(c)
        c.post(f"/api/messages/{out['answer']['id']}/rating", json={"value": 1, "reasons": ["clear"]})
        assert c.delete("/api/me").status_code == 400
        assert live.store.conversations.list(me)
        r = c.delete("/api/me", params={"confirm": "true"})
        assert r.status_code == 200 and r.json()["deleted"]["messages"] == 2 and r.json()["deleted"]["ratings"] == 1
        assert live.store.users.is_forgotten(me) and not live.store.conversations.list(me)
        assert c.get("/api/me").json()["user_id"] != me  # a fresh anonymous session
        assert c.get("/api/conversations").json()["conversations"] == []
        assert _ask(c)["answer"]  # and it can chat again


# --------------------------------------------------------------------------- operator


ADMIN_PATHS = ["/api/admin/stats", "/api/admin/turns", "/api/admin/jobs", "/api/admin/releases",
               "/api/admin/timeseries", "/api/admin/reasons"]


def test_operator_endpoints_need_the_token_or_an_admin_login(live):
    with live.client() as anon, live.client(headers={"Authorization": "Bearer wrong"}) as wrong:
        for path in ADMIN_PATHS:
            for c in (anon, wrong):
                r = c.get(path)
                assert r.status_code == 401 and r.headers["www-authenticate"] == "Bearer", path
        assert anon.post("/api/admin/jobs/extract/run").status_code == 401
    with live.admin() as admin:
        for path in ADMIN_PATHS:
            assert admin.get(path).status_code == 200, path
    with live.client() as c:
        assert c.post("/api/login", json={"name": "admin", "password": "bad password"}).status_code == 401
        assert c.post("/api/login", json={"name": "admin", "password": ADMIN_PASSWORD}).json()["is_admin"]
        assert c.get("/api/admin/stats").status_code == 200


def test_operator_read_outs_count_turns_and_ratings(live):
    with live.client() as c:
        out = _ask(c)
        c.post(f"/api/messages/{out['answer']['id']}/rating", json={"value": -1, "reasons": ["unsafe"]})
    with live.admin() as admin:
        turns = admin.get("/api/admin/turns", params={"limit": 5}).json()["turns"]
        assert any(t["message_id"] == out["answer"]["id"] and t["rating"] == -1 and t["reasons"] == ["unsafe"]
                   for t in turns)
        points = admin.get("/api/admin/timeseries", params={"bucket": "hour"}).json()["points"]
        assert {p["series"] for p in points} >= {"conversations", "turns", "dislikes"}
        reasons = admin.get("/api/admin/reasons").json()["reasons"]
        assert {"rating": "dislike", "reason": "unsafe", "count": 1} in reasons or any(
            r["reason"] == "unsafe" and r["count"] >= 1 for r in reasons)
        stats = admin.get("/api/admin/stats").json()
        assert stats["rows"]["generations"] >= 1 and stats["rated_disliked"] >= 1


def test_registered_job_runs_from_the_admin_api_and_is_recorded(live):
    registry = live.app.state.jobs
    assert live.app.state.scheduler.running
    if "test-echo" not in {s.kind for s in registry.specs()}:
        registry.add("test-echo", lambda ctx: {"rows": ctx.store.stats()["rows"]["messages"], "params": ctx.params},
                     button="Echo")
    with live.admin() as admin:
        r = admin.post("/api/admin/jobs/test-echo/run", json={"params": {"extractor": "llm"}})
        assert r.status_code == 202
        job_id = r.json()["job_id"]
        deadline = time.monotonic() + 30
        while live.store.jobs.get(job_id).status == "running" and time.monotonic() < deadline:
            time.sleep(0.05)
        job = live.store.jobs.get(job_id)
        assert job.status == "succeeded" and "rows" in job.result and job.trigger == "api"
        assert job.result["params"] == {"extractor": "llm"}  # e.g. `advisor extract --url … -e llm`
        assert admin.post("/api/admin/jobs/nope/run").status_code == 404
        kinds = admin.get("/api/admin/jobs").json()["kinds"]
        assert {"kind": "test-echo", "button": "Echo"}.items() <= {k: v for k, v in kinds[-1].items()}.items() or any(
            k["kind"] == "test-echo" for k in kinds)


def test_health_and_metrics(live):
    with live.client() as c:
        _ask(c)
        health = c.get("/healthz").json()
        assert health["status"] == "ok" and health["backend"]["ok"]
        text = c.get("/metrics").text
    for name in ("advisor_http_requests_total", "advisor_http_request_seconds_bucket", "advisor_turns_total",
                 "advisor_tokens_total", "advisor_ratings_total", "advisor_errors_total"):
        assert name in text
    assert 'route="/api/messages"' in text and 'source="api",status="complete"' in text
