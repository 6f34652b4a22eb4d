"""Two real `advisor serve` processes on one real PostgreSQL, with the tiny random model: what
several replicas must show.

- 32 users (16 starting on each replica) × 10 turns through the REST API, every user switching
  replica at every turn: all 320 turns stored once, each conversation one unbroken chain;
- a promotion on one replica is served by the other within seconds;
- scheduled extraction runs on the leader only; "run now" on the follower runs once, on the leader;
- the leader is SIGKILLed mid-answer: every acknowledged turn is stored, the other replica keeps
  serving (conversations begun on the dead one included) and takes the schedule over.

Answers are 4 tokens long and torch runs one thread per process, so the module takes about a
minute or two on a 2-core machine; it is marked slow.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import httpx
import pytest
from service_helpers import ADMIN_TOKEN, free_port

from store import Store

REPO = Path(__file__).resolve().parents[3]
pytestmark = pytest.mark.slow
USERS_PER_REPLICA, TURNS = 16, 10


@dataclass
class Replica:
    proc: subprocess.Popen
    url: str
    log: Path

    @property
    def name_suffix(self) -> str:
        return f":{self.proc.pid}"

    def health(self) -> dict:
        return httpx.get(f"{self.url}/healthz", timeout=10).json()


def start_replica(env: dict, log: Path) -> Replica:
    port = free_port()
    out = log.open("w")
    proc = subprocess.Popen([sys.executable, "-m", "deploy.wiring", "serve", "--port", str(port), "--grace", "2",
                             "--log-level", "warning"], cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    return Replica(proc, f"http://127.0.0.1:{port}", log)


def wait_healthy(replica: Replica, timeout: float = 240) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        assert replica.proc.poll() is None, replica.log.read_text()[-3000:]
        try:
            if replica.health().get("status") == "ok":
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.5)
    raise AssertionError(f"replica did not start: {replica.log.read_text()[-3000:]}")


@pytest.fixture(scope="module")
def cluster(pg_server, tiny_model_dir, tmp_path_factory):
    url = pg_server.create_database()
    data = tmp_path_factory.mktemp("shared-data")  # the volume every replica mounts
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADVISOR_")} | {
        "ADVISOR_DATA_DIR": str(data), "ADVISOR_STORE__URL": url, "ADVISOR_STORE__COORDINATION_S": "0.5",
        "ADVISOR_BACKEND__KIND": "transformers", "ADVISOR_BACKEND__MODEL": str(tiny_model_dir),
        "ADVISOR_BACKEND__DEVICE": "cpu", "ADVISOR_BACKEND__STEERING": "steerlm",
        "ADVISOR_BACKEND__MAX_NEW_TOKENS": "4", "ADVISOR_SERVER__ADMIN_TOKEN": ADMIN_TOKEN,
        "ADVISOR_SERVER__SESSION_SECRET": "shared-by-every-replica",
        "ADVISOR_SCHEDULE__EXTRACT_EVERY_MINUTES": "0.05", "ADVISOR_SCHEDULE__TRAIN_CRON": "",
        "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
        "ADVISOR_GUARD__ENABLED": "false",  # arbitrary verdicts on gibberish; tests/chat/test_guard_service.py
    }
    replicas = [start_replica(env, data / f"replica{i}.log") for i in range(2)]
    try:
        for r in replicas:
            wait_healthy(r)
        with Store(url) as store:
            yield replicas, store, data
    finally:
        for r in replicas:
            if r.proc.poll() is None:
                r.proc.terminate()
        for r in replicas:
            try:
                r.proc.wait(60)
            except subprocess.TimeoutExpired:
                r.proc.kill()
                r.proc.wait()


def ask(client: httpx.Client, base: str, text: str, conversation_id: str | None, **extra) -> dict:
    path = f"/api/conversations/{conversation_id}/messages" if conversation_id else "/api/messages"
    r = client.post(base + path, json={"content": text, **extra}, timeout=300)
    assert r.status_code == 200, r.text
    return r.json()


def user_session(replicas: list[Replica], start: int, user: int) -> list[tuple[str, str]]:
    """One user's 10 turns, each on the other replica than the last, with one cookie jar."""
    with httpx.Client() as client:  # the cookie set by one replica is sent to both (same host)
        conv, out = None, []
        for turn in range(TURNS):
            base = replicas[(start + turn) % 2].url
            body = ask(client, base, f"user {user} question {turn}: how do I keep calm?", conv)
            conv = body["conversation_id"]
            out.append((body["user_message"]["id"], body["answer"]["id"]))
        return out


def test_320_turns_across_two_replicas_all_stored_once(cluster):
    replicas, store, _ = cluster
    with ThreadPoolExecutor(2 * USERS_PER_REPLICA) as pool:
        sessions = list(pool.map(lambda u: user_session(replicas, u % 2, u), range(2 * USERS_PER_REPLICA)))
    answers = [a for s in sessions for _, a in s]
    assert len(answers) == len(set(answers)) == 2 * USERS_PER_REPLICA * TURNS == 320
    stats = store.stats()["rows"]
    assert stats["conversations"] == 2 * USERS_PER_REPLICA  # each user kept one conversation throughout
    assert stats["messages"] == 2 * 320 and stats["generations"] == 320
    for session in sessions[:4]:  # each conversation is one chain, in order, across both replicas
        conv = store.conversations.get_message(session[0][0]).conversation_id
        assert [m.id for m in store.conversations.thread(conv)] == [i for pair in session for i in pair]


def make_lora(base_dir: Path, out_dir: Path, seed: int) -> Path:
    """A random, non-zero LoRA adapter on the tiny model (what a training run would publish)."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    config = LoraConfig(r=8, lora_alpha=64, target_modules=["q_proj", "v_proj", "o_proj"], init_lora_weights=False)
    get_peft_model(model, config).save_pretrained(out_dir)
    return out_dir


def test_a_promotion_on_one_replica_is_served_by_the_other(cluster, tiny_model_dir):
    replicas, store, data = cluster
    adapter = make_lora(tiny_model_dir, data / "adapters" / "r-test", 3)
    release = store.releases.create(base_model=str(tiny_model_dir), adapter_path=str(adapter), release_id="r-test")
    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    r = httpx.post(f"{replicas[0].url}/api/admin/releases/{release.id}/promote", headers=admin, timeout=120)
    assert r.status_code == 200, r.text
    t0 = time.monotonic()
    while replicas[1].health()["release"] != release.id:
        assert time.monotonic() - t0 < 10, "the other replica did not pick up the promotion"
        time.sleep(0.2)
    with httpx.Client() as client:
        body = ask(client, replicas[1].url, "What now?", None)
    assert body["answer"]["generation"]["release_id"] == release.id


def leader_and_follower(replicas: list[Replica]) -> tuple[Replica, Replica]:
    t0 = time.monotonic()
    while True:
        leading = [r for r in replicas if r.health().get("leading")]
        if len(leading) == 1:
            return leading[0], next(r for r in replicas if r is not leading[0])
        assert time.monotonic() - t0 < 10, [r.health() for r in replicas]
        time.sleep(0.2)


def extract_jobs(store: Store) -> list:
    return [j for j in store.jobs.list(kind="extract", limit=500) if j.status != "running"]


def test_scheduled_extraction_runs_once_across_both(cluster):
    replicas, store, _ = cluster
    leader, follower = leader_and_follower(replicas)
    time.sleep(8)  # a few ticks of the 3-second schedule
    scheduled = [j for j in extract_jobs(store) if j.trigger == "schedule"]
    assert len(scheduled) >= 2
    assert {j.result.get("replica", "").rsplit(":", 1)[-1] for j in scheduled} == {str(leader.proc.pid)}
    assert all(j.status in ("succeeded", "skipped") for j in scheduled), [j.error for j in scheduled]
    spans = [(s.started_at, s.finished_at) for s in sorted(scheduled, key=lambda j: j.started_at)]
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))  # never two at once

    admin = {"Authorization": f"Bearer {ADMIN_TOKEN}"}
    r = httpx.post(f"{follower.url}/api/admin/jobs/extract/run", headers=admin, json={"params": {}}, timeout=60)
    assert r.status_code in (200, 201, 202), r.text
    job_id = r.json()["job_id"]
    t0 = time.monotonic()
    while (job := store.jobs.get(job_id)).status in ("queued", "running"):
        assert time.monotonic() - t0 < 60
        time.sleep(0.2)
    assert job.status == "succeeded" and job.result["replica"].endswith(leader.name_suffix)
    assert len([j for j in store.jobs.list(kind="extract", limit=500) if j.id == job_id]) == 1


def test_the_leader_killed_mid_answer_loses_no_acknowledged_turn(cluster):
    replicas, store, _ = cluster
    leader, other = leader_and_follower(replicas)
    acked: list[tuple[str, str]] = []
    with httpx.Client() as client:
        started = ask(client, leader.url, "A conversation begun on the replica that dies.", None)
        acked.append((started["user_message"]["id"], started["answer"]["id"]))
        conv = started["conversation_id"]
        for i in range(3):
            body = ask(client, leader.url, f"follow-up {i}", conv)
            acked.append((body["user_message"]["id"], body["answer"]["id"]))
        # A long answer, streaming: the process dies while it is being generated.
        with client.stream("POST", f"{leader.url}/api/conversations/{conv}/messages", timeout=120,
                           json={"content": "and one more", "stream": True, "max_new_tokens": 2000}) as resp:
            lines = resp.iter_lines()
            first = next(line for line in lines if line.startswith("data: "))
            assert json.loads(first[len("data: "):])
            os.kill(leader.proc.pid, signal.SIGKILL)
        leader.proc.wait(30)
        for q, a in acked:  # every acknowledged turn is there, question and answer
            assert store.conversations.get_message(q).conversation_id == conv and store.conversations.get_message(a).parent_id == q
        # The other replica keeps serving, this very conversation included.
        body = ask(client, other.url, "still there?", conv)
        assert body["conversation_id"] == conv
    t0 = time.monotonic()
    while not other.health().get("leading"):
        assert time.monotonic() - t0 < 10, "no replica took the schedule over"
        time.sleep(0.2)
    taken_at = time.monotonic()
    while not any(j.trigger == "schedule" and j.result.get("replica", "").endswith(other.name_suffix)
                  for j in extract_jobs(store)):
        assert time.monotonic() - taken_at < 30, "the new leader ran no scheduled extraction"
        time.sleep(0.5)
