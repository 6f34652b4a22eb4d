"""Benchmark: what logging a chat turn costs, next to generating it.

Measures, on a fresh DuckDB file:
  1. turns logged per second from 1 thread and from 8 threads, and p50/p99 latency of logging
     one turn. A turn is logged through the real `chat.turns` path (question + new
     conversation at submit, history read, answer with its generation metadata at the end)
     with an instant backend, so the time measured is the logging and nothing else;
  2. generation time of real turns on the built-in model (the cached build in --data-dir,
     built first if missing), and what logging adds to those same turns in place: each question
     answered twice with one seed, as a logged turn and straight from the backend, the
     difference taken per pair, until the last token reaches the reader and until the turn is
     stored (the question's commit overlaps the model's start; the answer's follows its last
     token);
  3. logging cost as a share of generation time (target: under 2%), each way.

Prints the machine (CPU model, cores, load) first, then medians and ratios.
Run: .venv/bin/python bench/store.py [--data-dir .cache/test | --model-dir DIR] [--turns 400] [--gen-turns 40]
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

from chat.backends import Generation, SamplingParams  # noqa: E402
from chat.turns import TurnContext, send  # noqa: E402
from feedback.attributes import Attributes  # noqa: E402
from feedback.store import Store  # noqa: E402

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


def log_turns(ctx: TurnContext, user: str, n: int, out: list[float]) -> None:
    params = SamplingParams()
    for i in range(n):
        t0 = time.perf_counter()
        send(ctx, user_id=user, text=QUESTIONS[i % len(QUESTIONS)], attributes=Attributes(verbosity=i % 5),
             params=params).run()
        out.append(time.perf_counter() - t0)


def bench_logging(turns: int, threads: int) -> tuple[float, list[float]]:
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "bench.duckdb") as store:
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
        assert store.stats()["rows"]["generations"] == per_thread * threads + 5, "lost turns"
        return len(flat) / wall, flat


def bench_generation(data_dir: Path, n: int, model_dir: Path | None = None) -> tuple[list[float], dict, dict]:
    """Paired turns on the built-in model: each question answered twice with the same seed, once
    as a logged turn (`chat.turns.send`: question stored while the model starts, answer stored
    when the stream ends) and once straight from the backend with no store. Returns (unlogged
    wall ms, {"last_token": [...], "stored": [...]} logged-minus-unlogged ms per pair, info):
    `last_token` is what logging adds before the user has the whole answer, `stored` what it
    adds before the turn is durable. The order within a pair alternates, so drift in machine
    load falls on both sides."""
    from chat.backends import TransformersBackend
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
    extra_ms: dict[str, list[float]] = {"last_token": [], "stored": []}
    tokens = []

    def timed(deltas) -> tuple[float, float]:
        """(ms to the last delta, ms to the end of the iteration) from now."""
        t0 = last = time.perf_counter()
        for _ in deltas:
            last = time.perf_counter()
        return (last - t0) * 1000, (time.perf_counter() - t0) * 1000

    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "bench.duckdb") as store:
        ctx = TurnContext(store=store, backend=backend, steering="steerlm", source="cli")
        send(ctx, user_id="warmup", text="Hello?", params=SamplingParams(max_new_tokens=8)).run()
        for i in range(n):
            question = QUESTIONS[i % len(QUESTIONS)]
            params = SamplingParams(max_new_tokens=200, temperature=0.7, top_p=0.95, seed=i)

            def logged() -> tuple[float, float]:
                t0 = time.perf_counter()
                turn = send(ctx, user_id="bench", text=question, attributes=attributes, params=params)
                submit = (time.perf_counter() - t0) * 1000
                last, end = timed(turn)
                tokens.append(turn.answer.generation.completion_tokens)
                return submit + last, submit + end

            def unlogged() -> tuple[float, float]:
                return timed(backend.stream([{"role": "user", "content": question}], attributes=attributes,
                                            steering="steerlm", params=params))

            if i % 2:
                a, b = logged(), unlogged()
            else:
                b, a = unlogged(), logged()
            plain_ms.append(b[1])
            extra_ms["last_token"].append(a[0] - b[0])
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
    parser.add_argument("--gen-turns", type=int, default=40, help="turns generated on the built-in model")
    args = parser.parse_args()

    print("machine:", machine())
    rate1, lat1 = bench_logging(args.turns, 1)
    rate8, lat8 = bench_logging(args.turns, 8)
    p50, p99 = pct(lat1, 0.5) * 1000, pct(lat1, 0.99) * 1000
    print(f"logging, 1 thread : {rate1:7.1f} turns/s   p50 {p50:6.1f} ms   p99 {pct(lat1, 0.99) * 1000:6.1f} ms   (n={len(lat1)})")
    print(f"logging, 8 threads: {rate8:7.1f} turns/s   p50 {pct(lat8, 0.5) * 1000:6.1f} ms   p99 {pct(lat8, 0.99) * 1000:6.1f} ms   "
          f"(n={len(lat8)}; writes are serialised, so latency includes queueing)")

    plain_ms, extra_ms, info = bench_generation(args.data_dir, args.gen_turns, args.model_dir)
    gen_med = statistics.median(plain_ms)
    print(f"generation on {info['model']}: median {gen_med:.0f} ms per turn without a store "
          f"(median {info['median_tokens']:.0f} new tokens, n={len(plain_ms)} pairs)")
    shares = {}
    for what, label in (("last_token", "until the user has the whole answer"), ("stored", "until the turn is stored")):
        xs = extra_ms[what]
        shares[what] = statistics.median(xs) / gen_med
        print(f"logging adds, {label}: median {statistics.median(xs):+.1f} ms per pair "
              f"(p25 {pct(xs, 0.25):+.1f}, p75 {pct(xs, 0.75):+.1f}) = {shares[what]:.2%}")
    print(f"logging / generation: {p50 / gen_med:.2%} all logging work (isolated p50); "
          f"{shares['last_token']:.2%} added before the last token; {shares['stored']:.2%} added before stored"
          f"   target < 2%: {'met' if shares['stored'] < 0.02 else 'NOT met'} (until stored)")

if __name__ == "__main__":
    main()
