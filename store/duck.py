"""The embedded backend: one DuckDB file, owned by one process, shared by its threads.

The store's default (`Store(path)`). `Database` (db.py) talks to it through the same small set of
methods as to the PostgreSQL engine (`pg.py`); this is the only module of the store, with the
analytics mirror, that imports duckdb.

Design choices:
- DuckDB lets exactly one process open a file read-write and then locks everyone else out, even
  readers. So the service owns the file; other processes go through its REST API. When the lock
  is held, `StoreLocked` names the holder (PID and command line) and says what to do.
- One connection per store, one cursor per thread (DuckDB cursors are independent connections
  to the same database). Reads run concurrently under MVCC; writes are serialised by a lock and
  each multi-row write is one explicit transaction, so a crash leaves all of it or none of it.
  Serialised writes also make `messages.seq` commit-ordered, which the extraction watermark needs.
- A write that returned is committed: DuckDB has written it to its WAL, which is replayed on the
  next open, so SIGKILL loses nothing acknowledged.
- Analytics reads run on the same file: DuckDB is the analytics engine.
- One process, so there is nobody to elect or notify: the process always leads, and
  notifications are not sent (`coordination.py`).
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
from typing import Any

import duckdb

from store.records import StoreError, StoreLocked

Params = Sequence[Any]

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


class DuckDBEngine:
    dialect = "duckdb"
    shared = False  # one process: no other replica to coordinate with

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = duckdb.connect(str(self.path))
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower():
                raise _locked_error(self.path, exc) from None
            raise StoreError(f"Cannot open the database {self.path}: {exc}") from exc
        self.write_lock = threading.RLock()
        self._local = threading.local()
        self._closed = False
        # Statements running now, and whether a compaction is waiting for them (see compact()).
        self._gate = threading.Condition()
        self._running = 0
        self._swapping = False
        self._epoch = 0  # bumped when compaction swaps the connection: cursors of older epochs are stale

    def close(self) -> None:
        with self.write_lock:
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

    def compact(self, tables: Sequence[str] = (), *, full: bool = False) -> None:
        """Rewrite the database file so deleted rows leave no bytes behind (after forgetting a
        user or a retention sweep): every table, whatever `tables` and `full` say. Blocks other
        statements while it runs: about 2 s per 400k messages here."""
        with self.write_lock:
            with self._gate:
                self._swapping = True
                self._gate.wait_for(lambda: self._running == 0)
            try:
                fresh = self.path.with_name(self.path.name + ".compact")
                fresh.unlink(missing_ok=True)
                catalog = self._conn.execute("SELECT current_database()").fetchone()[0]
                self._conn.execute("CHECKPOINT")
                self._conn.execute(f"ATTACH '{fresh}' AS compacted")
                self._conn.execute(f'COPY FROM DATABASE "{catalog}" TO compacted')
                self._conn.execute("DETACH compacted")
                self._conn.close()
                fresh.replace(self.path)
                self._conn = duckdb.connect(str(self.path))
                self._epoch += 1
            finally:
                with self._gate:
                    self._swapping = False
                    self._gate.notify_all()

    @contextmanager
    def transaction(self) -> Iterator[None]:
        with self.write_lock, self._using():
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

    def serial(self):
        """What a lone write statement runs under: the write lock (commit order = seq order)."""
        return self.write_lock

    # Every call fetches its whole result: DuckDB refuses other work on a cursor (registering a
    # table, say) while a result is half read, and these results are a few rows at most.

    def read(self, sql: str, params: Params = ()) -> list[tuple]:
        with self._using():
            return self._cursor().execute(sql, params).fetchall()

    def execute(self, sql: str, params: Params = ()) -> int:
        # DuckDB answers a DML statement with its row count as its one row.
        rows = self.read(sql, params)
        return int(rows[0][0]) if rows and rows[0] and isinstance(rows[0][0], int) else 0

    def returning(self, sql: str, params: Params = ()) -> tuple | None:
        rows = self.read(sql, params)
        return rows[0] if rows else None

    def executemany(self, sql: str, rows: Sequence[Params]) -> None:
        with self._using():
            self._cursor().executemany(sql, rows)

    def script(self, sql: str) -> None:
        with self._using():
            self._cursor().execute(sql)  # several statements: DuckDB runs them as one script

    def insert_rows(self, table: str, columns: Sequence[str], rows: dict[str, list], skip_conflicts: bool) -> int:
        # A registered Arrow table: a row-by-row `executemany` costs milliseconds a row in DuckDB.
        import pyarrow as pa

        names = ", ".join(columns)
        view = f"_new_{table}"
        conflict = " ON CONFLICT DO NOTHING" if skip_conflicts else ""
        with self._using():
            cur = self._cursor()
            cur.register(view, pa.table({c: rows[c] for c in columns}))
            try:
                out = cur.execute(f"INSERT INTO {table} ({names}) SELECT {names} FROM {view}{conflict}").fetchall()
            finally:
                cur.unregister(view)
        return int(out[0][0]) if out else 0

    def committed_seq(self) -> int:
        """Writes are serialised, so the highest seq is also the last committed one."""
        row = self.returning("SELECT coalesce(max(seq), 0) FROM messages")
        return int(row[0]) if row else 0

    # ---- analytics: DuckDB's own dialect, on the file itself

    def analytics(self, sql: str, params: Params | dict | None = None) -> list[tuple]:
        with self._using():
            return self._cursor().execute(sql, params or []).fetchall()

    def analytics_arrow(self, sql: str, params: Params | dict | None = None):
        with self._using():
            return self._cursor().sql(sql, params=params or None).to_arrow_table()

    def xact_lock(self, name: str) -> None:
        pass  # write transactions hold the write lock already

    @contextmanager
    def migration_lock(self) -> Iterator[None]:
        yield  # one process holds the file: nobody else can migrate it
