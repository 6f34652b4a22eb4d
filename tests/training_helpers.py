"""Training data for tests: synthetic rows in the trainer's formats, a run directory holding
them (`make_run_dir`), a store with rated answers to build sets from (`rated_answers`), and
`wait_until` for what a run reports later. Shared by the trainer's tests and the deploy tests
that train (jobs, the cycle, the gate, vLLM adapters)."""

from __future__ import annotations

import time

from feedback.datasets import write_rows
from store import GenerationMeta
from store.attributes import Attributes

ATTRS = Attributes(verbosity=1).steerlm()
QUESTIONS = ["How do I sleep better?", "How can I save money?", "How do I talk to my boss?", "How do I focus?"]
SHORT = ["Keep a fixed bedtime.", "Write down what you spend.", "Ask for a short meeting.", "Turn off alerts."]
LONG = [s + " Also think about the wider context of your habits over the coming weeks." for s in SHORT]


def _msg(role, content, attributes=None):
    return {"role": role, "content": content, "attributes": attributes}


def synthetic_rows(method: str, n: int) -> list[dict]:
    rows = []
    for i in range(n):
        k = i % 4
        base = {"prompt": [_msg("user", QUESTIONS[k])], "chat_template_kwargs": {"attributes": ATTRS},
                "conversation_id": f"c{i}", "source": "synthetic", "categories": []}
        if method == "dpo":
            rows.append(base | {"chosen": [_msg("assistant", SHORT[k], ATTRS)],
                                "rejected": [_msg("assistant", LONG[k], ATTRS)]})
        else:
            desirable = method == "sft" or (i // 4) % 2 == 0
            rows.append(base | {"completion": [_msg("assistant", SHORT[k] if desirable else LONG[k], ATTRS)],
                                "label": desirable, "message_id": f"m{i}"})
    return rows


def make_run_dir(path, method, n=16, n_eval=0):
    path.mkdir(parents=True)
    rows = synthetic_rows(method, n + n_eval)
    write_rows(rows[:n], method, path / "train.parquet")
    write_rows(rows[n:], method, path / "eval.parquet")
    return path


def wait_until(predicate, timeout=240, what="condition", every=0.3):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError(f"timed out waiting for {what}")


def rated_answers(store, n=8):
    """`n` conversations of alice's, each a question and an answer she rated: the short answers
    up, the long ones down."""
    for i in range(n):
        conv = store.conversations.create("alice")
        q = store.conversations.add_message(conv.id, "user", QUESTIONS[i % 4])
        good = i % 2 == 0
        a = store.conversations.add_message(conv.id, "assistant", SHORT[i % 4] if good else LONG[i % 4], parent_id=q.id,
                                            generation=GenerationMeta(backend="test", model="tiny", attributes=Attributes()))
        store.conversations.rate(a.id, "alice", 1 if good else -1)
