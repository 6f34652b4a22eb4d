"""Coordination between service replicas that share a PostgreSQL store: who leads, and who hears
about a change. On a DuckDB file there is one process, so it always leads and nobody listens.

    lead = store.jobs.leadership("scheduler")
    if lead.acquire():            # call it every few seconds: takes, keeps or loses the lead
        ...                       # only the leader fires scheduled jobs
    store.jobs.notify("release", release_id)     # in the caller's transaction: sent at commit
    with store.jobs.listener("release") as listener:
        for channel, payload in listener.wait(5.0): ...

Design choices:
- Leadership is a session-level `pg_try_advisory_lock` held on a dedicated connection (not a
  pooled one: a pooled connection goes back to the pool and the lock with it). It lasts as long as
  that connection: when the leader's process dies, even by SIGKILL, the kernel closes the socket,
  PostgreSQL ends the session and the lock is free for the next replica's `acquire()`. While it
  leads, `acquire()` also checks the connection is alive, so a leader cut off from the database
  stops leading at its next check.
- Notifications are `pg_notify` in the writer's transaction (sent only if it commits); a listener
  has its own connection and, when that breaks, reconnects and reports ("reconnected", "") so the
  caller re-reads what it may have missed. Listeners are a shortcut, not the source of truth:
  callers poll the database as well.
- Keys and channels are constants per purpose; a database holds one deployment, so they need no
  namespace.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from store.db import Database

CHANNEL_PREFIX = "advisor_"


def _lock_key(name: str) -> int:
    return int.from_bytes(hashlib.sha256(f"advisor:{name}".encode()).digest()[:8], "big", signed=True)


class Leadership:
    """Always the leader: one process holds a DuckDB file."""

    def acquire(self) -> bool:
        return True

    def release(self) -> None:
        pass


class _PgLeadership(Leadership):
    def __init__(self, db: Database, name: str):
        self._db, self._key = db, _lock_key(name)
        self._conn: Any = None
        self._held = False

    def acquire(self) -> bool:
        """Take the lead if it is free, keep it if held and the connection lives; else False."""
        import psycopg

        try:
            if self._conn is None or self._conn.closed:
                self._conn, self._held = self._db.dedicated_connection(), False
            if self._held:
                self._conn.execute("SELECT 1")
            else:
                self._held = bool(self._conn.execute("SELECT pg_try_advisory_lock(%s)", [self._key]).fetchone()[0])
        except psycopg.Error:
            self.release()
        return self._held

    def release(self) -> None:
        self._held = False
        if self._conn is not None:
            try:
                self._conn.close()  # the session ends, and its advisory locks with it
            except Exception:  # noqa: BLE001 - a broken connection is already as good as closed
                pass
            self._conn = None


class Listener:
    """Hears nothing: one process, no one else to tell."""

    def wait(self, timeout_s: float) -> list[tuple[str, str]]:
        time.sleep(timeout_s)
        return []

    def close(self) -> None:
        pass


class _PgListener(Listener):
    def __init__(self, db: Database, channels: tuple[str, ...]):
        self._db, self._channels = db, channels
        self._conn: Any = None

    def _connect(self) -> None:
        self._conn = self._db.dedicated_connection()
        for channel in self._channels:
            self._conn.execute(f"LISTEN {CHANNEL_PREFIX}{channel}")

    def wait(self, timeout_s: float) -> list[tuple[str, str]]:
        """Notifications received within `timeout_s` (returns at the first one)."""
        import psycopg

        try:
            if self._conn is None or self._conn.closed:
                self._connect()
                return [("reconnected", "")]
            return [(n.channel.removeprefix(CHANNEL_PREFIX), n.payload)
                    for n in self._conn.notifies(timeout=timeout_s, stop_after=1)]
        except psycopg.Error:
            self.close()
            time.sleep(min(timeout_s, 1.0))
            return []

    def close(self) -> None:
        if self._conn is not None:
            try:
                self._conn.close()
            except Exception:  # noqa: BLE001
                pass
            self._conn = None


def leadership(db: Database, name: str) -> Leadership:
    """The lead for `name` (e.g. "scheduler") among the processes sharing this database."""
    return _PgLeadership(db, name) if db.shared else Leadership()


def notify(db: Database, channel: str, payload: str = "") -> None:
    """Tell listening replicas (in the caller's transaction, if any: sent when it commits)."""
    if db.shared:
        db.read("SELECT pg_notify(?, ?)", [CHANNEL_PREFIX + channel, payload])


@contextmanager
def listener(db: Database, *channels: str) -> Iterator[Listener]:
    listener = _PgListener(db, channels) if db.shared else Listener()
    try:
        yield listener
    finally:
        listener.close()
