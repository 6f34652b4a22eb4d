"""Benchmark: what logging a chat turn costs, next to generating it.

Measures, on a DuckDB file that already holds --prefill turns (a store in use: lookups and
index inserts must not slow down as it grows):
  1. turns logged per second from 1 thread and from 8 threads, and p50/p99 latency of logging
     one turn. A turn is logged through the real `chat.turns` path (question + new
     conversation at submit, history read, answer with its generation metadata at the end)
     with an instant backend, so the time measured is the logging and nothing else;
  2. generation time of real turns on the built-in model (the cached build in --data-dir,
     built first if missing), and what logging adds to those same turns in place: each question
     answered twice with one seed, as a logged turn and straight from the backend, the
     difference taken per pair: before the last token reaches the reader (the question's commit
     overlaps the model's start), after it (the answer's insert), and in all, until the turn is
     stored. Each with a bootstrap 95% confidence interval: generation jitter is milliseconds.
     Logged turns reach their last token a little sooner: while the question is stored the
     reader thread is off the GIL during the model's first tokens (a bare reader that waits
     8 ms before reading gains the same), so the two parts are reported apart;
  3. logging cost as a share of generation time (target: under 2% until stored).

With `--store postgres` (or `both`) the logging runs (1.) also go to a real PostgreSQL server
started for the run (Debian's binaries, fsync and synchronous commit on: the server's defaults),
on the same machine, over TCP on 127.0.0.1: what a turn costs a replica of a scaled-out service.
`--gen-turns 0` skips the paired generation runs (2., 3.), which only the DuckDB file takes.

Prints the machine (CPU model, cores, load) first, then medians and ratios.
Run: .venv/bin/python bench/store.py [--data-dir .cache/test | --model-dir DIR] [--turns 400] [--gen-turns 300] [--prefill 100000]
                                     [--store duckdb|postgres|both]
"""

from __future__ import annotations

import argparse
import os
import platform
import random
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from chat.backends import Generation, SamplingParams  # noqa: E402
from chat.turns import TurnContext, send  # noqa: E402
from store import GenerationMeta, Store  # noqa: E402
from store.attributes import Attributes  # noqa: E402

ANSWER = ("Keep the same bedtime every night, dim the lights an hour before, and leave your phone "
          "outside the bedroom. ") * 4
QUESTIONS = [
    "How can I fall asleep faster at night?",
    "How do I start saving money on a small salary?",
    "How should I ask my manager for a raise?",
    "What can I do when a friend keeps cancelling plans?",
    "How do I handle an argument with my sister?",
    "How can I pack light for a week-long trip?",
    "What is a good way to study for an exam?",
    "How do I drink more water during the day?",
    "How can I stop checking my phone all the time?",
    "How do I get back into exercise after a long break?",
]


class _InstantGeneration(Generation):
    def __init__(self) -> None:
        super().__init__(model="instant", adapter=None)
        self.prompt_tokens = 30

    def _deltas(self) -> Iterator[str]:
        for word in ANSWER.split(" "):
            yield word + " "
        self.completion_tokens = len(ANSWER.split())


class InstantBackend:
    """Answers at once, so a turn's wall time is the logging alone."""

    kind = "builtin"
    model = "instant"
    active_adapter = None

    def stream(self, messages, *, attributes, steering, params, adapter=None) -> Generation:
        return _InstantGeneration()


from _machine import cpu_model  # noqa: E402


def machine() -> str:
    cpu = cpu_model()
    import duckdb
    import torch

    load = os.getloadavg() if hasattr(os, "getloadavg") else ("?",) * 3
    return (f"{cpu}; {os.cpu_count()} logical cores; load average {load[0]:.1f} {load[1]:.1f} {load[2]:.1f}; "
            f"Python {platform.python_version()}, DuckDB {duckdb.__version__}, torch {torch.__version__} "
            f"({torch.get_num_threads()} threads)")


def pct(values: list[float], q: float) -> float:
    values = sorted(values)
    return values[min(len(values) - 1, int(round(q * (len(values) - 1))))]


def median_ci(values: list[float], rounds: int = 2000, seed: int = 0) -> tuple[float, float]:
    """Bootstrap 95% confidence interval of the median: paired differences are noisy (generation
    jitter is milliseconds), so the figure comes with its uncertainty."""
    rng = random.Random(seed)
    medians = sorted(statistics.median(rng.choices(values, k=len(values))) for _ in range(rounds))
    return medians[int(0.025 * rounds)], medians[int(0.975 * rounds) - 1]


def log_turns(ctx: TurnContext, user: str, n: int, out: list[float]) -> None:
    params = SamplingParams()
    for i in range(n):
        t0 = time.perf_counter()
        send(ctx, user_id=user, text=QUESTIONS[i % len(QUESTIONS)], attributes=Attributes(verbosity=i % 5),
             params=params).run()
        out.append(time.perf_counter() - t0)


def prefill(store: Store, turns: int) -> None:
    """`turns` past question/answer pairs, one conversation each, written in bulk."""
    if turns <= 0:
        return
    if store.dialect == "postgres":
        return prefill_postgres(store, turns)
    meta = GenerationMeta(backend="builtin", model="instant", attributes=Attributes(), latency_ms=120.0,
                          prompt_tokens=30, completion_tokens=47, finish_reason="stop").to_json()
    store.users.ensure("past")
    # A bulk load has no typed API on purpose: this benchmark uses the store's private SQL helper.
    with store.transaction():
        store._db.execute("INSERT INTO conversations (id, user_id, title) SELECT 'past-c' || i, 'past', 'past' "
                       "FROM range(?) t(i)", [turns])
        store._db.execute("INSERT INTO messages (id, conversation_id, parent_id, role, content, generation) "
                       "SELECT 'past-m' || i, 'past-c' || (i // 2), CASE WHEN i % 2 = 1 THEN 'past-m' || (i - 1) END, "
                       "CASE WHEN i % 2 = 1 THEN 'assistant' ELSE 'user' END, ?, CASE WHEN i % 2 = 1 THEN ? END "
                       "FROM range(?) t(i) ORDER BY i", [ANSWER, meta, 2 * turns])
    store._db.execute("CHECKPOINT")  # measure from a settled file, not from a WAL holding the bulk load


def prefill_postgres(store: Store, turns: int) -> None:
    """The same rows on PostgreSQL (generate_series), then VACUUM ANALYZE: a settled table."""
    meta = GenerationMeta(backend="builtin", model="instant", attributes=Attributes(), latency_ms=120.0,
                          prompt_tokens=30, completion_tokens=47, finish_reason="stop").to_json()
    store.users.ensure("past")
    with store.transaction():
        store._db.execute("INSERT INTO conversations (id, user_id, title) SELECT 'past-c' || i, 'past', 'past' "
                       "FROM generate_series(0, ? - 1) AS t(i)", [turns])
        store._db.execute("INSERT INTO messages (id, conversation_id, parent_id, role, content, generation) "
                       "SELECT 'past-m' || i, 'past-c' || (i / 2), CASE WHEN i % 2 = 1 THEN 'past-m' || (i - 1) END, "
                       "CASE WHEN i % 2 = 1 THEN 'assistant' ELSE 'user' END, ?, "
                       "CASE WHEN i % 2 = 1 THEN CAST(? AS jsonb) END FROM generate_series(0, ? - 1) AS t(i) ORDER BY i",
                       [ANSWER, meta, 2 * turns])
    for table in ("conversations", "messages", "users"):
        store._db.execute(f"VACUUM ANALYZE {table}")


def open_store(tmp: str, backend: str, pg: Any = None) -> Store:
    if backend == "postgres":
        return Store(pg.create_database(), pool_size=16)
    return Store(Path(tmp) / "bench.duckdb")


def bench_logging(turns: int, threads: int, past: int, backend: str = "duckdb",
                  pg: Any = None) -> tuple[float, list[float]]:
    with tempfile.TemporaryDirectory() as tmp, open_store(tmp, backend, pg) as store:
        prefill(store, past)
        ctx = TurnContext(store=store, backend=InstantBackend(), steering="steerlm", source="cli")
        log_turns(ctx, "warmup", 5, [])
        per_thread = turns // threads
        latencies: list[list[float]] = [[] for _ in range(threads)]
        pool = [threading.Thread(target=log_turns, args=(ctx, f"user{t}", per_thread, latencies[t]))
                for t in range(threads)]
        t0 = time.perf_counter()
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        wall = time.perf_counter() - t0
        flat = [x for lat in latencies for x in lat]
        assert store.stats()["rows"]["generations"] == per_thread * threads + 5 + past, "lost turns"
        return len(flat) / wall, flat


def bench_generation(data_dir: Path, n: int, model_dir: Path | None = None, past: int = 0) -> tuple[list[float], dict, dict]:
    """Paired turns on the built-in model: each question answered twice with the same seed, once
    as a logged turn (`chat.turns.send`: question stored while the model starts, answer stored
    when the stream ends) and once straight from the backend with no store. Returns (unlogged
    wall ms, {"last_token", "after_last_token", "stored": [...]} logged-minus-unlogged ms per
    pair, info): what logging adds before the user has the whole answer, between the last token
    and the end of the turn (the answer's insert), and in all, until the turn is durable. The order within a pair alternates, so drift in machine
    load falls on both sides."""
    from chat.backends.transformers_backend import TransformersBackend
    from chat.builtin.build import build_builtin_model, builtin_model_path, is_built

    if model_dir is not None:
        path = model_dir
    else:
        path = builtin_model_path(data_dir)
        if not is_built(path):
            print(f"building the built-in model into {path} (minutes)…", flush=True)
        path = build_builtin_model(data_dir)
    backend = TransformersBackend(path, device="cpu", kind="builtin", name=path.name)
    attributes = Attributes(verbosity=2)
    plain_ms: list[float] = []
    extra_ms: dict[str, list[float]] = {"last_token": [], "after_last_token": [], "stored": []}
    tokens = []
    turns = []  # the logged turns, for their token counts

    def timed(start) -> tuple[float, float]:
        """(ms to the last delta, ms to the end of the iteration), counted from before `start()`
        (which submits the turn or starts the generation, and returns its deltas)."""
        t0 = last = time.perf_counter()
        for _ in start():
            last = time.perf_counter()
        return (last - t0) * 1000, (time.perf_counter() - t0) * 1000

    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "bench.duckdb") as store:
        prefill(store, past)
        ctx = TurnContext(store=store, backend=backend, steering="steerlm", source="cli")
        send(ctx, user_id="warmup", text="Hello?", params=SamplingParams(max_new_tokens=8)).run()
        for i in range(n):
            question = QUESTIONS[i % len(QUESTIONS)]
            params = SamplingParams(max_new_tokens=200, temperature=0.7, top_p=0.95, seed=i)

            def logged():
                turns.append(send(ctx, user_id="bench", text=question, attributes=attributes, params=params))
                return turns[-1]

            def unlogged():
                return backend.stream([{"role": "user", "content": question}], attributes=attributes,
                                      steering="steerlm", params=params)

            if i % 2:
                a, b = timed(logged), timed(unlogged)
            else:
                b, a = timed(unlogged), timed(logged)
            tokens.append(turns[-1].answer.generation.completion_tokens)
            plain_ms.append(b[1])
            extra_ms["last_token"].append(a[0] - b[0])
            extra_ms["after_last_token"].append((a[1] - a[0]) - (b[1] - b[0]))
            extra_ms["stored"].append(a[1] - b[1])
    info = {"model": path.name, "median_tokens": statistics.median(tokens)}
    backend.close()
    return plain_ms, extra_ms, info


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--data-dir", type=Path, default=REPO / ".cache" / "test",
                        help="where the built-in model is cached (default: the test cache)")
    parser.add_argument("--model-dir", type=Path, default=None,
                        help="an already built model directory to time instead (default: the current recipe's build)")
    parser.add_argument("--turns", type=int, default=400, help="turns per logging run")
    parser.add_argument("--gen-turns", type=int, default=300,
                        help="paired turns generated on the built-in model (the pairs differ by milliseconds of jitter: use hundreds)")
    parser.add_argument("--prefill", type=int, default=100_000, help="past turns in the store before measuring")
    parser.add_argument("--store", choices=["duckdb", "postgres", "both"], default="duckdb",
                        help="where the logging runs write (postgres: a server started for the run)")
    args = parser.parse_args()

    print("machine:", machine())
    p50 = None
    for backend in (["duckdb", "postgres"] if args.store == "both" else [args.store]):
        lat1 = logging_runs(backend, args)
        p50 = pct(lat1, 0.5) * 1000 if backend == "duckdb" else p50
    if args.gen_turns <= 0 or p50 is None:
        return

    plain_ms, extra_ms, info = bench_generation(args.data_dir, args.gen_turns, args.model_dir, args.prefill)
    gen_med = statistics.median(plain_ms)
    print(f"generation on {info['model']}: median {gen_med:.0f} ms per turn without a store "
          f"(median {info['median_tokens']:.0f} new tokens, n={len(plain_ms)} pairs)")
    shares = {}
    for what, label in (("last_token", "before the last token (the question is stored while the model starts)"),
                        ("after_last_token", "after the last token (the answer's insert)"),
                        ("stored", "in all, until the turn is stored")):
        xs = extra_ms[what]
        lo, hi = median_ci(xs)
        shares[what] = statistics.median(xs) / gen_med
        print(f"logging adds {label}: median {statistics.median(xs):+.1f} ms per pair "
              f"(95% CI {lo:+.1f} … {hi:+.1f}; p25 {pct(xs, 0.25):+.1f}, p75 {pct(xs, 0.75):+.1f}) = {shares[what]:.2%}")
    print(f"logging / generation (DuckDB): {p50 / gen_med:.2%} all logging work (isolated p50, overlapped or not); "
          f"{shares['stored']:.2%} added until stored   target < 2%: {'met' if shares['stored'] < 0.02 else 'NOT met'}")


def logging_runs(backend: str, args: argparse.Namespace) -> list[float]:
    """Logging alone, from 1 and from 8 threads, on one backend; prints and returns the 1-thread latencies."""
    pg = None
    if backend == "postgres":
        from deploy.ops.pg_throwaway import PostgresServer

        pg = PostgresServer.start(durable=True)
        print(f"store: PostgreSQL (fsync on, 127.0.0.1) holding {args.prefill:,} past turns")
    else:
        print(f"store: a fresh DuckDB file holding {args.prefill:,} past turns")
    try:
        rate1, lat1 = bench_logging(args.turns, 1, args.prefill, backend, pg)
        rate8, lat8 = bench_logging(args.turns, 8, args.prefill, backend, pg)
    finally:
        if pg is not None:
            pg.stop()
    queueing = "writes are serialised, so latency includes queueing" if backend == "duckdb" else "concurrent writers"
    print(f"[{backend}] logging, 1 thread : {rate1:7.1f} turns/s   p50 {pct(lat1, 0.5) * 1000:6.1f} ms   "
          f"p99 {pct(lat1, 0.99) * 1000:6.1f} ms   (n={len(lat1)})")
    print(f"[{backend}] logging, 8 threads: {rate8:7.1f} turns/s   p50 {pct(lat8, 0.5) * 1000:6.1f} ms   "
          f"p99 {pct(lat8, 0.99) * 1000:6.1f} ms   (n={len(lat8)}; {queueing})")
    return lat1


if __name__ == "__main__":
    main()
