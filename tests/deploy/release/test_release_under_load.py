"""Promote and roll back while 8 users are chatting. No request fails, and every
stored answer names the release that produced it.

What "names the release that produced it" can honestly mean from outside the service:
- the adapter the generation actually pinned is stored beside the release id, and the two must
  agree (a release's adapter is loaded under its id; the base release has none) — this catches
  an answer logged under the release that was live when the question arrived although another
  adapter answered it;
- the release must have been live at some moment while the request was open. The exact swap
  instant inside a promote call is not observable, so release k counts as live from the start of
  the call that made it live until the end of the call that replaced it. The check can only be
  loose by the length of one swap call, never wrong.
Every swap waits until each user has finished a turn that began after it, so every release in
the sequence provably served answers, and the users never pause, so swaps land mid-answer.
"""

from __future__ import annotations

import random
import threading
import time

import pytest
from service_helpers import sse_events, start_service, tiny_settings
from store_peek import peek
from vllm_fixtures import make_random_lora

from deploy.release.registry import register_candidate

USERS = 8
QUESTIONS = ["How do I keep a budget?", "Should I change jobs?", "How do I sleep better?",
             "How can I talk to my landlord?", "What should I cook tonight?"]


@pytest.fixture
def svc(tiny_model_dir, tmp_path):
    service = start_service(tiny_settings(tmp_path / "data", tiny_model_dir, **{"backend.max_new_tokens": 8}))
    yield service
    service.stop()


class User(threading.Thread):
    """Chats until told to stop, alternating streamed and plain turns, and records each request's
    window (monotonic seconds), outcome and answer id."""

    def __init__(self, svc, n: int, stop: threading.Event) -> None:
        super().__init__(name=f"user-{n}", daemon=True)
        self.svc, self.n, self.stop = svc, n, stop
        self.records: list[dict] = []
        self.failures: list[str] = []

    def turn(self, client, conversation: str | None, stream: bool) -> tuple[str | None, str | None]:
        body = {"content": random.Random(len(self.records)).choice(QUESTIONS), "stream": stream}
        if conversation:
            body["conversation_id"] = conversation
        if not stream:
            r = client.post("/api/messages", json=body)
            if r.status_code != 200:
                self.failures.append(f"{self.name}: HTTP {r.status_code} {r.text[:200]}")
                return conversation, None
            data = r.json()
            return data["conversation_id"], data["answer"]["id"]
        with client.stream("POST", "/api/messages", json=body) as r:
            if r.status_code != 200:
                self.failures.append(f"{self.name}: HTTP {r.status_code} on a streamed turn")
                return conversation, None
            events = sse_events(r)
        kinds = [e["type"] for e in events]
        if "error" in kinds or kinds[-1:] != ["done"]:
            self.failures.append(f"{self.name}: stream ended with {kinds[-3:]}: {events[-1:]}")
            return conversation, None
        return events[0]["conversation_id"], events[-1]["answer"]["id"]

    def run(self) -> None:
        conversation = None
        with self.svc.client() as client:
            while not self.stop.is_set():
                stream = len(self.records) % 2 == 0
                start = time.monotonic()
                try:
                    conversation, answer_id = self.turn(client, conversation, stream)
                except Exception as exc:  # a dropped connection is a failure, not a crash of the test
                    self.failures.append(f"{self.name}: {type(exc).__name__}: {exc}")
                    answer_id = None
                self.records.append({"start": start, "end": time.monotonic(), "answer": answer_id, "stream": stream})
                if len(self.records) % 4 == 0:
                    conversation = None  # some new conversations, some follow-ups


def test_promote_and_rollback_while_eight_users_chat(svc, tiny_model_dir, tmp_path):
    services = svc.services
    base_id = services.release_id
    a, b = (register_candidate(svc.store, run_id=f"run-{s}", base_model=services.backend.model,
                               adapter_path=make_random_lora(tiny_model_dir, tmp_path / f"lora-{s}", seed=s),
                               data_dir=services.settings.data_path) for s in (21, 22))
    # (action, expected live release afterwards)
    plan = [("promote", a.id), ("promote", b.id), ("rollback", a.id), ("promote", base_id), ("promote", b.id)]

    stop = threading.Event()
    users = [User(svc, n, stop) for n in range(USERS)]
    for u in users:
        u.start()
    swaps = [{"release": base_id, "start": float("-inf"), "end": float("-inf")}]  # live before the first swap
    try:
        with svc.admin() as admin:
            for action, expected in plan:
                _wait_for_turns_after(users, time.monotonic())  # swaps land while users are mid-answer
                start = time.monotonic()
                path = f"/api/admin/releases/{expected}/promote" if action == "promote" else "/api/admin/releases/rollback"
                r = admin.post(path)
                end = time.monotonic()
                assert r.status_code == 200, r.text
                assert r.json()["id"] == expected and r.json()["serving"] == expected
                swaps.append({"release": expected, "start": start, "end": end})
            _wait_for_turns_after(users, time.monotonic())  # the last release serves too
    finally:
        stop.set()
        for u in users:
            u.join(120)

    failures = [f for u in users for f in u.failures]
    assert not failures, failures[:5]
    records = [r for u in users for r in u.records]
    stored = {row[0]: row[1:] for row in peek(svc.store,
        "SELECT g.message_id, g.release_id, g.adapter, m.status FROM generations g JOIN messages m ON m.id = g.message_id")}
    assert all(r["answer"] in stored for r in records)
    assert {status for _, _, status in stored.values()} == {"complete"}

    adapters = {a.id: a.id, b.id: b.id, base_id: None}
    served = set()
    for r in records:
        release, adapter, _ = stored[r["answer"]]
        assert release in adapters, f"answer {r['answer']} names {release!r}, which is not a release in this test"
        assert adapter == adapters[release], (
            f"answer {r['answer']} names release {release} but was generated with adapter {adapter!r}")
        # live from the start of the call that made it live until the end of the call that replaced it
        windows = [(swaps[k]["start"], swaps[k + 1]["end"] if k + 1 < len(swaps) else float("inf"))
                   for k in range(len(swaps)) if swaps[k]["release"] == release]
        assert any(lo <= r["end"] and r["start"] <= hi for lo, hi in windows), (
            f"answer {r['answer']} names {release}, which was not live during its request")
        served.add(release)
    assert served == {a.id, b.id, base_id}
    in_flight_at_a_swap = sum(any(r["start"] < s["end"] and s["start"] < r["end"] for r in records) for s in swaps[1:])
    assert in_flight_at_a_swap == len(plan), "every swap should have happened while answers were being generated"
    assert sum(r["stream"] for r in records) and sum(not r["stream"] for r in records)
    assert svc.store.releases.live().id == plan[-1][1]


def _wait_for_turns_after(users: list[User], t: float, timeout: float = 120) -> None:
    """Until every user has finished a turn that started after `t` (a user with failures stops counting)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(u.failures or any(r["start"] > t for r in u.records) for u in users):
            return
        time.sleep(0.02)
    raise AssertionError("the users stopped making progress")
