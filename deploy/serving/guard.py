"""The safety judge behind the serving guard, and the guard made from `Settings` (`chat.guard`).

The guard's judge is the harmlessness judge `judges.kind` names (`deploy.release.judges`): the
gate, the guard and `advisor eval judges` all read it from there. By default that is the validated
one (heads on the served base model's features, trained on HH-RLHF harmless pairs and the labelled
safety set; its precision and recall in docs/judges.md), whose request and answer thresholds were
chosen on the safety set's training part and ship with its weights; `guard.request_threshold` and
`guard.answer_threshold` override them.

Design choices:
- The judge loads on first use, once, under a lock; the service warms it in a background thread at
  start (`warm_up`) so the first chat turn does not wait for it (the trained judge loads the
  135M-parameter base model in a few seconds).
- A judge that cannot load (no base model on this machine) fails the turn with its message rather
  than letting an unchecked answer through (`chat.guard`).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from typing import Any

from chat.guard import Guard, SafetyJudge
from deploy.release.judges import guard_over, load_judges
from deploy.settings import Settings


class LazyJudge:
    """The settings' harmlessness judge, loaded on first use."""

    def __init__(self, settings: Settings, judge: Any = None) -> None:
        self.settings = settings
        self._judge = judge
        self._lock = threading.Lock()

    def load(self) -> Any:
        with self._lock:
            if self._judge is None:
                self._judge = load_judges(self.settings)[1]
            return self._judge

    @property
    def version(self) -> str:
        return str(getattr(self.load(), "version", type(self.load()).__name__))

    def request_risk(self, requests: Sequence[str]) -> list[float]:
        return list(self.load().request_risk(list(requests)))

    def answer_risk(self, requests: Sequence[str], answers: Sequence[str]) -> list[float]:
        return list(self.load().answer_risk(list(requests), list(answers)))


def make_judge(settings: Settings) -> SafetyJudge:
    """The judge every surface's guard uses."""
    return LazyJudge(settings)


def make_guard(settings: Settings, judge: SafetyJudge | None = None) -> Guard | None:
    """The guard `guard.*` describes (None when switched off), over `judge` or `make_judge`'s
    (`deploy.release.judges.guard_over`: the gate measures the served system with the same one)."""
    return guard_over(settings, judge or make_judge(settings))


def warm_up(guard: Guard | None) -> None:
    """Load the judge now (for a judge that loads on first use), so no turn waits for it."""
    load = getattr(guard.judge, "load", None) if guard is not None else None
    if load is not None:
        load()
