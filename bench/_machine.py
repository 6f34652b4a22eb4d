"""What every benchmark prints first: the CPU it ran on (figures mean little without it)."""

from __future__ import annotations

import json
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


def emit(report: dict, out: Path | None) -> None:
    """Print the report as JSON, and write it to `out` too when given (bench/results/...)."""
    text = json.dumps(report, indent=1)
    print(text)
    if out:
        Path(out).write_text(text + "\n")
