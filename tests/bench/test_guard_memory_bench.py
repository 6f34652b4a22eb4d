"""bench/guard_memory.py's memory reading: glibc's heap counts move with what is allocated and
freed, so a rise in bytes in use means something kept and a rise in free bytes means holes."""

from __future__ import annotations

import platform

import pytest
from bench_helpers import load_bench

pytestmark = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="mallinfo2 is glibc's")


def test_heap_in_use_rises_while_a_block_is_held_and_falls_when_it_is_freed():
    memory = load_bench("guard_memory").memory
    before = memory()
    held = [bytearray(1024) for _ in range(16 * 1024)]  # 16 MiB in small blocks, from the heap itself
    during = memory()
    del held
    after = memory()
    assert before["rss_mib"] > 0
    assert during["heap_in_use_mib"] >= before["heap_in_use_mib"] + 15
    assert after["heap_in_use_mib"] <= during["heap_in_use_mib"] - 15
