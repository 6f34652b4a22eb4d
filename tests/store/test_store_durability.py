"""Durability of logged turns, on both backends: SIGKILL mid-stream loses nothing acknowledged; a
held DuckDB file gives a clear error naming the holder; many threads on one Store lose nothing.

A "turn" here is what `chat.turns` writes for one exchange: a conversation and its question in
one transaction, then the answer with its generation metadata in another.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

from store_peek import peek

from store import GenerationMeta, Store
from store.attributes import Attributes
from store.migrations import LATEST_VERSION

REPO = Path(__file__).resolve().parents[2]
ROOM = Path(__file__).resolve().parent  # this file and, above it, the helpers it imports

META = GenerationMeta(backend="builtin", model="builtin-test", attributes=Attributes(verbosity=3), steering="steerlm",
                      temperature=0.7, top_p=0.95, max_new_tokens=200, seed=1, latency_ms=812.5, first_token_ms=40.1,
                      prompt_tokens=31, completion_tokens=120, finish_reason="stop")


def log_turn(store: Store, user_id: str, i: int, conversation_id: str | None = None,
             parent_id: str | None = None) -> tuple[str, str, str]:
    """Log one exchange as `chat.turns` does: the question (with its new conversation, if any)
    in one transaction, the answer with its metadata in another. Returns the three ids."""
    with store.transaction():
        if conversation_id is None:
            conversation_id = store.conversations.create(user_id, source="cli").id
        question = store.conversations.add_message(conversation_id, "user", f"question {i} from {user_id}", parent_id=parent_id)
    answer = store.conversations.add_message(conversation_id, "assistant", f"answer {i} " + "advice " * 40,
                                             parent_id=question.id, generation=META)
    return conversation_id, question.id, answer.id


WRITER = textwrap.dedent("""
    import sys
    sys.path[:0] = {paths!r}
    from store import Store
    from test_store_durability import log_turn
    store = Store({db!r})
    i = 0
    while True:
        ids = log_turn(store, "writer", i)
        print(*ids, flush=True)  # acknowledged: the write returned
        i += 1
""")


def kill_writer_mid_stream(db: Path, after: int) -> list[list[str]]:
    proc = subprocess.Popen([sys.executable, "-c", WRITER.format(paths=[str(ROOM), str(ROOM.parent)], db=str(db))],
                            cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    acked = []
    try:
        while len(acked) < after:
            line = proc.stdout.readline()
            assert line, f"writer died: {proc.stderr.read()}"
            acked.append(line.split())
        os.kill(proc.pid, signal.SIGKILL)  # it is writing the next turn right now
        proc.wait(timeout=30)
        acked += [line.split() for line in proc.stdout.read().splitlines() if line.strip()]
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        proc.stdout.close()
        proc.stderr.close()
    assert proc.returncode == -signal.SIGKILL
    return acked


def test_sigkill_mid_stream_loses_no_acknowledged_turn(store_target):
    db = store_target
    acked: list[list[str]] = []
    for cycle in range(3):  # kill, reopen, write again: the WAL is replayed every time
        acked += kill_writer_mid_stream(db, after=25)
        with Store(db) as store:
            assert store.schema_version() == LATEST_VERSION
            versions = [v for (v,) in peek(store, "SELECT version FROM schema_version ORDER BY version")]
            assert versions == list(range(1, LATEST_VERSION + 1))
            for conv_id, question_id, answer_id in acked:
                question = store.conversations.get_message(question_id, user_id="writer")
                answer = store.conversations.get_message(answer_id, user_id="writer")
                assert question.conversation_id == answer.conversation_id == conv_id
                assert answer.parent_id == question_id and answer.generation == META
            # Each transaction is all or nothing: no answer without its metadata, no conversation
            # without its question.
            assert peek(store,
                "SELECT count(*) FROM messages m LEFT JOIN generations g ON g.message_id = m.id "
                "WHERE m.role = 'assistant' AND g.message_id IS NULL")[0][0] == 0
            assert peek(store,
                "SELECT count(*) FROM conversations c WHERE NOT EXISTS "
                "(SELECT 1 FROM messages m WHERE m.conversation_id = c.id AND m.role = 'user')")[0][0] == 0
            log_turn(store, "after-crash", cycle)  # and the file still takes writes
    assert len(acked) >= 75


def test_a_second_process_gets_a_clear_error_naming_the_holder(tmp_path):
    db = tmp_path / "advisor.duckdb"
    probe = textwrap.dedent(f"""
        from store import Store, StoreLocked
        try:
            Store({str(db)!r})
        except StoreLocked as exc:
            print(exc)
            raise SystemExit(3)
    """)
    with Store(db):
        result = subprocess.run([sys.executable, "-c", probe], cwd=REPO, capture_output=True, text=True, timeout=60)
    assert result.returncode == 3, result.stderr
    assert f"in use by PID {os.getpid()}" in result.stdout
    assert "DuckDB lets only one process open it" in result.stdout
    assert "stop that process" in result.stdout  # and what to do about it
    # Released: the other process can open it now.
    assert subprocess.run([sys.executable, "-c", probe], cwd=REPO, timeout=60).returncode == 0


def test_eight_threads_times_200_turns_none_lost(store_target):
    threads, per_thread = 8, 200
    written: dict[int, list[tuple[str, str, str]]] = {}
    errors: list[BaseException] = []
    with Store(store_target) as store:
        def work(t: int) -> None:
            try:  # one long conversation per thread, as a busy user would have
                conv, parent, turns = None, None, []
                for i in range(per_thread):
                    conv, _, parent = log_turn(store, f"user{t}", i, conv, parent)
                    turns.append((conv, _, parent))
                written[t] = turns
            except BaseException as exc:  # surfaced below: a thread's exception is otherwise lost
                errors.append(exc)

        pool = [threading.Thread(target=work, args=(t,)) for t in range(threads)]
        for th in pool:
            th.start()
        for th in pool:
            th.join()
        assert not errors, errors
        rows = store.stats()["rows"]
        assert rows["conversations"] == threads
        assert rows["messages"] == 2 * threads * per_thread
        assert rows["generations"] == threads * per_thread
        for t, turns in written.items():
            answers = {a for (a,) in peek(store,
                "SELECT m.id FROM messages m JOIN conversations c ON c.id = m.conversation_id "
                "WHERE c.user_id = ? AND m.role = 'assistant'", [f"user{t}"])}
            assert answers == {a for _, _, a in turns}
            assert len(store.conversations.thread(turns[0][0])) == 2 * per_thread  # one unbroken chain
        assert peek(store, "SELECT count(DISTINCT seq) FROM messages")[0][0] == 2 * threads * per_thread
