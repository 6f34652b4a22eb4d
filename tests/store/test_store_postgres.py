"""What only the PostgreSQL backend has to get right, on a real server: commit order under
concurrent writers (the extraction watermark), migrations by replicas starting together, a v1
database upgraded, job claims, the leader lock, release notifications, the analytics mirror."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
import time
from pathlib import Path

from store_peek import peek

from feedback.extract import FastConfig, FastExtractor, run_extraction
from store import GenerationMeta, Store
from store.attributes import Attributes
from store.migrations import LATEST_VERSION

REPO = Path(__file__).resolve().parents[2]
ANSWER = "Keep a consistent schedule and build a wind-down routine without screens."


def _raw(url: str):
    import psycopg

    return psycopg.connect(url, autocommit=True)


def test_extraction_never_skips_a_message_committed_late(pg_url):
    """A message that took its seq before others but commits after them is still extracted: the
    bound waits for it instead of moving past it (a plain max(seq) would have)."""
    with Store(pg_url, settle_timeout_s=0.3) as store:
        conv = store.conversations.create("u1")
        q = store.conversations.add_message(conv.id, "user", "How do I sleep better?")
        a = store.conversations.add_message(conv.id, "assistant", ANSWER, parent_id=q.id)
        assert store.conversations.last_message_seq() == a.seq  # settled, nothing running
        late = _raw(pg_url)
        late.execute("BEGIN")
        late_seq = late.execute(
            "INSERT INTO messages (id, conversation_id, parent_id, role, content) "
            "VALUES ('late', %s, %s, 'user', 'Thanks, that''s really helpful!') RETURNING seq",
            [conv.id, a.id]).fetchone()[0]
        other = store.conversations.create("u2")
        q2 = store.conversations.add_message(other.id, "user", "How do I stop procrastinating?")
        a2 = store.conversations.add_message(other.id, "assistant", "Try the Pomodoro technique.", parent_id=q2.id)
        f2 = store.conversations.add_message(other.id, "user", "That's not what I asked.", parent_id=a2.id)
        with _raw(pg_url) as con:  # what a plain max(seq) would take as the bound
            assert con.execute("SELECT max(seq) FROM messages").fetchone()[0] == f2.seq > late_seq
        assert store.conversations.last_message_seq() == a.seq < late_seq  # held back by the open transaction
        assert peek(store, "SELECT max(seq) FROM messages") == [(a.seq,)]  # and so is the mirror

        extractor = FastExtractor(FastConfig.tuned(), use_embeddings=False)
        first = run_extraction(store, extractor, lock=threading.Lock())
        assert first.status == "succeeded" and first.watermark_to < late_seq and first.new_events == 0

        late.execute("COMMIT")
        late.close()
        second = run_extraction(store, extractor, lock=threading.Lock())
        assert second.watermark_to == f2.seq
        found = {m for (m,) in peek(store, "SELECT message_id FROM feedback_events")}
        assert found == {"late", f2.id}  # the late message was not skipped


def test_replicas_starting_together_migrate_once(pg_url):
    code = f"from store import Store\nwith Store({pg_url!r}) as s: print(s.schema_version())"
    procs = [subprocess.Popen([sys.executable, "-c", code], cwd=REPO, stdout=subprocess.PIPE, text=True)
             for _ in range(3)]
    outs = [p.communicate(timeout=120)[0].strip() for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0] and outs == [str(LATEST_VERSION)] * 3
    with Store(pg_url) as store:
        assert peek(store, "SELECT version FROM schema_version ORDER BY version") == [
            (v,) for v in range(1, LATEST_VERSION + 1)]


def test_a_v1_database_upgrades_keeping_its_generation_metadata(pg_url):
    from store import sql_postgres

    with _raw(pg_url) as con:
        con.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, description VARCHAR, "
                    "applied_at TIMESTAMPTZ DEFAULT now())")
        con.execute(sql_postgres.V1)
        con.execute("INSERT INTO schema_version (version, description) VALUES (1, 'initial schema')")
        con.execute("INSERT INTO conversations (id, user_id, title) VALUES ('c1', 'alice', 'Q')")
        con.execute("INSERT INTO messages (id, conversation_id, parent_id, role, content) VALUES "
                    "('q1', 'c1', NULL, 'user', 'Q'), ('a1', 'c1', 'q1', 'assistant', 'A')")
        con.execute("INSERT INTO generations (message_id, conversation_id, release_id, backend, model, adapter, "
                    "steering, helpfulness, correctness, coherence, complexity, verbosity, temperature, top_p, "
                    "max_new_tokens, seed, latency_ms, first_token_ms, prompt_tokens, completion_tokens, "
                    "finish_reason, error) VALUES ('a1', 'c1', 'r1', 'builtin', 'm', NULL, 'steerlm', 4, 3, 2, 1, "
                    "0, 0.5, 0.9, 64, 7, 120.5, 10.25, 30, 47, 'length', NULL)")
    with Store(pg_url) as s:
        assert s.schema_version() == LATEST_VERSION
        g = s.conversations.get_message("a1").generation
        assert g == GenerationMeta(backend="builtin", model="m", steering="steerlm", release_id="r1",
                                   attributes=Attributes(helpfulness=4, correctness=3, coherence=2, complexity=1,
                                                         verbosity=0),
                                   temperature=0.5, top_p=0.9, max_new_tokens=64, seed=7, latency_ms=120.5,
                                   first_token_ms=10.25, prompt_tokens=30, completion_tokens=47,
                                   finish_reason="length")
        with _raw(pg_url) as con:  # the PostgreSQL view itself, typed by jsonb operators
            row = con.execute("SELECT release_id, verbosity, pg_typeof(verbosity)::text, latency_ms "
                              "FROM generations").fetchall()
        assert row == [("r1", 0, "smallint", 120.5)]


def test_a_queued_job_is_claimed_exactly_once(pg_url):
    with Store(pg_url) as a, Store(pg_url) as b:
        jobs = [a.jobs.create("extract", trigger="manual", status="queued") for _ in range(10)]
        wins: list[tuple[str, str]] = []
        lock = threading.Lock()

        def claim(store: Store, who: str) -> None:
            for job in jobs:
                got = store.jobs.claim(job.id)
                if got is not None:
                    with lock:
                        wins.append((got.id, who))

        threads = [threading.Thread(target=claim, args=(s, f"{n}{i}")) for n, s in (("a", a), ("b", b))
                   for i in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sorted(j for j, _ in wins) == sorted(j.id for j in jobs)  # each once, none lost
        assert all(a.jobs.get(j.id).status == "running" for j in jobs) and a.jobs.queued() == []


HOLDER = textwrap.dedent("""
    import time
    from store import Store
    store = Store({url!r})
    lead = store.jobs.leadership("scheduler")
    print("leader" if lead.acquire() else "follower", flush=True)
    time.sleep(600)
""")


def test_the_lead_passes_on_within_seconds_when_the_leader_is_killed(pg_url):
    with Store(pg_url) as store:
        proc = subprocess.Popen([sys.executable, "-c", HOLDER.format(url=pg_url)], cwd=REPO,
                                stdout=subprocess.PIPE, text=True)
        try:
            assert proc.stdout.readline().strip() == "leader"
            lead = store.jobs.leadership("scheduler")
            assert not lead.acquire()
            assert store.jobs.leadership("another purpose").acquire()  # keys are per purpose
            os.kill(proc.pid, signal.SIGKILL)
            proc.wait(30)
            t0 = time.monotonic()
            while not lead.acquire():
                assert time.monotonic() - t0 < 5, "the lock of a killed leader was not freed"
                time.sleep(0.05)
            assert lead.acquire()  # kept while held
            lead.release()
            assert store.jobs.leadership("scheduler").acquire()  # released for the next one
        finally:
            proc.kill()
            proc.wait()
            proc.stdout.close()


def test_a_release_change_is_heard_by_another_store(pg_url):
    with Store(pg_url) as a, Store(pg_url) as b, b.jobs.listener("release") as listener:
        assert listener.wait(0.1) == [("reconnected", "")]  # the first call connects
        release = a.releases.create(base_model="m", adapter_path=None)
        a.releases.set_status(release.id, "live")
        heard = []
        t0 = time.monotonic()
        while not heard and time.monotonic() - t0 < 5:
            heard = listener.wait(1.0)
        assert heard == [("release", release.id)]


def test_the_mirror_follows_deletes_and_updates(pg_url):
    with Store(pg_url) as store:
        conv, q = store.conversations.start("alice", "Q")
        store.conversations.add_message(conv.id, "assistant", "A", parent_id=q.id)
        store.conversations.start("bob", "Q2")
        assert peek(store, "SELECT count(*) FROM messages") == [(3,)]
        job = store.jobs.create("extract")
        assert peek(store, "SELECT status FROM jobs") == [("running",)]
        store.jobs.update(job.id, status="succeeded")
        assert peek(store, "SELECT status FROM jobs") == [("succeeded",)]
        store.privacy.forget_user("alice")
        assert peek(store, "SELECT count(*), min(content) FROM messages") == [(1, "Q2")]
        store.conversations.start("carol", "Q3")
        assert peek(store, "SELECT count(*) FROM messages") == [(2,)]


def test_two_processes_extracting_at_once_never_process_a_chunk_twice(pg_url):
    """Two stores (two replicas' pools), each with its own lock: the watermark's compare-and-set
    lets exactly one of them commit each chunk."""
    with Store(pg_url) as a, Store(pg_url) as b:
        for i in range(60):
            conv, q = a.conversations.start(f"u{i}", "How do I sleep better?")
            ans = a.conversations.add_message(conv.id, "assistant", ANSWER, parent_id=q.id)
            a.conversations.add_message(conv.id, "user", "Thanks, that's really helpful!", parent_id=ans.id)
        results: list = []

        def run(store: Store) -> None:
            extractor = FastExtractor(FastConfig.tuned(), use_embeddings=False)
            results.append(run_extraction(store, extractor, lock=threading.Lock(), chunk_size=10))

        threads = [threading.Thread(target=run, args=(s,)) for s in (a, b)]
        for t in threads:
            t.start()
        for t in threads:
            t.join()
        assert sum(r.messages for r in results) == 120  # every user message read by exactly one chunk
        assert sum(r.new_events for r in results) == 60 == peek(a, "SELECT count(*) FROM feedback_events")[0][0]
        assert all(r.status == "succeeded" or "moved under this run" in r.errors[-1] for r in results)


def test_two_replicas_promoting_at_once_leave_one_live_release(pg_url):
    with Store(pg_url) as a, Store(pg_url) as b:
        base = a.releases.create(base_model="m", adapter_path=None, status="live", release_id="base-m")
        assert b.releases.create(base_model="m", adapter_path=None, status="live", release_id="base-m") == base
        for round_ in range(5):
            ra = a.releases.create(base_model="m", adapter_path="/x")
            rb = b.releases.create(base_model="m", adapter_path="/y")
            threads = [threading.Thread(target=s.releases.set_status, args=(r.id, "live")) for s, r in ((a, ra), (b, rb))]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
            live = [r for r in a.releases.list(limit=100) if r.status == "live"]
            assert len(live) == 1 and live[0].id in (ra.id, rb.id), (round_, live)
