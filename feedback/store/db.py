"""The database under the store: one DuckDB file, owned by one process, shared by its threads.

The only module of the store that imports duckdb. The aggregate modules (users, conversations,
ratings, ...) write SQL and hand it to the small private helpers here; they never hold a cursor.

Design choices:
- DuckDB lets exactly one process open a file read-write and then locks everyone else out, even
  readers. So the service owns the file; other processes go through its REST API. When the lock
  is held, `StoreLocked` names the holder (PID and command line) and says what to do.
- One connection per store, one cursor per thread (DuckDB cursors are independent connections
  to the same database). Reads run concurrently under MVCC; writes are serialised by a lock and
  each multi-row write is one explicit transaction, so a crash leaves all of it or none of it.
  Serialised writes also make `messages.seq` commit-ordered, which the extraction watermark needs.
- `transaction()` yields nothing: it groups typed store calls (they run on this thread's cursor,
  so they join it), and is no way in for raw SQL. Nested transactions join the outer one.
- A write that returned is committed: DuckDB has written it to its WAL, which is replayed on the
  next open, so SIGKILL loses nothing acknowledged.
- Two kinds of SQL, kept apart so a PostgreSQL backend (issue 17) can route them: transactional
  statements (`_read`, `_read_one`, `_execute`, `_returning`, `_executemany`, `_insert_rows`),
  written in SQL PostgreSQL also accepts, `?` placeholders only; and analytics reads
  (`_analytics`, `_analytics_arrow`) in DuckDB's dialect, which will run on DuckDB over exported
  data. Placeholders are translated here, and only here, when a driver wants another style.
- Schema changes are numbered migrations (`migrations.py`), applied on open, each in its own
  transaction.
- `compact()` rewrites the file (DuckDB's `COPY FROM DATABASE` into a new file, then a rename):
  DuckDB leaves deleted rows' bytes in freed blocks, and forgetting a person must not. Every
  statement runs inside `_using()`, so compaction can wait for the ones running, swap the
  connection, and let the next ones start on the new file (each thread's cursor is renewed).
"""

from __future__ import annotations

import re
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

import duckdb

from feedback.store.migrations import MIGRATIONS
from feedback.store.records import StoreError, StoreLocked

Params = Sequence[Any]

# --------------------------------------------------------------------------- lock diagnosis

_LOCK_PID = re.compile(r"PID (\d+)")


def _lock_holder(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        cmd = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmd = ""
    return f"PID {pid} ({cmd})" if cmd else f"PID {pid}"


def _locked_error(path: Path, exc: Exception) -> StoreLocked:
    match = _LOCK_PID.search(str(exc))
    holder = _lock_holder(int(match.group(1))) if match else "another process"
    return StoreLocked(
        f"The database {path} is in use by {holder}. DuckDB lets only one process open it.\n"
        "If that is the Advisor service, run this command against the service instead "
        "(`--url http://HOST:PORT`, or use its web UI / REST API); otherwise stop that process "
        "and run the command again."
    )


# --------------------------------------------------------------------------- the database


class Database:
    """One open DuckDB file: connection, per-thread cursors, the write lock, transactions and
    migrations. `Store` adds the typed API on top; nothing outside the store package uses this."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = duckdb.connect(str(self.path))
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower():
                raise _locked_error(self.path, exc) from None
            raise StoreError(f"Cannot open the database {self.path}: {exc}") from exc
        self._write_lock = threading.RLock()
        self._local = threading.local()
        self._closed = False
        # Statements running now, and whether a compaction is waiting for them (see compact()).
        self._gate = threading.Condition()
        self._running = 0
        self._swapping = False
        self._epoch = 0  # bumped when compaction swaps the connection: cursors of older epochs are stale
        self._migrate()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._write_lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        if self._closed:
            raise StoreError("The store is closed.")
        cur = getattr(self._local, "cursor", None)
        if cur is None or getattr(self._local, "epoch", -1) != self._epoch:
            cur = self._conn.cursor()
            self._local.cursor, self._local.epoch = cur, self._epoch
        return cur

    @contextmanager
    def _using(self) -> Iterator[None]:
        """Around every statement: waits while a compaction swaps the file, and lets it wait for
        the statements already running. Re-entrant per thread (a transaction's statements)."""
        depth = getattr(self._local, "using", 0)
        if depth == 0:
            with self._gate:
                self._gate.wait_for(lambda: not self._swapping)
                self._running += 1
        self._local.using = depth + 1
        try:
            yield
        finally:
            self._local.using = depth
            if depth == 0:
                with self._gate:
                    self._running -= 1
                    self._gate.notify_all()

    def compact(self) -> None:
        """Rewrite the database file so deleted rows leave no bytes behind (after forgetting a
        user or a retention sweep). Blocks other statements while it runs: seconds per 100k
        conversations."""
        with self._write_lock:
            with self._gate:
                self._swapping = True
                self._gate.wait_for(lambda: self._running == 0)
            try:
                fresh = self.path.with_name(self.path.name + ".compact")
                fresh.unlink(missing_ok=True)
                self._conn.execute("CHECKPOINT")
                self._conn.execute(f"ATTACH '{fresh}' AS compacted")
                self._conn.execute(f"COPY FROM DATABASE \"{self._catalog()}\" TO compacted")
                self._conn.execute("DETACH compacted")
                self._conn.close()
                fresh.replace(self.path)
                self._conn = duckdb.connect(str(self.path))
                self._epoch += 1
            finally:
                with self._gate:
                    self._swapping = False
                    self._gate.notify_all()

    def _catalog(self) -> str:
        return self._conn.execute("SELECT current_database()").fetchone()[0]

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One serialised write transaction around typed store calls; commits on success, rolls
        back on any error. Inside another transaction of this thread it joins that one."""
        with self._write_lock, self._using():
            cur = self._cursor()
            if getattr(self._local, "in_txn", False):
                yield
                return
            cur.execute("BEGIN TRANSACTION")
            self._local.in_txn = True
            try:
                yield
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            finally:
                self._local.in_txn = False

    # ---- transactional SQL (portable: PostgreSQL accepts it too)
    # Every helper fetches its whole result: DuckDB refuses other work on a cursor (registering a
    # table, say) while a result is half read, and these results are a few rows at most.

    def _read(self, sql: str, params: Params = ()) -> list[tuple]:
        with self._using():
            return self._cursor().execute(sql, params).fetchall()

    def _read_one(self, sql: str, params: Params = ()) -> tuple | None:
        rows = self._read(sql, params)
        return rows[0] if rows else None

    def _execute(self, sql: str, params: Params = ()) -> int:
        """A write on this thread's cursor (inside the caller's transaction, if any, else in
        autocommit). Returns the rows it changed: DuckDB answers a DML statement with that count
        as its one row (PostgreSQL drivers: `cursor.rowcount`)."""
        rows = self._read(sql, params)
        return int(rows[0][0]) if rows else 0

    def _returning(self, sql: str, params: Params = ()) -> tuple | None:
        """A write with a RETURNING clause: its first row, None when it wrote nothing."""
        return self._read_one(sql, params)

    def _executemany(self, sql: str, rows: Sequence[Params]) -> None:
        with self._using():
            self._cursor().executemany(sql, rows)

    def _insert_rows(self, table: str, columns: Sequence[str], rows: dict[str, list], *,
                     skip_conflicts: bool = False) -> int:
        """Insert many rows as one statement and return how many went in. `rows` is column-wise.

        DuckDB-specific, here on purpose: the rows go in as a registered Arrow table, because a
        row-by-row `executemany` costs milliseconds a row in DuckDB (PostgreSQL: COPY or
        `executemany`). With `skip_conflicts` a row that breaks a unique key is left out
        (`ON CONFLICT DO NOTHING`); the count is of rows actually inserted."""
        import pyarrow as pa

        names = ", ".join(columns)
        view = f"_new_{table}"
        conflict = " ON CONFLICT DO NOTHING" if skip_conflicts else ""
        with self._using():
            cur = self._cursor()
            cur.register(view, pa.table({c: rows[c] for c in columns}))
            try:
                rows = cur.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM {view}{conflict}").fetchall()
            finally:
                cur.unregister(view)
        return int(rows[0][0]) if rows else 0

    # ---- analytics reads (DuckDB SQL: later DuckDB over data exported from PostgreSQL)

    def _analytics(self, sql: str, params: Params | dict | None = None) -> list[tuple]:
        with self._using():
            return self._cursor().execute(sql, params or []).fetchall()

    def _analytics_arrow(self, sql: str, params: Params | dict | None = None):
        """The same, as an Arrow table (exports write it to Parquet without a Python round trip)."""
        with self._using():
            return self._cursor().sql(sql, params=params or None).to_arrow_table()

    # ---- schema

    def _migrate(self) -> None:
        with self.transaction():
            self._execute(
                "CREATE TABLE IF NOT EXISTS schema_version ("
                "version INTEGER PRIMARY KEY, description VARCHAR, applied_at TIMESTAMPTZ DEFAULT now())"
            )
        for version, description, sql in MIGRATIONS:
            if version <= self.schema_version():
                continue
            with self.transaction():
                self._cursor().execute(sql)  # several statements: DuckDB runs them as one script (under _using)
                self._execute("INSERT INTO schema_version (version, description) VALUES (?, ?)",
                              [version, description])

    def schema_version(self) -> int:
        row = self._read_one("SELECT coalesce(max(version), 0) FROM schema_version")
        return int(row[0]) if row else 0
