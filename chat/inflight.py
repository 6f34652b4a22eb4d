"""Answers being generated, and the hooks the composition root plugs into finished turns.

Design choices:
- `InFlight` knows every answer being generated, keyed by who may stop it (a UI session, an API
  request), so the stop button, a dropped client and a shutting-down service can cancel the
  right ones; cancelled answers are stored as interrupted by the turn itself.
- `ChatHooks` lets `deploy` count turns, ratings and errors (Prometheus) without `chat` knowing
  about metrics.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class ServiceClosing(RuntimeError):
    """The service is shutting down and takes no new answers."""


# --------------------------------------------------------------------------- in-flight turns


class InFlight:
    """Every answer being generated, so it can be stopped by its owner or at shutdown."""

    def __init__(self) -> None:
        self._lock = threading.Condition()
        self._items: dict[int, tuple[str | None, Any]] = {}
        self._closing = False

    def __len__(self) -> int:
        with self._lock:
            return len(self._items)

    @property
    def closing(self) -> bool:
        return self._closing

    def add(self, turn: Any, key: str | None = None) -> None:
        """Register `turn` (anything with `cancel()`); refused once the service is closing."""
        with self._lock:
            if self._closing:
                raise ServiceClosing("The service is restarting; send your message again in a moment.")
            self._items[id(turn)] = (key, turn)

    def remove(self, turn: Any) -> None:
        with self._lock:
            self._items.pop(id(turn), None)
            self._lock.notify_all()

    def cancel(self, key: str) -> int:
        """Cancel the turns registered under `key` or under `key:…` (a user's UI sessions)."""
        with self._lock:
            turns = [t for k, t in self._items.values() if k is not None and (k == key or k.startswith(key + ":"))]
        for t in turns:
            t.cancel()
        return len(turns)

    def close(self) -> None:
        """Refuse new turns from now on (shutdown)."""
        with self._lock:
            self._closing = True

    def cancel_all(self) -> int:
        with self._lock:
            turns = [t for _, t in self._items.values()]
        for t in turns:
            t.cancel()
        return len(turns)

    def wait_idle(self, timeout: float) -> bool:
        """Wait until nothing is in flight; False if time ran out."""
        with self._lock:
            return self._lock.wait_for(lambda: not self._items, timeout=timeout)


# --------------------------------------------------------------------------- hooks


def _noop(*args: Any, **kwargs: Any) -> None:
    return None


@dataclass
class ChatHooks:
    """Callbacks the composition root plugs in (metrics); `chat` does not know Prometheus."""

    on_turn: Callable[[str, Any], None] = _noop  # (source, finished Turn)
    on_rating: Callable[[int], None] = _noop  # (value)
    on_error: Callable[[str], None] = _noop  # (kind: invalid_input | not_found | backend | internal)
    extra: dict[str, Any] = field(default_factory=dict)
