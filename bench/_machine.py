"""What every benchmark prints first: the CPU it ran on (figures mean little without it)."""

from __future__ import annotations

import platform
from pathlib import Path


def cpu_model(default: str = "") -> str:
    """The CPU's model name from /proc/cpuinfo, else the platform's word for it."""
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return default or platform.processor() or platform.machine() or "unknown CPU"
