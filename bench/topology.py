"""Benchmark: the production topology run locally (deploy/ops/local_topology.py: nginx, two
`advisor serve` replicas on one PostgreSQL, vLLM's CPU build as their backend).

- Throughput through nginx with 1 and with 2 replicas behind it: the same topology, nginx
  reloaded between rounds (1, 2, 1, 2, ...), U users posting turns for S seconds per round;
  acknowledged turns per second, medians and ranges over the rounds.
- Replica failover: a replica SIGKILLed under that load; seconds from the kill to the first
  acknowledged turn sent after it, and to every user being answered again (the users pinned to
  the dead replica included); then its restart on the same port (a supervisor's) until healthy.
- Leader failover: the leader SIGKILLed while it runs a job (the test kind "hold",
  tests/topology_service.py); seconds to the survivor's taking the scheduler lead, and to the
  dead leader's job being failed with its reason (its lease, `store.job_lease_s`, set to 30 s,
  the least allowed; the leader looks for stale rows every 10 s). The killed replica is
  restarted between repetitions.

    .venv/bin/python bench/topology.py [--users 4] [--seconds 20] [--rounds 3] [--failovers 2] \
        [--model-dir DIR] [--out bench/results/topology.json]

The model defaults to the tests' tiny random one (8 new tokens): the figures are the topology's
own (nginx, replicas, PostgreSQL, the hop to vLLM), not a model's speed. On a machine with fewer
cores than processes, read "2 replicas" as "no loss from the second one", not as scaling.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
from _machine import cpu_model, emit  # noqa: E402

from deploy.ops.local_topology import Topology, Users, up  # noqa: E402
from deploy.ops.pg_throwaway import PostgresServer  # noqa: E402

LEASE_S = 30.0
TOKEN = "bench-topology"
ENV = {"ADVISOR_STORE__COORDINATION_S": "0.5", "ADVISOR_STORE__JOB_LEASE_S": str(LEASE_S),
       "ADVISOR_SCHEDULE__EXTRACT_EVERY_MINUTES": "0", "ADVISOR_SCHEDULE__TRAIN_CRON": "",
       "ADVISOR_GUARD__ENABLED": "false", "ADVISOR_GUARD__SYSTEM_PROMPT": "",
       "ADVISOR_VLLM__MAX_MODEL_LEN": "1024", "ADVISOR_VLLM__MAX_LORA_RANK": "8", "ADVISOR_VLLM__MAX_LORAS": "2",
       "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false"}


def summary(values: list[float]) -> dict:
    return {"median": round(statistics.median(values), 2), "min": round(min(values), 2),
            "max": round(max(values), 2), "runs": [round(v, 2) for v in values]}


def throughput(topo: Topology, users: int, seconds: float) -> float:
    """Acknowledged turns per second through nginx over `seconds`, after a 3-second warm-up."""
    with Users(topo.url, users) as load:
        time.sleep(3)
        t0 = time.monotonic()
        time.sleep(seconds)
        t1 = time.monotonic()
        done = [t for t in load.acknowledged() if t0 <= t.done < t1]
    return len(done) / (t1 - t0)


def replica_failover(topo: Topology, users: int) -> dict:
    victim = 1 - topo.leader()
    with Users(topo.url, users) as load:
        time.sleep(5)
        killed = time.monotonic()
        topo.kill_replica(victim)
        while True:
            after = [t for t in load.acknowledged() if t.sent > killed]
            if {t.user for t in after} == set(range(users)):
                break
            if time.monotonic() - killed > 120:
                raise SystemExit("users were not all answered again within 2 minutes of the kill")
            time.sleep(0.05)
        failed = [t for t in load.turns if not t.acknowledged]
    first = min(t.done for t in after) - killed
    every_user = max(min(t.done for t in after if t.user == u) for u in range(users)) - killed
    t0 = time.monotonic()
    topo.start_replica(victim)
    topo.wait_replica(victim)
    return {"first_answer_s": round(first, 2), "every_user_answered_s": round(every_user, 2),
            "failed_turns": len(failed), "restart_s": round(time.monotonic() - t0, 1)}


def leader_failover(topo: Topology, store) -> dict:
    leader = topo.leader()
    admin = {"Authorization": f"Bearer {TOKEN}"}
    r = httpx.post(f"{topo.url}/api/admin/jobs/hold/run", headers=admin, json={"params": {"seconds": 900}}, timeout=30)
    r.raise_for_status()
    job_id = r.json()["job_id"]
    while store.jobs.get(job_id).status != "running":
        time.sleep(0.1)
    time.sleep(1)
    killed = time.monotonic()
    topo.kill_replica(leader)
    topo.leader(timeout=30)
    led = time.monotonic() - killed
    while (job := store.jobs.get(job_id)).status == "running":
        if time.monotonic() - killed > LEASE_S + 60:
            raise SystemExit(f"job {job_id} not reclaimed within {LEASE_S + 60:.0f} s of the kill")
        time.sleep(0.1)
    reclaimed = time.monotonic() - killed
    assert job.status == "failed" and "the process that ran it stopped" in (job.error or ""), job
    topo.start_replica(leader)
    topo.wait_replica(leader)
    return {"lead_taken_s": round(led, 2), "job_reclaimed_s": round(reclaimed, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=4)
    parser.add_argument("--seconds", type=float, default=20.0, help="measured seconds per throughput round")
    parser.add_argument("--rounds", type=int, default=3, help="throughput rounds per replica count")
    parser.add_argument("--failovers", type=int, default=2, help="repetitions of each failover")
    parser.add_argument("--model-dir", type=Path, default=None, help="default: the tests' tiny random model")
    parser.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "topology.json")
    args = parser.parse_args()
    from chat.builtin import make_tiny_random_model
    from store import Store

    tiny = REPO / ".cache" / "test" / "tiny-random"
    model = args.model_dir or (tiny if (tiny / "config.json").exists() else make_tiny_random_model(tiny))
    report = {"machine": f"{cpu_model()}; {os.cpu_count()} cores", "load_before": round(os.getloadavg()[0], 1),
              "model": model.name, "max_new_tokens": 8, "users": args.users, "job_lease_s": LEASE_S,
              "command": "bench/topology.py " + " ".join(sys.argv[1:])}
    serve = [sys.executable, str(REPO / "tests" / "topology_service.py"), "serve"]
    with PostgresServer.start(durable=True) as pg, tempfile.TemporaryDirectory() as tmp:
        t0 = time.monotonic()
        with up(Path(tmp), model=str(model), dsn=pg.create_database(), admin_token=TOKEN, env=ENV,
                serve=serve) as topo, Store(topo.env["ADVISOR_STORE__URL"]) as store:
            report["start_s"] = round(time.monotonic() - t0, 1)
            print(f"up in {report['start_s']} s", flush=True)
            rates: dict[int, list[float]] = {1: [], 2: []}
            for _ in range(args.rounds):
                for n in (1, 2):
                    topo.route_to(range(n))
                    rates[n].append(throughput(topo, args.users, args.seconds))
                    print(f"{n} replica(s): {rates[n][-1]:.2f} turns/s", flush=True)
            report["turns_per_s"] = {f"{n}_replicas": summary(v) for n, v in rates.items()}
            report["ratio_2_to_1"] = round(statistics.median(rates[2]) / statistics.median(rates[1]), 2)
            replica = [replica_failover(topo, args.users) for _ in range(args.failovers)]
            print("replica failover:", replica, flush=True)
            leader = [leader_failover(topo, store) for _ in range(args.failovers)]
            print("leader failover:", leader, flush=True)
    report["replica_kill"] = {k: summary([r[k] for r in replica]) for k in replica[0]}
    report["leader_kill"] = {k: summary([r[k] for r in leader]) for k in leader[0]}
    report["load_after"] = round(os.getloadavg()[0], 1)
    emit(report, args.out)


if __name__ == "__main__":
    main()
