"""The production topology without Docker (deploy/ops/local_topology.py): nginx with
deploy/ops/nginx.conf in front of two `advisor serve` replicas on one PostgreSQL, the vLLM CPU
server as their backend with runtime LoRA. Under load through nginx (four users posting turns,
each acknowledged turn recorded):

- one replica SIGKILLed: nginx routes around it, only the turns in flight at the kill fail, and
  every acknowledged turn is in the store; the replica comes back on its port;
- the leader SIGKILLed while it runs a job: the survivor takes the scheduler lead and fails the
  dead leader's job with the reason (deploy/loop/recovery.py) within the lease (30 s, the least
  `store.job_lease_s` allows) plus one recovery round (10 s); still no acknowledged turn lost;
- a release promoted afterwards through nginx is loaded into vLLM and the survivor's answers name
  it as release and adapter.

vLLM serves the tiny random model (2 layers, hidden 128: seconds per start and milliseconds per
answer on CPU), answers are 8 tokens, the job is the test kind "hold" (tests/topology_service.py).
About 3-5 minutes on a 2-core machine, most of it vLLM's and the replicas' start and the lease.
"""

from __future__ import annotations

import sys
import time
from pathlib import Path

import httpx
import pytest
from prereqs import VLLM_PYTHON, requires
from service_helpers import ADMIN_TOKEN
from vllm_fixtures import LORA_RANK, make_random_lora

from deploy.ops.local_topology import Turn, Users, nginx_binary, render_nginx_conf, up
from deploy.ops.pg_throwaway import available as pg_unavailable
from deploy.serving.vllm import served_adapters
from store import Store
from store.jobs import HEARTBEAT_S

TESTS = Path(__file__).resolve().parents[2]
LEASE_S = 30.0
USERS = 4
SETTLE_S = 0.5  # answers in flight at the kill may be logged this long after it
ADMIN = {"Authorization": f"Bearer {ADMIN_TOKEN}"}

pytestmark = [
    pytest.mark.slow, pytest.mark.vllm,
    requires(nginx_binary(), "nginx not found (apt-get install nginx; scripts/setup_test_deps.sh does)"),
    requires(pg_unavailable() is None, f"PostgreSQL cannot run here: {pg_unavailable()}"),
    requires(VLLM_PYTHON.exists(), f"vLLM CPU environment missing ({VLLM_PYTHON}); bash scripts/setup_vllm_env.sh"),
]

ENV = {
    "ADVISOR_STORE__COORDINATION_S": "0.5", "ADVISOR_STORE__JOB_LEASE_S": str(LEASE_S),
    "ADVISOR_SCHEDULE__EXTRACT_EVERY_MINUTES": "0", "ADVISOR_SCHEDULE__TRAIN_CRON": "",
    "ADVISOR_GUARD__ENABLED": "false", "ADVISOR_GUARD__SYSTEM_PROMPT": "",  # verdicts on gibberish mean nothing
    "ADVISOR_VLLM__MAX_MODEL_LEN": "1024", "ADVISOR_VLLM__MAX_LORA_RANK": str(LORA_RANK),
    "ADVISOR_VLLM__MAX_LORAS": "2", "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
}


@pytest.fixture(scope="module")
def topo(pg_server, tiny_model_dir, tmp_path_factory):
    work = tmp_path_factory.mktemp("topology")
    with up(work, model=str(tiny_model_dir), dsn=pg_server.create_database(), admin_token=ADMIN_TOKEN, env=ENV,
            serve=[sys.executable, str(TESTS / "topology_service.py"), "serve"]) as t:
        yield t


@pytest.fixture(scope="module")
def store(topo):
    with Store(topo.env["ADVISOR_STORE__URL"]) as s:
        yield s


def wait_for(condition, timeout: float, what: str) -> float:
    t0 = time.monotonic()
    while not condition():
        assert time.monotonic() - t0 < timeout, f"{what}: not within {timeout:.0f} s"
        time.sleep(0.2)
    return time.monotonic() - t0


def assert_all_stored(store: Store, acked: list[Turn]) -> None:
    assert acked
    for t in acked:
        question, answer = store.conversations.get_message(t.question_id), store.conversations.get_message(t.answer_id)
        assert question.conversation_id == t.conversation_id and answer.parent_id == question.id
        assert answer.status == "complete"


def kill_under_load(topo, index: int) -> tuple[Users, float, float]:
    """Users load nginx; replica `index` is SIGKILLed once they have 8 answers; the load runs on
    until every user has 3 more acknowledged turns sent SETTLE_S or more after the kill (answers of
    the tiny model take milliseconds: without the settling time all of them can end inside it).
    The kill time is when the process is gone, not when the signal was sent: until the kernel has
    torn it down its listening socket still accepts connections, and a POST accepted then fails."""
    with Users(topo.url, USERS) as users:
        wait_for(lambda: len(users.acknowledged()) >= 8, 60, "the first answers through nginx")
        topo.kill_replica(index)  # returns once the process is reaped: its sockets are closed
        killed_at, killed_wall = time.monotonic(), time.time()

        def every_user_served_again() -> bool:
            after = [t.user for t in users.acknowledged() if t.sent > killed_at + SETTLE_S]
            return all(after.count(u) >= 3 for u in range(USERS))

        try:
            wait_for(every_user_served_again, 60, "every user answered again after the kill")
        except AssertionError as e:  # say who stalled and how their last turns ended
            last = {u: [t.status for t in users.turns if t.user == u][-3:] for u in range(USERS)}
            raise AssertionError(f"{e}; last statuses per user: {last}") from None
    return users, killed_at, killed_wall


def served_by(topo, since_wall: float) -> list[tuple[str, list[str]]]:
    """(status, upstreams tried in order) of the requests nginx finished after `since_wall`."""
    lines = [line.split() for line in (topo.work / "nginx" / "access.log").read_text().splitlines()]
    return [(f[1], [a.rstrip(",") for a in f[4:]]) for f in lines if float(f[0]) > since_wall]


def test_nginx_config_is_the_shipped_one_made_local():
    text = render_nginx_conf(8080, [7001, 7002])
    assert "listen 127.0.0.1:8080;" in text and "server advisor:7860" not in text
    assert "server 127.0.0.1:7001 max_fails=1 fail_timeout=5s;\n    server 127.0.0.1:7002 max_fails=1" in text
    assert "hash $cookie_advisor_session consistent;" in text and "proxy_buffering off;" in text


def test_a_killed_replica_is_routed_around_and_loses_no_acknowledged_turn(topo, store):
    victim = 1 - topo.leader()
    users, killed_at, killed_wall = kill_under_load(topo, victim)
    failed = [t for t in users.turns if not t.acknowledged]
    # Only turns in flight when it died fail (502: nginx never re-sends a POST); new ones go to the other.
    assert all(t.sent <= killed_at for t in failed), [(t.status, t.sent - killed_at) for t in failed]
    assert len(failed) <= USERS
    assert_all_stored(store, users.acknowledged())
    after = served_by(topo, killed_wall + SETTLE_S)
    survivor = f"127.0.0.1:{topo.replicas[1 - victim].port}"
    assert after and all(tried[-1] == survivor for status, tried in after if status == "200")
    topo.start_replica(victim)  # as a supervisor would: back on its port, found again by nginx
    topo.wait_replica(victim)


def test_the_leader_killed_holding_a_job_is_replaced_and_its_job_reclaimed(topo, store):
    leader = topo.leader()
    survivor = 1 - leader
    r = httpx.post(f"{topo.url}/api/admin/jobs/hold/run", headers=ADMIN, json={"params": {"seconds": 600}}, timeout=30)
    assert r.status_code == 202, r.text
    job_id = r.json()["job_id"]
    wait_for(lambda: store.jobs.get(job_id).status == "running", 10, "the leader starting the job")
    owner = store.jobs.get(job_id).owner
    assert owner.split("/")[0].endswith(f":{topo.replicas[leader].proc.pid}")  # the leader runs it

    users, killed_at, _ = kill_under_load(topo, leader)
    assert all(t.sent <= killed_at for t in users.turns if not t.acknowledged)
    assert_all_stored(store, users.acknowledged())
    assert topo.leader(timeout=10) == survivor
    # Its lease runs out LEASE_S after its last renewal; the new leader looks every HEARTBEAT_S.
    waited = (time.monotonic() - killed_at) + wait_for(lambda: store.jobs.get(job_id).status != "running",
                                                       LEASE_S + HEARTBEAT_S + 10, "the dead leader's job reclaimed")
    job = store.jobs.get(job_id)
    assert job.status == "failed" and waited <= LEASE_S + HEARTBEAT_S + 10
    assert job.error.startswith(f"the process that ran it stopped: {owner} at "), job.error
    assert f":{topo.replicas[survivor].proc.pid}/" in job.error  # found by the survivor


def test_a_release_promoted_after_the_failover_is_served_by_the_survivor_through_vllm(topo, store, tiny_model_dir):
    live = [r for r in topo.replicas if r.alive]
    assert len(live) == 1  # the leader killed above stays dead
    adapter = make_random_lora(Path(tiny_model_dir), topo.work / "lora-topology", seed=3)
    release = store.releases.create(base_model="advisor", adapter_path=str(adapter), release_id="r-topology")
    r = httpx.post(f"{topo.url}/api/admin/releases/{release.id}/promote", headers=ADMIN, timeout=120)
    assert r.status_code == 200, r.text
    assert r.json()["serving"] == release.id
    assert release.id in served_adapters(topo.vllm_url)  # loaded into vLLM at run time
    with httpx.Client(timeout=60) as client:
        body = client.post(f"{topo.url}/api/messages", json={"content": "What now?", "max_new_tokens": 8}).json()
    g = body["answer"]["generation"]
    assert (g["backend"], g["model"], g["release_id"], g["adapter"]) == ("openai", "advisor", release.id, release.id)
    assert g["completion_tokens"] > 0  # counted by vLLM
    assert store.conversations.get_message(body["answer"]["id"]).generation.release_id == release.id
