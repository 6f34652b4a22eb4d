"""A script of bench/ loaded as a module, so that tests can check its pure parts.

bench/ is not a package: its scripts import each other by bare name (`from _machine import …`),
so the folder goes on sys.path, and each script is loaded under its own module name.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

BENCH = Path(__file__).resolve().parents[1] / "bench"


def load_bench(name: str) -> ModuleType:
    """bench/<name>.py, freshly executed."""
    if str(BENCH) not in sys.path:
        sys.path.insert(0, str(BENCH))
    spec = importlib.util.spec_from_file_location(f"bench_{name}", BENCH / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module
