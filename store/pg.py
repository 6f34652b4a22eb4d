"""The shared backend: a PostgreSQL server that several service replicas use at once.

`Store("postgresql://user@host:5432/advisor")` opens it; `Database` (db.py) talks to it through
the same methods as to the DuckDB engine. The only module of the store that imports psycopg.

Design choices:
- A connection pool (psycopg_pool) in autocommit mode: a lone statement commits at once; a
  `transaction()` takes one connection for the thread until it commits. Statements are prepared
  by psycopg after a few uses, so the turn path's INSERTs cost one round trip each.
- The store's SQL uses `?` placeholders; `to_pyformat` turns them into psycopg's `%s` (and a
  literal `%` into `%%`), once per distinct statement. Changed-row counts come from
  `cursor.rowcount`, RETURNING rows from the cursor.
- Bulk inserts (`insert_rows`) go through COPY; with `skip_conflicts` into a temporary table
  first, then `INSERT … SELECT … ON CONFLICT DO NOTHING`, whose row count is exact.
- Commit order. Sequence values are handed out at INSERT and the transactions commit in any
  order, so "the highest seq" is not a safe extraction bound: a message that took seq 10 may
  commit after seq 11 was read and the watermark moved past it. `Settler` finds a safe bound:
  (1) read the sequence's last value L, (2) then take a snapshot, (3) wait until every
  transaction that snapshot lists as running has ended. `next_message_seq()` assigns the
  transaction id before it takes a value (migration 1), so any transaction holding a seq <= L
  was already running at (2) and is listed; after (3) every seq <= L is committed or gone for
  good. Observations that time out (a long transaction) stay pending and become safe once their
  transactions end; the bound never moves backwards. The same observation carries the tables'
  change counters, which tells the analytics mirror what to copy (`mirror.py`).
- Analytics reads (DuckDB SQL) run on `Mirror`, an in-memory DuckDB over the tables they name.
- Coordination (`coordination.py`): a session-level advisory lock on a dedicated connection for
  the leader, LISTEN/NOTIFY for release changes. Both die with the process's connection, so a
  SIGKILLed leader frees the lock as soon as PostgreSQL sees the socket close.
"""

from __future__ import annotations

import hashlib
import re
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager, nullcontext
from dataclasses import dataclass
from functools import lru_cache
from typing import Any
from urllib.parse import urlsplit, urlunsplit

import psycopg
from psycopg_pool import ConnectionPool

from store.records import StoreError

Params = Sequence[Any]
MIGRATION_LOCK = 0x61647669736F7201  # pg_advisory_xact_lock key: one replica migrates at a time
SETTLE_TIMEOUT_S = 2.0
_IDENTIFIER = re.compile(r"[a-z_][a-z0-9_]*")


@lru_cache(maxsize=2048)
def to_pyformat(sql: str) -> str:
    """`?` placeholders (outside string literals) → `%s`; a literal `%` → `%%` (psycopg)."""
    out, quoted = [], False
    for ch in sql:
        if ch == "'":
            quoted = not quoted
        if ch == "?" and not quoted:
            out.append("%s")
        elif ch == "%":
            out.append("%%")
        else:
            out.append(ch)
    return "".join(out)


def redact(url: str) -> str:
    """The URL without its password (what reports and errors show)."""
    parts = urlsplit(url)
    if parts.password:
        netloc = parts.netloc.replace(f":{parts.password}@", ":***@")
        return urlunsplit(parts._replace(netloc=netloc))
    return url


def _configure(conn: psycopg.Connection) -> None:
    conn.execute("SET TIME ZONE 'UTC'")


class PostgresEngine:
    dialect = "postgres"
    shared = True

    def __init__(self, url: str, *, pool_size: int = 20, settle_timeout_s: float = SETTLE_TIMEOUT_S):
        self.url = url
        self.path = redact(url)
        self._local = threading.local()
        self._pool = ConnectionPool(url, min_size=1, max_size=pool_size, open=False, name="advisor-store",
                                    kwargs={"autocommit": True}, configure=_configure,
                                    check=ConnectionPool.check_connection)
        try:
            self._pool.open(wait=True, timeout=30)
        except Exception as exc:
            self._pool.close()
            raise StoreError(f"Cannot connect to PostgreSQL at {self.path}: {exc}") from exc
        self.settler = Settler(self, settle_timeout_s)
        self._mirror = None
        self._mirror_lock = threading.Lock()

    def compact(self, tables: Sequence[str] = (), *, full: bool = False) -> None:
        """VACUUM the tables deletes touched, now rather than when autovacuum gets to them: dead
        rows are removed from their pages and the space is marked free for reuse (index entries
        too), without a lock that blocks reads or writes; the deleted bytes can stay in a page's
        free space until new rows overwrite them (measured: the forgotten text was still in the
        `conversations` file after VACUUM). `full`: VACUUM FULL rewrites each table into new
        files, which keep none of them, under an exclusive lock (the operator's choice,
        `privacy.vacuum_full`). VACUUM cannot run in a transaction, so each runs alone on a
        pooled (autocommit) connection."""
        if self.in_transaction():
            raise StoreError("VACUUM cannot run inside a transaction; compact after it commits.")
        for table in tables:
            if not _IDENTIFIER.fullmatch(table):
                raise StoreError(f"Not a table name: {table!r}.")
            with self.connection() as conn:
                conn.execute(f"VACUUM ({'FULL, ' if full else ''}ANALYZE) {table}")

    def close(self) -> None:
        if self._mirror is not None:
            self._mirror.close()
        self._pool.close()

    @contextmanager
    def connection(self) -> Iterator[psycopg.Connection]:
        """This thread's transaction's connection, or a pooled one (autocommit)."""
        conn = getattr(self._local, "conn", None)
        if conn is not None:
            yield conn
            return
        if self._pool.closed:
            raise StoreError("The store is closed.")
        with self._pool.connection() as conn:
            yield conn

    def in_transaction(self) -> bool:
        return getattr(self._local, "conn", None) is not None

    @contextmanager
    def transaction(self) -> Iterator[None]:
        if self.in_transaction():
            yield
            return
        with self.connection() as conn:
            self._local.conn = conn
            try:
                with conn.transaction():
                    yield
            finally:
                self._local.conn = None

    def serial(self):
        return nullcontext()

    def read(self, sql: str, params: Params = ()) -> list[tuple]:
        with self.connection() as conn:
            cur = conn.execute(to_pyformat(sql), list(params))
            return cur.fetchall() if cur.description is not None else []

    def execute(self, sql: str, params: Params = ()) -> int:
        with self.connection() as conn:
            return max(conn.execute(to_pyformat(sql), list(params)).rowcount, 0)

    def returning(self, sql: str, params: Params = ()) -> tuple | None:
        with self.connection() as conn:
            return conn.execute(to_pyformat(sql), list(params)).fetchone()

    def executemany(self, sql: str, rows: Sequence[Params]) -> None:
        with self.connection() as conn, conn.cursor() as cur:
            cur.executemany(to_pyformat(sql), [list(r) for r in rows])

    def script(self, sql: str) -> None:
        with self.connection() as conn:
            conn.execute(sql)  # no parameters: the simple protocol runs several statements

    def insert_rows(self, table: str, columns: Sequence[str], rows: dict[str, list], skip_conflicts: bool) -> int:
        names = ", ".join(columns)
        target = f"_new_{table}" if skip_conflicts else table
        with self.connection() as conn:  # inside the caller's transaction (Database.insert_rows)
            if skip_conflicts:
                conn.execute(f"CREATE TEMP TABLE {target} ON COMMIT DROP AS SELECT {names} FROM {table} WITH NO DATA")
            with conn.cursor() as cur, cur.copy(f"COPY {target} ({names}) FROM STDIN") as copy:
                for row in zip(*(rows[c] for c in columns)):
                    copy.write_row(row)
            if not skip_conflicts:
                return len(rows[columns[0]]) if columns else 0
            n = conn.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM {target} "
                             "ON CONFLICT DO NOTHING").rowcount
            conn.execute(f"DROP TABLE {target}")  # several batches may run in one transaction
            return n

    def committed_seq(self) -> int:
        return self.settler.settle().seq

    @contextmanager
    def migration_lock(self) -> Iterator[None]:
        self.execute("SELECT pg_advisory_xact_lock(?)", [MIGRATION_LOCK])  # released at commit
        yield

    def xact_lock(self, name: str) -> None:
        key = int.from_bytes(hashlib.sha256(f"advisor-xact:{name}".encode()).digest()[:8], "big", signed=True)
        self.read("SELECT pg_advisory_xact_lock(?)", [key])

    # ---- analytics: DuckDB over a mirror of the tables a query names

    def mirror(self):
        with self._mirror_lock:
            if self._mirror is None:
                from store.mirror import Mirror

                version = self.read("SELECT coalesce(max(version), 0) FROM schema_version")[0][0]
                self._mirror = Mirror(self, int(version))
            return self._mirror

    def analytics(self, sql: str, params: Params | dict | None = None) -> list[tuple]:
        return self.mirror().query(sql, params)

    def analytics_arrow(self, sql: str, params: Params | dict | None = None):
        return self.mirror().arrow(sql, params)

    def dedicated_connection(self) -> psycopg.Connection:
        """A connection of its own, outside the pool (advisory lock holder, LISTEN)."""
        conn = psycopg.connect(self.url, autocommit=True)
        _configure(conn)
        return conn


# --------------------------------------------------------------------------- commit order


@dataclass(frozen=True)
class Observation:
    seq: int  # message_seq's last value when observed
    counters: dict[str, int]  # change counter sequence → last value
    running: frozenset[str]  # transaction ids running at the snapshot taken just after


class Settler:
    """The newest observation whose running transactions have all ended: every change it counts
    is committed (or rolled back) for good. See the module docstring."""

    def __init__(self, engine: PostgresEngine, timeout_s: float):
        self._engine = engine
        self._timeout_s = timeout_s
        self._lock = threading.Lock()
        self._pending: list[Observation] = []
        self._settled = Observation(0, {}, frozenset())
        self._counters: list[str] | None = None

    def _counter_names(self, conn: psycopg.Connection) -> list[str]:
        if self._counters is None:  # migrations made them; `track_changes` names them changes_*
            rows = conn.execute("SELECT c.relname FROM pg_class c WHERE c.relkind = 'S' "
                                "AND c.relname LIKE 'changes\\_%' AND pg_table_is_visible(c.oid)").fetchall()
            self._counters = sorted(r[0] for r in rows)
        return self._counters

    def _observe(self, conn: psycopg.Connection, own_xid: str | None) -> Observation:
        names = ["message_seq", *self._counter_names(conn)]
        values = conn.execute(
            "SELECT " + ", ".join(f"coalesce(pg_sequence_last_value('{n}'), 0)" for n in names)).fetchone()
        running = {x for (x,) in conn.execute(
            "SELECT x::text FROM pg_snapshot_xip(pg_current_snapshot()) AS x")} - {own_xid}
        return Observation(int(values[0]), dict(zip(names[1:], map(int, values[1:]))), frozenset(running))

    def settle(self, timeout_s: float | None = None) -> Observation:
        """Observe now, wait up to `timeout_s` for the observation to settle, and return the newest
        settled one (an older one when a transaction outlives the wait)."""
        engine = self._engine
        own_xid = None
        if engine.in_transaction():  # never wait for our own open transaction
            own_xid = engine.read("SELECT pg_current_xact_id_if_assigned()::text")[0][0]
            timeout_s = 0.0
        deadline = time.monotonic() + (self._timeout_s if timeout_s is None else timeout_s)
        with self._lock, engine._pool.connection() as conn:
            self._pending.append(self._observe(conn, own_xid))
            del self._pending[:-64]  # a stuck transaction must not grow this without bound
            pause = 0.002
            while True:
                xids = sorted(set().union(*(o.running for o in self._pending)))
                still = {x for (x,) in conn.execute(
                    "SELECT x FROM unnest(%s::text[]) AS t(x) WHERE pg_xact_status(x::xid8) = 'in progress'",
                    [xids])} if xids else set()
                ready = [i for i, o in enumerate(self._pending) if not (o.running & still)]
                if ready and (ready[-1] == len(self._pending) - 1 or time.monotonic() >= deadline):
                    self._settled = self._pending[ready[-1]]
                    del self._pending[:ready[-1] + 1]
                    return self._settled
                if time.monotonic() >= deadline:
                    return self._settled
                time.sleep(pause)
                pause = min(pause * 2, 0.05)
