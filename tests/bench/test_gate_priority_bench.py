"""bench/gate_priority.py's load and order: the gate's answering runs in the background, in workers
at the arm's niceness, chunk after chunk until the block ends; its pace counts only chunks that ran
wholly inside the chat's window; a load that fails says so; the loaded arms come in ABBA order."""

from __future__ import annotations

import os
import sys
import threading

import pytest
from bench_helpers import load_bench


def caller_nice() -> int:
    return os.getpriority(os.PRIO_PROCESS, threading.get_native_id())


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="a nice value per thread is Linux's")
@pytest.mark.skipif(sys.platform.startswith("linux") and caller_nice() > 16, reason="no room to lower by 3")
def test_the_load_answers_in_lowered_workers_until_stopped():
    from evaluator.streams import in_streams

    bench = load_bench("gate_priority")
    seen: set[int] = set()

    def answer(prompts: list[str]) -> list[str]:  # the gate's answer function maps its batches in streams
        def one(batch: list[str]) -> list[str]:
            seen.add(os.getpriority(os.PRIO_PROCESS, threading.get_native_id()))
            threading.Event().wait(0.01)
            return [p.upper() for p in batch]

        return [a for out in in_streams(one, [prompts[:2], prompts[2:]], 2) for a in out]

    with bench.GateLoad(answer, ["a", "b", "c"], batch=2, streams=2, niceness=3, head_start=0.05) as load:
        while len(load.chunks) < 1:
            threading.Event().wait(0.01)
        start = load.chunks[0][1]
        while len(load.chunks) < 4:
            threading.Event().wait(0.01)
        end = load.chunks[-1][1]
    assert seen == {caller_nice() + 3}
    assert all(n == 4 for *_, n in load.chunks)  # whole chunks of batch × streams
    inside = [c for c in load.chunks if c[0] >= start and c[1] <= end]
    assert load.pace(start, end) == round(4 * len(inside) / sum(b - a for a, b, _ in inside), 3)
    assert load.pace(end, end) is None and not load.thread.is_alive()


def test_a_load_that_fails_fails_its_arm():
    bench = load_bench("gate_priority")

    def broken(prompts: list[str]) -> list[str]:
        raise ValueError("no model")

    with pytest.raises(RuntimeError, match="measured an idle chat") as info:
        with bench.GateLoad(broken, ["a"], batch=1, streams=1, niceness=1, head_start=0.05):
            pass
    assert isinstance(info.value.__cause__, ValueError)


def test_the_loaded_arms_alternate_abba():
    assert load_bench("gate_priority").arm_order(3, 10) == [0, 10, 10, 0, 0, 10]
