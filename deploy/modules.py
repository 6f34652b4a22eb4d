"""The registry lists (`COMMAND_MODULES`, `JOB_MODULES`, `PANEL_MODULES`) import their modules here.

A module named in a list but absent is skipped, so a list can name an area before its module
lands; an import error *inside* a module that exists is raised, never hidden.
"""

from __future__ import annotations

import importlib
from collections.abc import Iterable, Iterator
from types import ModuleType


def listed_modules(names: Iterable[str]) -> Iterator[ModuleType]:
    for name in names:
        try:
            yield importlib.import_module(name)
        except ModuleNotFoundError as exc:
            if exc.name != name:
                raise
