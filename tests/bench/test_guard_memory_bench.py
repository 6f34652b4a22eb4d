"""bench/guard_memory.py's memory reading: glibc's heap counts move with what is allocated and
freed, so a rise in bytes in use means something kept and a rise in free bytes means holes."""

from __future__ import annotations

import ctypes

import pytest
from bench_helpers import load_bench

pytestmark = pytest.mark.skipif(not hasattr(ctypes.CDLL(None), "mallinfo2"), reason="mallinfo2 is glibc's (2.33 on)")


def test_heap_in_use_rises_while_a_block_is_held_and_falls_when_it_is_freed():
    memory = load_bench("guard_memory").memory
    before = memory()
    held = [bytearray(1024) for _ in range(32 * 1024)]  # 32 MiB in blocks malloc serves from its heap
    during = memory()
    del held
    after = memory()
    assert before["rss_mib"] > 0
    assert during["heap_in_use_mib"] >= before["heap_in_use_mib"] + 30
    assert after["heap_in_use_mib"] <= during["heap_in_use_mib"] - 30
