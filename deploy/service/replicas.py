"""Replicas that cooperate: several `advisor serve` processes on one PostgreSQL store.

Any replica serves any user (the conversation, the session cookie's secret and the adapters are
shared: the store, `server.session_secret`, `data_dir`); what this module adds is the rest:

- One leader fires the schedule. Every replica tries the scheduler's advisory lock every
  `store.coordination_s` seconds (`Jobs.leadership`); the one that holds it leads, keeps it while
  its connection lives, and loses it with its process. A SIGKILLed leader's lock is free as soon as
  PostgreSQL sees the socket close, and the next replica to try takes over: within
  `coordination_s` seconds.
- Jobs run on the leader, once: "run now" on any replica queues a row and notifies; the leader
  claims queued rows (`JobRegistry.dispatch`, one guarded UPDATE each) when notified and on every
  tick.
- Crash recovery: the leader fails rows whose owner stopped renewing its lease
  (`deploy.loop.recovery`) when it takes the lead and every `HEARTBEAT_S` while it leads: a
  leader that died a moment before the takeover leaves rows whose lease is still fresh, so one
  look at takeover is not enough.
- Releases: a promotion or rollback on one replica commits the new live release and notifies;
  every replica hears it (or sees it on its next tick: notifications are a shortcut, the live row
  is the truth) and `refresh_release`s, which hot-swaps its adapter for new answers while answers
  in flight keep the adapter they pinned.

Design choices:
- One daemon thread per replica, waiting on the store's listener with the tick as timeout: no
  busy polling, and a lost notification costs at most one tick.
- On a DuckDB store nothing starts: one process, which leads and already knows its releases.
- The swap takes the registry's per-service swap lock, so a refresh never interleaves with a
  promotion being made on this same replica.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from typing import Any

from deploy.loop.recovery import recover_stale_work
from store.jobs import HEARTBEAT_S

log = logging.getLogger("advisor.replicas")


def replica_name() -> str:
    return f"{socket.gethostname()}:{os.getpid()}"


class Coordinator:
    """Leads (or not), dispatches queued jobs when leading, follows the live release."""

    def __init__(self, services: Any, interval_s: float):
        self.services = services
        self.interval_s = interval_s
        self.name = replica_name()
        self.leading = False
        self._lead = services.store.jobs.leadership("scheduler")
        self._next_recovery = 0.0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, name="advisor-replica", daemon=True)

    def start(self) -> None:
        jobs = self.services.jobs
        if jobs is not None:
            jobs.leads = lambda: self.leading
            jobs.replica = self.name
        self.tick([])
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread.is_alive():  # never started: only the lead to hand back
            self._thread.join(timeout=self.interval_s + 5)
        self._lead.release()
        self.leading = False

    def _loop(self) -> None:
        with self.services.store.jobs.listener("release", "jobs") as listener:
            while not self._stop.is_set():
                try:
                    self.tick(listener.wait(self.interval_s))
                except Exception:  # noqa: BLE001 - the coordinator must outlive a database hiccup
                    log.exception("replica coordination failed; retrying in %.1fs", self.interval_s)
                    self._stop.wait(self.interval_s)

    def tick(self, heard: list[tuple[str, str]]) -> None:
        """Check the lead, run queued jobs if leading, follow the live release. `heard`: the
        notifications that woke it (none on a timeout); each tick re-reads everything anyway."""
        if heard:
            log.debug("replica %s heard %s", self.name, heard)
        was, self.leading = self.leading, self._lead.acquire()
        if self.leading != was:
            log.warning("replica %s %s the scheduler lead", self.name, "took" if self.leading else "lost")
        if self.leading and (self.leading != was or time.monotonic() >= self._next_recovery):
            self._next_recovery = time.monotonic() + HEARTBEAT_S
            self.recover(when="on taking the scheduler lead" if self.leading != was else "while leading the scheduler")
        if self.leading and self.services.jobs is not None:
            self.services.jobs.dispatch()
        self.follow_release()

    def recover(self, *, when: str) -> None:
        """Fail the jobs of replicas that died (`deploy.loop.recovery`); never stops the tick."""
        try:
            recover_stale_work(self.services.store, self.services.settings, when=when)
        except Exception:  # noqa: BLE001 - recovery is retried on the next round; serving goes on
            log.exception("crash recovery failed on replica %s; retrying in %.0fs", self.name, HEARTBEAT_S)

    def follow_release(self) -> None:
        """Serve the live release if another replica changed it."""
        from deploy.release.registry import swap_lock

        services = self.services
        live = services.store.releases.live()
        if live is None or live.id == services.release_id:
            return
        with swap_lock(services):
            if services.store.releases.live() is not None and services.release_id != live.id:
                log.warning("release %s went live on another replica; swapping to it", live.id)
                services.refresh_release()


def start_coordinator(services: Any) -> Coordinator | None:
    """The coordinator of a replica on a shared store; None on a DuckDB file."""
    if not services.store.shared:
        return None
    coordinator = Coordinator(services, services.settings.store.coordination_s)
    coordinator.start()
    services.extras["replica"] = coordinator
    return coordinator
