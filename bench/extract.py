"""Benchmark natural-feedback extraction.

    .venv/bin/python bench/extract.py [--conversations 100000] [--chunk-size 5000] [--llm-sample 16]
                                      [--skip-llm] [--workdir DIR] [--model-data-dir DIR] [--out FILE]
                                      [--reranker packaged|none|DIR]

1. Fast extractor: a generated log of N conversations (default 100,000; built from the gold set's
   topics and phrasings, with a realistic share of turns without feedback) is bulk-loaded into a
   real DuckDB store; then, in a child process pinned to ONE core (torch and DuckDB at one
   thread), `run_extraction` streams it in chunks exactly as the service does (watermark, one
   transaction per chunk, a jobs row). Reported: conversations/s overall and the median over
   chunks, time in the extractor vs the store, how many windows went to the embedding model, and
   resident memory after each chunk plus the peak (flat memory = no growth with N). `--reranker`
   is the cross-encoder tier as `extraction.reranker` names it: `packaged` (the default, as the
   service runs), `none` (the sentence classifier alone), or a directory.
2. LLM extractor on the built-in model (built on first use into --model-data-dir, minutes): the
   same windows from the gold dev split, batched vs one prompt at a time, 3 repeats each, medians.
3. With `--store postgres` the log goes into a real PostgreSQL server started for the run (fsync
   on), and extraction reads it the way a replica does: through the store's analytics mirror (an
   in-memory DuckDB fed by COPY, `store/mirror.py`). Reported besides: the mirror's
   first full copy (rows/s), and the latency of the operator's overview reports at that size,
   cold (right after extraction wrote its events) and warm (nothing changed) — on either store.
Prints the machine first. Numbers from a shared or busy machine are noisy: the load average is
printed with them.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from datetime import datetime, timedelta, timezone
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

# ---------------------------------------------------------------------------- machine


from _machine import cpu_model  # noqa: E402


def machine() -> dict:
    cpu = cpu_model()
    import psutil

    return {
        "cpu": cpu,
        "cores": os.cpu_count(),
        "memory_gib": round(psutil.virtual_memory().total / 2**30, 1),
        "python": platform.python_version(),
        "platform": platform.platform(),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }


# ---------------------------------------------------------------------------- the generated log

# Second and later user turns: mostly plain follow-ups, feedback of every kind, hard negatives.
TURN_WEIGHTS = {
    "follow": 0.42, "pos": 0.08, "pos_follow": 0.07, "awo": 0.05, "awc": 0.05, "clar": 0.07,
    "clar_deictic": 0.02, "reph": 0.05, "awo_reph": 0.02, "newq": 0.05, "self_fix": 0.04,
    "in_advance": 0.04, "no_answer": 0.04,
}
USER_TURNS = {1: 0.30, 2: 0.35, 3: 0.22, 4: 0.13}  # user messages per conversation
DETAILS = ("I'm {n}.", "We have {n} kids.", "It's been {n} weeks.", "I earn about {n}k a year.",
           "My budget is {n}0 dollars.", "I live {n} km from work.")


def generate(path: Path | str, n: int, *, seed: int = 0, batch: int = 20_000) -> dict:
    """Bulk-load `n` conversations into a fresh store at `path` (a DuckDB file or a PostgreSQL URL;
    seq in parent-before-child order)."""
    from store import Store
    from tools.data.gold_topics import TOPICS
    from tools.data.make_dev_gold import CHECK_QUESTION, REPLY_PREFIX, _Composer

    rng = random.Random(seed)
    kinds, weights = zip(*TURN_WEIGHTS.items())
    turns, turn_w = zip(*USER_TURNS.items())
    start = datetime.now(timezone.utc) - timedelta(days=30)
    step = timedelta(days=30) / max(n, 1)
    t0 = time.perf_counter()
    n_messages = 0
    # A bulk load has no typed API on purpose: this benchmark uses the store's private SQL helpers.
    with Store(path) as store:
        if store.dialect == "duckdb":
            store._db.execute("SET threads TO 1")  # nextval() in row order (PostgreSQL's COPY: row order already)
        for lo in range(0, n, batch):
            users, convs, msgs = set(), {k: [] for k in ("id", "user_id", "title", "created_at")}, {
                k: [] for k in ("id", "conversation_id", "parent_id", "role", "content", "created_at")}
            for i in range(lo, min(n, lo + batch)):
                topic = TOPICS[rng.randrange(len(TOPICS))]
                composer = _Composer(topic, rng.randrange(2), rng)
                when = start + step * i
                conv_id, user_id = f"c{i}", f"u{i // 10}"
                users.add(user_id)
                first = f"{topic.ask} {rng.choice(DETAILS).format(n=rng.randrange(2, 90))}"
                answer = topic.answer + (CHECK_QUESTION if rng.random() < 0.2 else "")
                thread = [("user", first), ("assistant", answer)]
                for k in range(rng.choices(turns, turn_w)[0] - 1):
                    kind = rng.choices(kinds, weights)[0]
                    text, _, reply = composer.turn(kind, term=topic.terms[0] if k == 0 else topic.more_term)
                    thread += [("user", text), ("assistant", REPLY_PREFIX[reply] + topic.more)]
                parent = None
                for j, (role, content) in enumerate(thread):
                    mid = f"{conv_id}-{j}"
                    for key, value in zip(msgs, (mid, conv_id, parent, role, content, when + timedelta(seconds=j))):
                        msgs[key].append(value)
                    parent = mid
                for key, value in zip(convs, (conv_id, user_id, topic.ask[:80], when)):
                    convs[key].append(value)
                n_messages += len(thread)
            convs["source"], convs["updated_at"] = ["simulator"] * len(convs["id"]), convs["created_at"]
            with store.transaction():
                store._db.insert_rows("users", ["id"], {"id": sorted(users)}, skip_conflicts=True)
                store._db.insert_rows("conversations", list(convs), convs)
                store._db.insert_rows("messages", list(msgs), msgs)
        bad = store._db.analytics("SELECT count(*) FROM messages c JOIN messages p ON c.parent_id = p.id WHERE c.seq <= p.seq")
        if bad[0][0]:
            raise SystemExit(f"generated log is not in parent-before-child seq order ({bad[0][0]} rows)")
        n_user = store._db.analytics("SELECT count(*) FROM messages WHERE role = 'user'")[0][0]
    size = round(path.stat().st_size / 2**20, 1) if isinstance(path, Path) else None
    return {"conversations": n, "messages": n_messages, "user_messages": int(n_user),
            "seconds": round(time.perf_counter() - t0, 1), "file_mib": size}


# ---------------------------------------------------------------------------- fast run (child process)


def _cpu_seconds() -> float:
    """User + system CPU time of this process: what one dedicated core would spend. On a busy
    machine wall-clock time also counts the time other processes held the core."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def report_latency(store) -> dict:
    """Seconds for the operator's overview reports (stats, counts over time, feedback prevalence)."""
    from store import reports

    t = time.perf_counter()
    reports.overview(store)
    reports.counts_over_time(store, days=30)
    reports.feedback_prevalence(store, days=30)
    return round(time.perf_counter() - t, 3)


def _fast_report(n_conv: int, result, total: float, cpu: float, timing: dict, load_s: float, rss0: int,
                 samples: list[dict]) -> dict:
    """The fast run's figures, from what `run_fast` measured."""
    import resource

    ratio = n_conv / max(result.messages, 1)  # conversations per user message
    per_chunk = [s["chunk_messages"] * ratio / s["seconds"] for s in samples if s["seconds"] > 0]
    return {
        "conversations": n_conv, "status": result.status, "seconds": round(total, 1),
        "conversations_per_s": round(n_conv / total, 1),
        "cpu_s": round(cpu, 1), "conversations_per_cpu_s": round(n_conv / cpu, 1),
        "embed_s": round(timing["embed_s"], 1),
        "median_chunk_conversations_per_s": round(statistics.median(per_chunk), 1) if per_chunk else None,
        "user_messages": result.messages, "windows": result.windows, "new_events": result.new_events,
        "per_category": result.per_category, "chunks": result.chunks,
        "extract_s": round(timing["extract_s"], 1), "store_s": round(total - timing["extract_s"], 1),
        "doubtful_pairs": result.stats.get("doubtful_rephrases", 0),
        "embedded_pairs": result.stats.get("embedded_pairs", 0),
        "embedded_texts": result.stats.get("embedded_texts", 0),
        "over_embedding_budget": result.stats.get("embedding_over_budget", 0),
        "embedder_load_s": round(load_s, 1),
        "rss_before_mib": round(rss0 / 2**20), "rss_after_chunks_mib": [round(s["rss_mib"]) for s in samples],
        "duckdb_after_chunks_mib": [round(s["duckdb_mib"]) for s in samples],
        "peak_rss_mib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024),
        "errors": result.errors[:5],
    }


def _store_figures(store, db: Path | str, first_read_s: float) -> dict:
    """The store's side: which one, its first analytics read (on PostgreSQL the mirror's full copy)
    and the operator reports' latency, cold then warm."""
    cold, warm = report_latency(store), report_latency(store)
    n_messages = int(store._db.analytics("SELECT count(*) FROM messages")[0][0])
    return {"store": "postgres" if str(db).startswith("postgresql://") else "duckdb",
            "first_read_s": round(first_read_s, 2), "messages": n_messages,
            "first_read_rows_per_s": round(n_messages / first_read_s) if first_read_s else None,
            "reports_cold_s": cold, "reports_warm_s": warm}


def load_reranker(name: str):
    """The cross-encoder tier `--reranker` names (`packaged`, `none` or a directory), or None."""
    if name == "none":
        return None
    from feedback.extract import Reranker
    from feedback.extract.rerank import located

    return Reranker(located(name))


def run_fast(db: Path | str, chunk_size: int, embeddings: bool = True, reranker: str = "packaged") -> dict:
    """Runs in a child pinned to one core; returns the measurements."""
    import psutil
    import torch

    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    torch.set_num_threads(1)
    from feedback.extract import FastConfig, FastExtractor, run_extraction
    from store import Store

    proc = psutil.Process()
    t = time.perf_counter()
    extractor = FastExtractor(FastConfig.tuned(), use_embeddings=embeddings, reranker=load_reranker(reranker))
    # The service loads the embedding model on first use, which only the rules-only reading makes:
    # warmed here (out of the timing) only then, so the classifier path's memory is what it uses.
    embeddings = embeddings and extractor.model is None
    if embeddings:
        extractor.embedder(["warm up the embedding model"])
    load_s = time.perf_counter() - t

    timing = {"extract_s": 0.0, "embed_s": 0.0}
    inner = extractor.extract
    embedder = extractor.embedder if embeddings else None

    def timed_embed(texts):
        t0 = time.perf_counter()
        try:
            return embedder(texts)
        finally:
            timing["embed_s"] += time.perf_counter() - t0

    if embeddings:
        extractor._embedder = timed_embed

    def timed(windows):
        t0 = time.perf_counter()
        try:
            return inner(windows)
        finally:
            timing["extract_s"] += time.perf_counter() - t0

    extractor.extract = timed  # type: ignore[method-assign]
    samples: list[dict] = []
    with Store(db) as store:
        # Settings, DuckDB's memory: no typed API, so private helpers (on PostgreSQL: the mirror's DuckDB).
        (store._db.execute if store.dialect == "duckdb" else store._db.analytics)("SET threads TO 1")
        t = time.perf_counter()
        n_conv = store.stats()["rows"]["conversations"]  # on PostgreSQL: the mirror's first, full copy
        first_copy_s = time.perf_counter() - t
        rss0 = proc.memory_info().rss
        last = [time.perf_counter(), 0]

        def progress(r) -> None:
            now = time.perf_counter()
            duckdb_bytes = store._db.analytics("SELECT coalesce(sum(memory_usage_bytes), 0) FROM duckdb_memory()")[0][0]
            samples.append({"chunk": r.chunks, "messages": r.messages, "seconds": now - last[0],
                            "chunk_messages": r.messages - last[1], "rss_mib": proc.memory_info().rss / 2**20,
                            "duckdb_mib": duckdb_bytes / 2**20})
            last[:] = [now, r.messages]

        cpu0 = _cpu_seconds()
        t = time.perf_counter()
        result = run_extraction(store, extractor, lock=threading.Lock(), trigger="bench", chunk_size=chunk_size,
                                progress=progress)
        total = time.perf_counter() - t
        cpu = _cpu_seconds() - cpu0
        mirror = _store_figures(store, db, first_copy_s)
    return (_fast_report(n_conv, result, total, cpu, timing, load_s, rss0, samples) | mirror
            | {"extractor_version": extractor.version})


# ---------------------------------------------------------------------------- LLM


def run_llm(sample: int, model_data_dir: Path, repeats: int = 3, batch_size: int = 8,
            model_dir: Path | None = None) -> dict:
    import torch

    from chat.backends import SamplingParams
    from chat.backends.transformers_backend import TransformersBackend
    from chat.builtin.build import build_builtin_model, builtin_model_path, is_built
    from feedback.extract import LLMExtractor, load_gold, windows_of

    if model_dir is not None:
        path = model_dir
    else:
        if not is_built(builtin_model_path(model_data_dir)):
            print(f"building the built-in model into {model_data_dir} (minutes, once)...", flush=True)
        path = build_builtin_model(model_data_dir)
    torch.set_num_threads(min(4, os.cpu_count() or 1))
    backend = TransformersBackend(path, device="cpu", kind="builtin", name=path.name, local_files_only=True)
    params = SamplingParams(max_new_tokens=160, temperature=0.0)

    def complete(batch):
        return backend.complete(batch, attributes=None, steering="steerlm", params=params)

    gold = load_gold(split="dev")
    windows = [w for c in gold for w in windows_of(c)][:sample]
    conversations = len({w.key[0] for w in windows})
    out: dict = {"model": path.name, "windows": len(windows), "conversations": conversations,
                 "torch_threads": torch.get_num_threads(), "max_new_tokens": params.max_new_tokens}
    for label, bs in (("one_at_a_time", 1), ("batched", batch_size)):
        times, kept = [], 0
        for _ in range(repeats):
            t = time.perf_counter()
            result = LLMExtractor(complete, batch_size=bs).extract(windows)
            times.append(time.perf_counter() - t)
            kept = result.stats.get("kept", 0)
        med = statistics.median(times)
        out[label] = {"batch_size": bs, "median_s": round(med, 2), "windows_per_s": round(len(windows) / med, 2),
                      "conversations_per_s": round(conversations / med, 2), "kept_items": kept,
                      "dropped": {k: v for k, v in result.stats.items() if k != "kept"}}
    out["batched_speedup"] = round(out["one_at_a_time"]["median_s"] / out["batched"]["median_s"], 2)
    backend.close()
    return out


# ---------------------------------------------------------------------------- main


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--conversations", type=int, default=100_000)
    parser.add_argument("--chunk-size", type=int, default=5000)
    parser.add_argument("--llm-sample", type=int, default=16)
    parser.add_argument("--skip-llm", action="store_true")
    parser.add_argument("--skip-fast", action="store_true")
    parser.add_argument("--no-embeddings", action="store_true", help="Fast extractor on cues alone (for comparison).")
    parser.add_argument("--reranker", default="packaged",
                        help="the cross-encoder tier: packaged (the service's default), none, or a directory")
    parser.add_argument("--workdir", type=Path, default=None)
    parser.add_argument("--model-data-dir", type=Path, default=REPO / ".cache" / "test",
                        help="Where the built-in model is cached (built there on first use).")
    parser.add_argument("--model-dir", type=Path, default=None,
                        help="Use this model directory instead of the built-in model (e.g. a tiny random one).")
    parser.add_argument("--out", type=Path, help="Also write the report (machine, log, fast, llm) as JSON here.")
    parser.add_argument("--phase", choices=["fast"], help=argparse.SUPPRESS)
    parser.add_argument("--db", help=argparse.SUPPRESS)
    parser.add_argument("--store", choices=["duckdb", "postgres"], default="duckdb",
                        help="where the generated log goes (postgres: a server started for the run)")
    args = parser.parse_args()

    if args.phase == "fast":
        print(json.dumps(run_fast(args.db, args.chunk_size, embeddings=not args.no_embeddings, reranker=args.reranker)))
        return

    report: dict = {"machine": machine()}
    print("machine:", json.dumps(report["machine"]))
    if not args.skip_fast:
        workdir = args.workdir or Path(tempfile.mkdtemp(prefix="advisor-bench-"))
        db = workdir / "bench.duckdb"
        if db.exists():
            db.unlink()
        pg = None
        if args.store == "postgres":
            from deploy.ops.pg_throwaway import PostgresServer

            pg = PostgresServer.start(durable=True)
            db = pg.create_database()
        print(f"generating {args.conversations:,} conversations into {db} ...", flush=True)
        report["log"] = generate(db, args.conversations)
        print("log:", json.dumps(report["log"]), flush=True)
        child = subprocess.run([sys.executable, __file__, "--phase", "fast", "--db", str(db),
                                "--chunk-size", str(args.chunk_size), "--reranker", args.reranker]
                               + (["--no-embeddings"] if args.no_embeddings else []),
                               capture_output=True, text=True)
        if child.returncode != 0:
            print(child.stderr[-3000:], file=sys.stderr)
            raise SystemExit("the fast run failed")
        if pg is not None:
            pg.stop()
        fast = json.loads(child.stdout.strip().splitlines()[-1])
        report["fast"] = fast
        print(f"store {fast['store']}: first read of {fast['messages']:,} messages {fast['first_read_s']} s "
              f"({fast['first_read_rows_per_s']:,} rows/s); operator overview reports at this size: cold "
              f"{fast['reports_cold_s']} s, warm {fast['reports_warm_s']} s")
        rss = fast["rss_after_chunks_mib"]
        print(f"fast extractor, one core: {fast['conversations_per_s']:,.0f} conversations/s wall-clock "
              f"(median per chunk {fast['median_chunk_conversations_per_s']:,.0f}), "
              f"{fast['conversations_per_cpu_s']:,.0f} per CPU-second, over {fast['conversations']:,} "
              f"conversations in {fast['seconds']}s ({fast['cpu_s']} CPU-s); extractor {fast['extract_s']}s "
              f"(embedding model {fast['embed_s']}s), store {fast['store_s']}s; "
              f"{fast['embedded_pairs']:,} of {fast['windows']:,} windows embedded "
              f"({fast['doubtful_pairs']:,} doubtful, {fast['over_embedding_budget']:,} over the budget)")
        db_mem = fast["duckdb_after_chunks_mib"]
        print(f"memory: {fast['rss_before_mib']} MiB before; after chunk 1, middle, last: {rss[0]}, {rss[len(rss) // 2]}, "
              f"{rss[-1]} MiB resident (of which DuckDB buffers {db_mem[0]}, {db_mem[len(db_mem) // 2]}, {db_mem[-1]}); "
              f"peak {fast['peak_rss_mib']} MiB")
        print("fast:", json.dumps(fast))
    if not args.skip_llm:
        llm = run_llm(args.llm_sample, args.model_data_dir, model_dir=args.model_dir)
        report["llm"] = llm
        print(f"LLM extractor on the built-in model ({llm['windows']} windows, {llm['conversations']} conversations): "
              f"one at a time {llm['one_at_a_time']['windows_per_s']} windows/s, batched "
              f"{llm['batched']['windows_per_s']} windows/s, speedup x{llm['batched_speedup']}")
        print("llm:", json.dumps(llm))
    report["load_average_after"] = [round(x, 2) for x in os.getloadavg()]
    print("load average after:", report["load_average_after"])
    if args.out:
        args.out.write_text(json.dumps(report, indent=1) + "\n")


if __name__ == "__main__":
    main()
