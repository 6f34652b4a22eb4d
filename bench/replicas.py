"""Benchmark: chat turns per second with one and with two `advisor serve` replicas on one
PostgreSQL server (started for the run: Debian's binaries, fsync on).

For each replica count: a fresh database, N real service processes sharing it (and a data
directory), U concurrent users × T turns through the REST API, each user sent round-robin to the
replicas turn by turn (as a load balancer without stickiness would), then every turn is checked
in the store. Reports turns/s, p50/p95 turn latency, and what PostgreSQL took (its processes' CPU
seconds per turn, and its transactions per turn from pg_stat_database).

The model defaults to the tiny random one the tests use (`.cache/test/tiny-random`, built in
seconds if missing) with short answers: the figure is then the replica's own ceiling (HTTP,
turn logic, logging, streaming) rather than a model's speed. With a real model each replica
hands generation to vLLM, so this ceiling, not the model, is what more replicas lift.

    .venv/bin/python bench/replicas.py [--users 16] [--turns 10] [--max-new-tokens 8] [--model-dir DIR]

On a machine with fewer cores than replicas × threads the replicas share the CPU: read the
two-replica figure as "no loss from coordination", not as scaling.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

import httpx  # noqa: E402
from _machine import cpu_model  # noqa: E402

from deploy.ops.pg_throwaway import PostgresServer, free_port  # noqa: E402


def start(n: int, url: str, data: Path, model: Path, max_new_tokens: int) -> list[tuple[subprocess.Popen, str]]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("ADVISOR_")} | {
        "ADVISOR_DATA_DIR": str(data), "ADVISOR_STORE__URL": url, "ADVISOR_BACKEND__KIND": "transformers",
        "ADVISOR_BACKEND__MODEL": str(model), "ADVISOR_BACKEND__DEVICE": "cpu", "ADVISOR_BACKEND__STEERING": "steerlm",
        "ADVISOR_BACKEND__MAX_NEW_TOKENS": str(max_new_tokens), "ADVISOR_SERVER__SESSION_SECRET": "bench",
        "ADVISOR_SCHEDULE__EXTRACT_EVERY_MINUTES": "0", "ADVISOR_SCHEDULE__TRAIN_CRON": "",
        "OMP_NUM_THREADS": "1", "TOKENIZERS_PARALLELISM": "false",
    }
    out = []
    for i in range(n):
        port = free_port()
        log = (data / f"replica{i}.log").open("w")
        proc = subprocess.Popen([sys.executable, "-m", "deploy.wiring", "serve", "--port", str(port),
                                 "--log-level", "warning"], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
        out.append((proc, f"http://127.0.0.1:{port}"))
    for proc, base in out:
        deadline = time.monotonic() + 300
        while True:
            if proc.poll() is not None:
                raise SystemExit(f"a replica died at start: see {data}")
            try:
                if httpx.get(f"{base}/healthz", timeout=5).json().get("status") == "ok":
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise SystemExit("a replica did not start in 5 minutes")
            time.sleep(0.5)
    return out


def user(bases: list[str], u: int, turns: int) -> list[float]:
    latencies, conv = [], None
    with httpx.Client(timeout=300) as client:
        for t in range(turns):
            base = bases[(u + t) % len(bases)]
            path = f"/api/conversations/{conv}/messages" if conv else "/api/messages"
            t0 = time.perf_counter()
            r = client.post(base + path, json={"content": f"user {u} turn {t}: how do I stay calm at work?"})
            latencies.append(time.perf_counter() - t0)
            r.raise_for_status()
            conv = r.json()["conversation_id"]
    return latencies


def pg_cpu_seconds(pg: PostgresServer) -> float:
    """CPU seconds used so far by the server's processes (postmaster and backends)."""
    import psutil

    pid = int((pg.root / "data" / "postmaster.pid").read_text().split()[0])
    root = psutil.Process(pid)
    total = 0.0
    for p in [root, *root.children(recursive=True)]:
        try:
            t = p.cpu_times()
            total += t.user + t.system + t.children_user + t.children_system
        except psutil.Error:
            pass
    return total


def xacts(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return int(conn.execute("SELECT xact_commit FROM pg_stat_database WHERE datname = current_database()")
                   .fetchone()[0])


def run(n: int, pg: PostgresServer, model: Path, args: argparse.Namespace) -> dict:
    from store import Store

    url = pg.create_database()
    with tempfile.TemporaryDirectory() as tmp:
        replicas = start(n, url, Path(tmp), model, args.max_new_tokens)
        bases = [b for _, b in replicas]
        try:
            user(bases, -1, 2)  # warm up every replica's model and connections
            cpu0, x0, t0 = pg_cpu_seconds(pg), xacts(url), time.perf_counter()
            with ThreadPoolExecutor(args.users) as pool:
                lat = [x for xs in pool.map(lambda u: user(bases, u, args.turns), range(args.users)) for x in xs]
            wall = time.perf_counter() - t0
            cpu, tx = pg_cpu_seconds(pg) - cpu0, xacts(url) - x0
        finally:
            for proc, _ in replicas:
                proc.terminate()
            for proc, _ in replicas:
                proc.wait(60)
        with Store(url) as store:
            stored = store.stats()["rows"]["generations"]
    turns = args.users * args.turns
    assert stored == turns + 2, f"{stored} answers stored, {turns + 2} expected"
    lat.sort()
    return {"replicas": n, "turns": turns, "seconds": round(wall, 1), "turns_per_s": round(turns / wall, 2),
            "p50_s": round(statistics.median(lat), 3), "p95_s": round(lat[int(0.95 * (len(lat) - 1))], 3),
            "pg_cpu_ms_per_turn": round(1000 * cpu / turns, 2), "pg_transactions_per_turn": round(tx / turns, 1)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--users", type=int, default=16)
    parser.add_argument("--turns", type=int, default=10)
    parser.add_argument("--max-new-tokens", type=int, default=8)
    parser.add_argument("--model-dir", type=Path, default=None, help="default: the tests' tiny random model")
    parser.add_argument("--replicas", type=int, nargs="+", default=[1, 2])
    args = parser.parse_args()
    from chat.builtin import make_tiny_random_model

    model = args.model_dir or make_tiny_random_model(REPO / ".cache" / "test" / "tiny-random")
    print(f"machine: {cpu_model()}; {os.cpu_count()} cores; load {os.getloadavg()[0]:.1f}; model {model.name}, "
          f"{args.max_new_tokens} new tokens; {args.users} users x {args.turns} turns")
    with PostgresServer.start(durable=True) as pg:
        for n in args.replicas:
            r = run(n, pg, model, args)
            print(f"{n} replica(s): {r['turns_per_s']} turns/s (p50 {r['p50_s']} s, p95 {r['p95_s']} s); "
                  f"PostgreSQL {r['pg_cpu_ms_per_turn']} ms CPU and {r['pg_transactions_per_turn']} "
                  f"transactions per turn; all {r['turns']} stored", flush=True)
            print("result:", r)
    print(f"load average after: {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
