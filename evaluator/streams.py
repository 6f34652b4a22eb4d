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
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

T = TypeVar("T")
R = TypeVar("R")

_local = threading.local()


def in_streams(fn: Callable[[T], R], items: Iterable[T], streams: int) -> list[R]:
    """`[fn(item) for item in items]`, run in `streams` threads sharing torch's threads when there are several."""
    items = list(items)
    if streams <= 1 or not items:
        return [fn(item) for item in items]
    import torch  # here: callers that never run two streams need not load it

    threads = torch.get_num_threads()
    try:
        with ThreadPoolExecutor(min(streams, len(items)), initializer=_pinned, initargs=(threads_per_batch(streams),)) \
                as pool:
            return list(pool.map(fn, items))
    finally:
        torch.set_num_threads(threads)


def _pinned(threads: int) -> None:
    """A stream's start: torch's per-thread set-up first (it would read the process default at the
    first parallel operation and overwrite a count set before), then this stream's count."""
    import torch

    torch.get_num_threads()
    torch.set_num_threads(threads)


def threads_per_batch(streams: int) -> int:
    """The torch threads each batch runs on under `in_streams(..., streams)` from this thread."""
    import torch

    threads = torch.get_num_threads()
    return threads if streams <= 1 else max(1, threads // streams)


def current() -> int:
    """The streams `side_by_side` set for this thread (1 when none)."""
    return getattr(_local, "streams", 1)


@contextlib.contextmanager
def side_by_side(streams: int) -> Iterator[None]:
    """Within the block, code in this thread that reads `current()` runs `streams` batches at once."""
    before = current()
    _local.streams = streams
    try:
        yield
    finally:
        _local.streams = before
