"""The log-in throttle: failed log-ins for a name slow further attempts down, then refuse them for a while.

The rule (settings `server.login_*`), per lower-cased name, counting failures since the name's
last successful log-in:
- slowed: after a failure, the next attempt is refused until `login_delay_s` has passed; each
  further failure within `login_window_minutes` doubles that wait (1, 2, 4, 8 s by default);
- locked: `login_max_failures` failures within `login_window_minutes` refuse every attempt at the
  name, right password or not, for `login_lockout_minutes` after the last of them.
Refused attempts are not checked and not counted, so hammering a locked name does not extend the
lock, and a locked name opens again on time.

Design choices:
- No user enumeration: attempts are kept by the name tried, whether or not a user has it, and the
  answers (wrong password, slowed, locked) read the same for every name. (`Auth.login` also pays
  for a password hash on unknown names so that timing does not tell either.)
- "Slowed" refuses early attempts (429 with Retry-After) instead of sleeping before answering: a
  sleeping handler holds a worker thread, and parallel attempts would starve the pool.
- Parallel attempts at one name are refused while one is being checked (an in-process set), so a
  burst of simultaneous guesses cannot all slip in before the first failure is recorded.
- Attempts are rows (`login_attempts`), so the throttle survives a restart and is shared by
  replicas on one PostgreSQL database. Old rows are pruned at most hourly.
- The trade-off of any per-name lock: someone can lock a name out for the lockout's length by
  failing on purpose. The lock ends by itself; an operator can shorten the settings.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from datetime import datetime, timedelta

from deploy.settings import ServerSettings
from store import Store

PRUNE_EVERY = timedelta(hours=1)


class LoginThrottled(Exception):
    """Refused by the throttle before the password was looked at; retry after `retry_after_s`.
    The message can be shown to the user."""

    def __init__(self, message: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.retry_after_s = retry_after_s


class LoginThrottle:
    """`failure` is the exception a failed check raises (`deploy.service.auth.AuthError`): the
    throttle counts it and lets it through; it never looks at passwords itself."""

    def __init__(self, settings: ServerSettings, store: Store, clock: Callable[[], datetime],
                 failure: type[Exception]) -> None:
        self.settings, self.store, self.clock, self.failure = settings, store, clock, failure
        self._busy: set[str] = set()
        self._lock = threading.Lock()
        self._pruned_at: datetime | None = None

    @contextmanager
    def attempt(self, name: str) -> Iterator[None]:
        """Guard one log-in attempt at `name`: raises `LoginThrottled` when it must wait or is
        locked; otherwise runs the body and records a failure if it raises `self.failure`, a
        success if it returns."""
        key = (name or "").strip().lower()
        with self._lock:
            if key in self._busy:
                raise LoginThrottled("Another sign-in with this name is being checked; try again in a moment.", 1)
            self._refuse_if_throttled(key, self.clock())
            self._busy.add(key)
        try:
            yield
        except self.failure:
            self.store.users.record_login_attempt(key, False, now=self.clock())
            raise
        else:
            self.store.users.record_login_attempt(key, True, now=self.clock())
        finally:
            with self._lock:
                self._busy.discard(key)

    def _refuse_if_throttled(self, key: str, now: datetime) -> None:
        s = self.settings
        window, lockout = timedelta(minutes=s.login_window_minutes), timedelta(minutes=s.login_lockout_minutes)
        self._maybe_prune(now, window + lockout)
        failures: list[datetime] = []
        for ok, at in self.store.users.login_attempts(key, since=now - window - lockout):
            failures = [] if ok else [*failures, at]  # a success wipes the slate
        n = s.login_max_failures
        if len(failures) >= n:
            burst = failures[-n:]
            if burst[-1] - burst[0] <= window and now < burst[-1] + lockout:
                minutes = math.ceil((burst[-1] + lockout - now).total_seconds() / 60)
                raise LoginThrottled(
                    f"Too many failed sign-ins with this name: signing in with it is paused for "
                    f"{minutes} more minute{'s' if minutes != 1 else ''}.",
                    math.ceil((burst[-1] + lockout - now).total_seconds()))
        recent = [at for at in failures if at > now - window]
        if recent:
            until = recent[-1] + timedelta(seconds=s.login_delay_s * 2 ** min(len(recent) - 1, n))
            if now < until:
                wait = math.ceil((until - now).total_seconds())
                raise LoginThrottled(f"Too many failed sign-ins with this name: wait {wait} second"
                                     f"{'s' if wait != 1 else ''} and try again.", wait)

    def _maybe_prune(self, now: datetime, horizon: timedelta) -> None:
        if self._pruned_at is not None and now - self._pruned_at < PRUNE_EVERY:
            return
        self._pruned_at = now
        self.store.users.prune_login_attempts(before=now - horizon - timedelta(days=1))
