"""Load test of the chat service: N concurrent simulated users × T turns through the public REST
API (streaming), on the built-in model.

Prints the machine, every turn's fate (all must be stored: the counts are checked against the
database), p50/p95 latency and time to first token, throughput, and the service's overhead over
calling the backend directly, as a ratio.

The overhead is measured in pairs: the same conversation, turn by turn, once through the
service's API and once straight into the backend (alternating which goes first, greedy decoding
so both generate exactly the same tokens), so load from other processes hits both sides alike.
One model serves all users and generates one answer at a time, so under load a turn's latency is
mostly its wait in that queue; `--direct-load` also replays the whole load straight into the
backend for a throughput comparison (noisier on a shared machine).

    .venv/bin/python bench/chat_load.py                 # 32 users x 10 turns, 8 tokens/answer
    .venv/bin/python bench/chat_load.py --users 8 --turns 3 --max-new-tokens 16 --direct-load

The built-in model is built into `<data-dir>/models/` first if it is not there yet (minutes).
Exit status 1 if any turn is missing from the store or failed.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "tests"))  # service_helpers.start_service

QUESTIONS = [
    "My roommate never does the dishes. How do I bring it up?",
    "I got a job offer with more pay but a longer commute. What should I do?",
    "How can I stop procrastinating on my thesis?",
    "My friend keeps cancelling plans at the last minute.",
    "Should I lend money to my brother again?",
    "How do I tell my manager I am overwhelmed?",
    "I want to start running but I always give up after a week.",
    "My parents want me to visit every weekend and I am exhausted.",
    "How do I save money when my rent went up?",
    "I feel lonely since I moved to a new city.",
    "Thanks, that helps. What is the first step?",
    "No, I meant at work, not at home.",
]


from _machine import cpu_model  # noqa: E402


def machine() -> str:
    import torch

    try:
        import psutil

        mem = f"{psutil.virtual_memory().total / 2**30:.0f} GiB RAM"
        load = "load avg " + ", ".join(f"{x:.1f}" for x in os.getloadavg())
    except Exception:
        mem, load = "", ""
    cpu = cpu_model()
    return (f"{platform.system()} {platform.release()} · {cpu} · {os.cpu_count()} CPUs · {mem} · "
            f"torch {torch.__version__} ({torch.get_num_threads()} threads) · Python {platform.python_version()} · {load}")


def pct(values: list[float], q: float) -> float:
    if not values:
        return float("nan")
    s = sorted(values)
    return s[min(len(s) - 1, int(round(q / 100 * (len(s) - 1))))]


def question(user: int, turn: int) -> str:
    return f"{QUESTIONS[(user + turn) % len(QUESTIONS)]} (user {user}, turn {turn})"


# --------------------------------------------------------------------------- service side


def streamed_turn(client, body: dict) -> dict:
    """POST one streamed turn to /api/messages: its conversation id, seconds to the first text shown
    (a delta, or the guard's replacement) and to the end, and the stored answer."""
    t0 = time.perf_counter()
    out = {"conversation_id": None, "ttft": None, "answer": None}
    with client.stream("POST", "/api/messages", json=body) as r:
        if r.status_code != 200:
            raise RuntimeError(f"HTTP {r.status_code}: {r.read()[:200]!r}")
        for line in r.iter_lines():
            if not line.startswith("data: "):
                continue
            event = json.loads(line[6:])
            if event["type"] == "start":
                out["conversation_id"] = event["conversation_id"]
            elif event["type"] in ("delta", "replace") and out["ttft"] is None:
                out["ttft"] = time.perf_counter() - t0
            elif event["type"] == "done":
                out["answer"] = event["answer"]
            elif event["type"] == "error":
                raise RuntimeError(event["error"]["message"])
    return {**out, "latency": time.perf_counter() - t0}


def run_service(url: str, users: int, turns: int, params: dict) -> tuple[list[dict], float, list[str]]:
    import httpx

    results: list[dict] = []
    errors: list[str] = []
    lock = threading.Lock()

    def user(u: int) -> None:
        with httpx.Client(base_url=url, timeout=600) as c:
            conv = None
            for t in range(turns):
                body = {"content": question(u, t), "stream": True, "conversation_id": conv, **params}
                try:
                    turn = streamed_turn(c, body)
                except Exception as exc:  # record and go on: the count check will flag it
                    with lock:
                        errors.append(f"user {u} turn {t}: {exc}")
                    continue
                conv, done = turn["conversation_id"] or conv, turn["answer"]
                with lock:
                    results.append({"user": u, "turn": t, "latency": turn["latency"], "ttft": turn["ttft"],
                                    "conversation_id": conv, "answer_id": done and done["id"],
                                    "tokens": done and done["generation"]["completion_tokens"]})

    t0 = time.perf_counter()
    with ThreadPoolExecutor(users) as pool:
        list(pool.map(user, range(users)))
    return results, time.perf_counter() - t0, errors


# --------------------------------------------------------------------------- direct side


def run_direct(backend, users: int, turns: int, params, attributes) -> tuple[list[dict], float]:
    """The same conversations straight into the backend: what a turn costs without the service."""
    results: list[dict] = []
    lock = threading.Lock()
    steer = attributes.steerlm()

    def user(u: int) -> None:
        history: list[dict] = []
        for t in range(turns):
            history.append({"role": "user", "content": question(u, t)})
            t0 = time.perf_counter()
            gen = backend.stream(history, attributes=attributes, steering="steerlm", params=params)
            first = None
            for _ in gen:
                if first is None:
                    first = time.perf_counter() - t0
            latency = time.perf_counter() - t0
            history.append({"role": "assistant", "content": gen.text, "attributes": steer})
            with lock:
                results.append({"latency": latency, "ttft": first, "tokens": gen.completion_tokens})

    t0 = time.perf_counter()
    with ThreadPoolExecutor(users) as pool:
        list(pool.map(user, range(users)))
    return results, time.perf_counter() - t0


def paired_overhead(url: str, backend, pairs: int, params: dict, attributes) -> dict:
    """Per-turn cost of the service over the backend, measured pair by pair on one conversation."""
    import httpx

    from chat.backends import SamplingParams

    steer, history, conv = attributes.steerlm(), [], None
    service_s, direct_s, inside_s = [], [], []
    with httpx.Client(base_url=url, timeout=600) as client:
        for k in range(pairs):
            q = question(10_000, k)
            prompt = history + [{"role": "user", "content": q}]

            def direct() -> str:
                t0 = time.perf_counter()
                gen = backend.stream(prompt, attributes=attributes, steering="steerlm", params=SamplingParams(**params))
                text = gen.read()
                direct_s.append(time.perf_counter() - t0)
                return text

            def via_service() -> str:
                nonlocal conv
                t0 = time.perf_counter()
                r = client.post("/api/messages", json={"content": q, "conversation_id": conv, **params})
                service_s.append(time.perf_counter() - t0)
                r.raise_for_status()
                conv = r.json()["conversation_id"]
                inside_s.append(r.json()["answer"]["generation"]["latency_ms"] / 1000)  # the model's own time
                return r.json()["answer"]["content"]

            first, second = (via_service, direct) if k % 2 == 0 else (direct, via_service)
            a, b = first(), second()
            if a != b:
                print(f"  note: pair {k} generated different text through the service and directly")
            history = prompt + [{"role": "assistant", "content": a, "attributes": steer}]
    diffs = [s - d for s, d in zip(service_s, direct_s)]
    ratios = [s / d for s, d in zip(service_s, direct_s)]
    # The same turn seen from the client and from inside the service's generation: immune to
    # load from other processes drifting between the two halves of a pair.
    within = [s - g for s, g in zip(service_s, inside_s)]
    within_ratio = [s / g for s, g in zip(service_s, inside_s)]
    out = {"pairs": pairs, "service_p50_s": statistics.median(service_s), "direct_p50_s": statistics.median(direct_s),
           "extra_ms_p50": statistics.median(diffs) * 1000, "ratio": statistics.median(ratios),
           "ratio_total": sum(service_s) / sum(direct_s),
           "within_ms_p50": statistics.median(within) * 1000, "within_ratio": statistics.median(within_ratio)}
    print(f"overhead, {pairs} paired turns at concurrency 1: service/direct {out['ratio']:.3f}x "
          f"(median of per-pair ratios; totals {out['ratio_total']:.3f}x), +{out['extra_ms_p50']:.0f} ms per turn "
          f"(median difference); service p50 {out['service_p50_s'] * 1000:.0f} ms, "
          f"direct p50 {out['direct_p50_s'] * 1000:.0f} ms")
    print(f"overhead within the same turns: client latency / the model's own generation time "
          f"{out['within_ratio']:.3f}x, +{out['within_ms_p50']:.0f} ms (medians)")
    return out


def summary(name: str, rows: list[dict], wall: float) -> dict:
    lat = [r["latency"] for r in rows]
    ttft = [r["ttft"] for r in rows if r["ttft"] is not None]
    tokens = sum(r["tokens"] or 0 for r in rows)
    out = {"turns": len(rows), "wall_s": wall, "p50_s": pct(lat, 50), "p95_s": pct(lat, 95),
           "mean_s": statistics.fmean(lat) if lat else float("nan"),
           "ttft_p50_s": pct(ttft, 50), "ttft_p95_s": pct(ttft, 95),
           "turns_per_s": len(rows) / wall if wall else 0.0, "tokens": tokens,
           "tokens_per_s": tokens / wall if wall else 0.0}
    print(f"{name:>8}: {out['turns']} turns in {wall:6.1f} s · latency p50 {out['p50_s']:.2f} s, "
          f"p95 {out['p95_s']:.2f} s · first token p50 {out['ttft_p50_s']:.2f} s, p95 {out['ttft_p95_s']:.2f} s · "
          f"{out['turns_per_s']:.2f} turns/s · {out['tokens_per_s']:.0f} tokens/s")
    return out


# --------------------------------------------------------------------------- main


@contextmanager
def service(backend, tmp: Path, kind: str, guard: bool = True) -> Iterator[tuple[str, object]]:
    """The advisor service (FastAPI + uvicorn, no UI) on `backend`, on a free port (the tests'
    `start_service`); yields (url, store). `guard=False` turns the guard and its safety policy off:
    what is left is the service around the backend call (the guard has its own bench,
    bench/guard_latency.py)."""
    from service_helpers import start_service

    from deploy.settings import load_settings
    from store import Store

    settings = load_settings(environ={}, overrides={
        "data_dir": str(tmp), "backend.kind": kind, "backend.steering": "steerlm",
        "schedule.extract_every_minutes": 0, "schedule.train_cron": "",
        **({} if guard else {"guard.enabled": False, "guard.system_prompt": ""})})
    store = Store(tmp / "advisor.duckdb")
    live = start_service(settings, backend=backend, store=store, ui=False)
    try:
        yield live.url, store
    finally:
        live.stop()
        store.close()


# Counts no typed function gives, read through the store's private analytics helper (benchmark only):
# questions, complete answers with their metadata, failed or interrupted answers.
_STORED_COUNTS = (
    "SELECT count(*) FROM messages WHERE role = 'user'",
    "SELECT count(*) FROM messages m JOIN generations g ON g.message_id = m.id "
    "WHERE m.role = 'assistant' AND m.status = 'complete'",
    "SELECT count(*) FROM messages WHERE role = 'assistant' AND status <> 'complete'",
)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--users", type=int, default=32)
    ap.add_argument("--turns", type=int, default=10)
    ap.add_argument("--max-new-tokens", type=int, default=8)
    ap.add_argument("--pairs", type=int, default=20, help="paired service/direct turns for the overhead ratio")
    ap.add_argument("--data-dir", type=Path, default=REPO / "data",
                    help="where the built-in model is (or gets built): <data-dir>/models/builtin-*")
    ap.add_argument("--model-dir", type=Path, default=None, help="use this model directory instead")
    ap.add_argument("--direct-load", action="store_true", help="also replay the whole load into the backend")
    args = ap.parse_args()

    from chat.backends import SamplingParams
    from chat.backends.transformers_backend import TransformersBackend
    from chat.builtin.build import build_builtin_model
    from store.attributes import Attributes

    print("machine:", machine())
    model_dir = args.model_dir or build_builtin_model(
        args.data_dir, progress=lambda s, n, loss: print(f"  building the built-in model {s}/{n}", end="\r"))
    print(f"model: {model_dir}")
    backend = TransformersBackend(model_dir, device="cpu", kind="builtin", name=Path(model_dir).name,
                                  local_files_only=True)
    params = {"max_new_tokens": args.max_new_tokens, "temperature": 0.0, "seed": 0}
    attributes = Attributes()

    with tempfile.TemporaryDirectory(prefix="advisor-bench-") as tmp, \
            service(backend, Path(tmp), "builtin", guard=False) as (url, store):  # the guard needs SmolLM2's judges
        print(f"load: {args.users} users x {args.turns} turns, {args.max_new_tokens} new tokens max, greedy")
        rows, wall, errors = run_service(url, args.users, args.turns, params)
        service_summary = summary("service", rows, wall)

        # Every turn must be in the store: a question and a complete answer with its metadata.
        expected = args.users * args.turns
        n_conv = store.stats()["rows"]["conversations"]
        n_user, n_ans, n_bad = (store._db.analytics(sql)[0][0] for sql in _STORED_COUNTS)
        print(f"  stored: {n_conv} conversations (expected {args.users}), {n_user} questions and {n_ans} "
              f"complete answers (expected {expected} each), {n_bad} failed/interrupted, "
              f"{len(errors)} client errors")
        for e in errors[:5]:
            print("   ", e)
        ok = n_conv == args.users and n_user == expected and n_ans == expected and not n_bad and not errors
        if args.pairs:
            paired_overhead(url, backend, args.pairs, params, attributes)

    if args.direct_load:
        direct_rows, direct_wall = run_direct(backend, args.users, args.turns, SamplingParams(**params), attributes)
        direct = summary("direct", direct_rows, direct_wall)
        ratio = {k: service_summary[k] / direct[k] for k in ("wall_s", "p50_s", "p95_s")}
        print(f"load replayed into the backend: service/direct wall {ratio['wall_s']:.3f}x, "
              f"p50 {ratio['p50_s']:.3f}x, p95 {ratio['p95_s']:.3f}x "
              f"(tokens: service {service_summary['tokens']}, direct {direct['tokens']})")
    backend.close()
    print("RESULT:", "all turns stored" if ok else "MISSING OR FAILED TURNS")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
