"""Batches run side by side: `in_streams(fn, items, n)` maps `fn` over `items` in `n` Python threads
that share the process's torch threads (one each on a 2-core box).

On a small CPU, torch's intra-op threads fork and join at every operation, which is cheap for big
matrices and costly for the small ones of decoding one token of a 135M model. N threads each
running whole batches (torch releases the GIL inside its operations) keep N cores busy without
that. Measured on the 2-core box, two streams of one thread against one stream of two
(`bench/gate_streams.py`): greedy answers 0.92x the time, sampled 0.86x, the judges' reads 0.90x,
HH log-likelihoods 0.87x over the gate's 400 pairs (1.09x over 64: too few batches to share).

Design choices:
- With several streams every batch runs on `torch.get_num_threads() // n` threads (at least one),
  even a lone batch: one thread rounds bfloat16 otherwise than two, and a batch must not change
  its answer with the number of batches beside it. One stream runs in the caller's thread as is.
- Torch keeps a thread count per thread, taken from a process-wide default at the thread's first
  parallel operation; `set_num_threads` sets both. Each stream starts torch and then sets its own
  count; after the map the default is set back to the caller's count. A thread whose first torch
  operation falls inside a map (the CPU chat starts one per answer) takes the reduced count: a
  chat answered during a gate runs on one thread of two while the gate's streams hold both cores.
- Results come back in the order of `items`, whatever order batches finish in; `fn` must not share
  mutable state across calls (a random generator per batch, not torch's global one).
- `side_by_side(n)` sets, for the calling thread only, the streams that code without its own
  argument reads (`current()`): the gate's judges read their batches side by side while the
  serving guard, on other threads, judges one answer at a time on every thread.
- `side_by_side(n, niceness=k)` also runs every map inside the block in worker threads at
  niceness +k (Linux sets it per thread, and threads start at their creator's: OpenMP's pool,
  which libgomp keeps per calling thread, is lowered with its worker; pools kept once per process
  are not), one stream included, so that a chat answered in the same process goes first on a
  busy CPU. Only workers are lowered: they end with the map, and a thread cannot raise its
  priority back unprivileged. Where the OS refuses, the map runs as it would have, with a warning.
  What it changes is who waits, not what is computed: the same threads per batch.
"""

from __future__ import annotations

import contextlib
import logging
import os
import sys
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

log = logging.getLogger(__name__)
_local = threading.local()


def in_streams(fn: Callable[[T], R], items: Iterable[T], streams: int) -> list[R]:
    """`[fn(item) for item in items]`, run in `streams` threads sharing torch's threads when there are several."""
    items, niceness = list(items), getattr(_local, "niceness", 0)
    if (streams <= 1 and not niceness) or not items:
        return [fn(item) for item in items]
    import torch  # here: callers that never run two streams need not load it

    threads = torch.get_num_threads()
    try:
        with ThreadPoolExecutor(min(streams, len(items)), initializer=_pinned,
                                initargs=(threads_per_batch(streams), niceness)) as pool:
            return list(pool.map(fn, items))
    finally:
        torch.set_num_threads(threads)


def _pinned(threads: int, niceness: int = 0) -> None:
    """A stream's start: its niceness, torch's per-thread set-up (it would read the process default
    at the first parallel operation and overwrite a count set before), then this stream's count."""
    import torch

    if niceness:
        lower_this_thread(niceness)
    torch.get_num_threads()
    torch.set_num_threads(threads)


def lower_this_thread(niceness: int) -> bool:
    """Adds `niceness` to the calling thread's nice value where the OS sets it per thread (Linux);
    False, changing nothing, elsewhere or where the OS refuses (a sandbox's filter)."""
    if not sys.platform.startswith("linux"):
        return False
    tid = threading.get_native_id()
    try:
        os.setpriority(os.PRIO_PROCESS, tid, min(19, os.getpriority(os.PRIO_PROCESS, tid) + niceness))
    except OSError as exc:
        log.warning("could not lower a batch thread's priority (it runs at the caller's): %s", exc)
        return False
    return True


def threads_per_batch(streams: int) -> int:
    """The torch threads each batch runs on under `in_streams(..., streams)` from this thread."""
    import torch

    threads = torch.get_num_threads()
    return threads if streams <= 1 else max(1, threads // streams)


def current() -> int:
    """The streams `side_by_side` set for this thread (1 when none)."""
    return getattr(_local, "streams", 1)


@contextlib.contextmanager
def side_by_side(streams: int, niceness: int = 0) -> Iterator[None]:
    """Within the block, code in this thread that reads `current()` runs `streams` batches at once,
    and every map runs in worker threads `niceness` lower in priority (0: as the caller)."""
    before = current(), getattr(_local, "niceness", 0)
    _local.streams, _local.niceness = streams, niceness
    try:
        yield
    finally:
        _local.streams, _local.niceness = before
