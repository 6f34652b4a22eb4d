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
        if cur is None:
            cur = self._conn.cursor()
            self._local.cursor = cur
        return cur

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One serialised write transaction around typed store calls; commits on success, rolls
        back on any error. Inside another transaction of this thread it joins that one."""
        with self._write_lock:
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
        return self._cursor().execute(sql, params).fetchall()

    def _read_one(self, sql: str, params: Params = ()) -> tuple | None:
        rows = self._cursor().execute(sql, params).fetchall()
        return rows[0] if rows else None

    def _execute(self, sql: str, params: Params = ()) -> int:
        """A write on this thread's cursor (inside the caller's transaction, if any, else in
        autocommit). Returns the rows it changed: DuckDB answers a DML statement with that count
        as its one row (PostgreSQL drivers: `cursor.rowcount`)."""
        rows = self._cursor().execute(sql, params).fetchall()
        return int(rows[0][0]) if rows else 0

    def _returning(self, sql: str, params: Params = ()) -> tuple | None:
        """A write with a RETURNING clause: its first row, None when it wrote nothing."""
        return self._read_one(sql, params)

    def _executemany(self, sql: str, rows: Sequence[Params]) -> None:
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
        cur = self._cursor()
        cur.register(view, pa.table({c: rows[c] for c in columns}))
        try:
            rows = cur.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM {view}{conflict}").fetchall()
        finally:
            cur.unregister(view)
        return int(rows[0][0]) if rows else 0

    # ---- analytics reads (DuckDB SQL: later DuckDB over data exported from PostgreSQL)

    def _analytics(self, sql: str, params: Params | dict | None = None) -> list[tuple]:
        return self._cursor().execute(sql, params or []).fetchall()

    def _analytics_arrow(self, sql: str, params: Params | dict | None = None):
        """The same, as an Arrow table (exports write it to Parquet without a Python round trip)."""
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
                self._cursor().execute(sql)  # several statements: DuckDB runs them as one script
                self._execute("INSERT INTO schema_version (version, description) VALUES (?, ?)",
                              [version, description])

    def schema_version(self) -> int:
        row = self._read_one("SELECT coalesce(max(version), 0) FROM schema_version")
        return int(row[0]) if row else 0
