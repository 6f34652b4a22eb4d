"""The safety judge behind the serving guard, and the guard made from `Settings` (`chat.guard`).

`make_judge` is the one place that says which judge the service, the API and `advisor ask` use;
swapping in another `chat.guard.SafetyJudge` is a change here and nowhere else.

Design choices:
- Today's judge is `ModeratorJudge`, an adapter over the offline harmlessness moderator
  (`evaluator.moderation`, the classifier the gate and the training-set filter use, cached under
  `<data_dir>/models/moderator`): request risk = its unsafe probability of the request, answer
  risk = that of the answer. It was trained on advice tips, not requests, so as a request judge it
  is rough (see `GuardSettings.request_threshold`); a judge trained for both is to replace it.
- The moderator loads on first use, once, under a lock; the service warms it in a background
  thread at start (`warm_up`) so the first chat turn does not wait for it (a few seconds; on a
  fresh data directory the first training takes about half a minute).
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from chat.guard import Guard, SafetyJudge
from deploy.release.scorers import load_moderator, moderator_dir
from deploy.settings import Settings


class ModeratorJudge:
    """`SafetyJudge` over the embedding moderator: both risks are its P(unsafe) of the one text."""

    version = "moderator-v1"

    def __init__(self, cache_dir: str | Path, moderator: Any = None) -> None:
        self.cache_dir = Path(cache_dir)
        self._moderator = moderator
        self._lock = threading.Lock()

    def load(self) -> Any:
        with self._lock:
            if self._moderator is None:
                self._moderator = load_moderator(self.cache_dir)
            return self._moderator

    def request_risk(self, requests: Sequence[str]) -> list[float]:
        return self.load().score(list(requests))

    def answer_risk(self, requests: Sequence[str], answers: Sequence[str]) -> list[float]:
        return self.load().score(list(answers))


def make_judge(settings: Settings) -> SafetyJudge:
    """The judge every surface's guard uses."""
    return ModeratorJudge(moderator_dir(settings.data_path))


def make_guard(settings: Settings, judge: SafetyJudge | None = None) -> Guard | None:
    """The guard `guard.*` describes (None when switched off), over `judge` or `make_judge`'s."""
    g = settings.guard
    if not g.enabled:
        return None
    return Guard(judge or make_judge(settings), request_threshold=g.request_threshold,
                 answer_threshold=g.answer_threshold, refusal=g.refusal.strip())


def warm_up(guard: Guard | None) -> None:
    """Load the judge now (for a judge that loads on first use), so no turn waits for it."""
    load = getattr(guard.judge, "load", None) if guard is not None else None
    if load is not None:
        load()
