"""Analytics over a PostgreSQL store: an in-memory DuckDB holding copies of the tables a query
names, brought up to date before each query.

Why not DuckDB's postgres extension: it cannot be downloaded here (no network), and the PyPI
builds (`duckdb-ext-postgres`) stop at DuckDB 1.4.4 while the project runs 2.0.1, which refuses
to load them ("built specifically for DuckDB version v1.4.4"). So the store streams the rows out
itself: `COPY (SELECT …) TO STDOUT (FORMAT csv)` → pyarrow's streaming CSV reader (C, a batch at
a time) → `INSERT INTO <table> SELECT CAST(…)` on the DuckDB side. bench/extract.py and
bench/store.py measure it (docs/scaling.md).

Design choices:
- The mirror's schema is made by running the DuckDB dialect of the same migrations
  (`migrations.py`) up to the PostgreSQL store's version, so the operator's reports, the
  extraction windows and the training-set reads run unchanged (`generations` is the DuckDB view
  over the copied `messages`, JSON and all).
- Only what a query names is refreshed (its tables, and the tables under the views it names),
  and only when it changed: each PostgreSQL table has a change counter (`track_changes`), and
  `pg.Settler` observes them together with `messages.seq` at a point where every counted change
  is committed. A changed table is copied again whole, inside one REPEATABLE READ transaction for
  all the tables of a refresh (one consistent snapshot); tables without a counter
  (`schema_version`) are small and always copied.
- `messages`, the one big table, is copied incrementally: rows with seq in (copied, settled] —
  settled meaning no message at or below it can still commit, so none is skipped. Its inserts
  carry no trigger (the chat path stays cheap); its counter counts updates and deletes
  (forgetting a user), after which it is copied again whole.
- The mirror is per process and in memory: a replica answers the operator's reads from its own
  copy; memory grows with the log (≈ 1 GB per million messages of chat text; see docs/scaling.md).
"""

from __future__ import annotations

import io
import re
import threading
from collections.abc import Iterable, Sequence
from typing import Any

import duckdb

from store.migrations import MIGRATIONS
from store.sql_postgres import change_counter

_BLOCK = 1 << 22  # CSV bytes per Arrow batch


class _CopyStream(io.RawIOBase):
    """A file-like view of a COPY TO STDOUT, for pyarrow's streaming CSV reader."""

    def __init__(self, copy: Any):
        self._copy, self._buf = copy, b""

    def readable(self) -> bool:
        return True

    def readinto(self, b: Any) -> int:
        while not self._buf:
            chunk = self._copy.read()
            if not chunk:
                return 0
            self._buf = bytes(chunk)
        n = min(len(b), len(self._buf))
        b[:n], self._buf = self._buf[:n], self._buf[n:]
        return n


class Mirror:
    def __init__(self, engine: Any, version: int):
        """`engine`: the `pg.PostgresEngine` whose tables this mirrors (its connections and
        `settler`); not imported here, so the two modules stay out of an import circle."""
        self._engine = engine
        self._duck = duckdb.connect(":memory:")
        self._duck.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, description VARCHAR, "
                           "applied_at TIMESTAMPTZ DEFAULT now())")
        for migration in MIGRATIONS:
            if migration.version <= version:
                self._duck.execute(migration.duckdb)
        self._columns: dict[str, list[tuple[str, str]]] = {}
        for table, column, dtype in self._duck.execute(
                "SELECT table_name, column_name, data_type FROM duckdb_columns() "
                "WHERE database_name = 'memory' ORDER BY table_name, column_index").fetchall():
            self._columns.setdefault(table, []).append((column, dtype))
        views = dict(self._duck.execute("SELECT view_name, sql FROM duckdb_views() WHERE NOT internal").fetchall())
        self._tables = {t for t in self._columns if t not in views}
        self._under_view = {v: self._names_in(sql, self._tables) for v, sql in views.items()}
        self._copied: dict[str, int] = {}  # table → change counter when copied
        self._messages_seq = 0  # messages copied up to this seq
        self._lock = threading.Lock()
        self._local = threading.local()

    def close(self) -> None:
        self._duck.close()

    @staticmethod
    def _names_in(sql: str, names: Iterable[str]) -> set[str]:
        return {n for n in names if re.search(rf"\b{re.escape(n)}\b", sql)}

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        cur = getattr(self._local, "cursor", None)
        if cur is None:
            cur = self._local.cursor = self._duck.cursor()
        return cur

    def tables_of(self, sql: str) -> set[str]:
        named = self._names_in(sql, [*self._tables, *self._under_view])
        return {t for n in named for t in (self._under_view.get(n) or {n})}

    def query(self, sql: str, params: Sequence | dict | None = None) -> list[tuple]:
        self.refresh(self.tables_of(sql))
        return self._cursor().execute(sql, params or []).fetchall()

    def arrow(self, sql: str, params: Sequence | dict | None = None):
        self.refresh(self.tables_of(sql))
        return self._cursor().sql(sql, params=params or None).to_arrow_table()

    # ---- copying

    def refresh(self, tables: Iterable[str]) -> None:
        """Bring these tables up to the newest settled point (see the module docstring)."""
        with self._lock:
            settled = self._engine.settler.settle()
            stale = [t for t in sorted(tables) if t == "messages" or change_counter(t) not in settled.counters
                     or self._copied.get(t) != settled.counters[change_counter(t)]]
            whole_messages = self._copied.get("messages") != settled.counters.get(change_counter("messages"))
            if "messages" in stale and not whole_messages and self._messages_seq >= settled.seq:
                stale.remove("messages")  # nothing new to append
            if not stale:
                return
            with self._engine.connection() as conn, conn.transaction():
                conn.execute("SET TRANSACTION ISOLATION LEVEL REPEATABLE READ, READ ONLY")
                for table in stale:
                    if table == "messages":
                        self._copy_messages(conn, settled.seq, whole_messages)
                    else:
                        self._copy(conn, table, None, replace=True)
                    if change_counter(table) in settled.counters:
                        self._copied[table] = settled.counters[change_counter(table)]
            self._messages_seq = max(self._messages_seq, settled.seq) if "messages" in stale else self._messages_seq

    def _copy_messages(self, conn: Any, upto: int, whole: bool) -> None:
        low = 0 if whole else self._messages_seq
        self._copy(conn, "messages", f"seq > {int(low)} AND seq <= {int(upto)}", replace=whole)

    def _copy(self, conn: Any, table: str, where: str | None, *, replace: bool) -> int:
        """COPY the table's rows (those `where` selects) into the mirror; `replace` empties its copy
        first, in the same DuckDB transaction, so readers see the old or the new rows, never none."""
        import pyarrow as pa
        import pyarrow.csv as pacsv

        columns = self._columns[table]
        select = ", ".join(_pg_text(c, t) for c, t in columns)
        sql = f"COPY (SELECT {select} FROM {table}{' WHERE ' + where if where else ''}) TO STDOUT (FORMAT csv)"
        names = [c for c, _ in columns]
        cast = ", ".join(_duck_cast(c, t) for c, t in columns)
        duck, n = self._duck.cursor(), 0
        duck.execute("BEGIN TRANSACTION")
        try:
            if replace:
                duck.execute(f"DELETE FROM {table}")
            with conn.cursor() as cur, cur.copy(sql) as copy:
                stream = io.BufferedReader(_CopyStream(copy), buffer_size=_BLOCK)
                if stream.peek(1):
                    reader = pacsv.open_csv(
                        stream, read_options=pacsv.ReadOptions(column_names=names, block_size=_BLOCK),
                        parse_options=pacsv.ParseOptions(newlines_in_values=True),
                        convert_options=pacsv.ConvertOptions(
                            column_types={c: pa.string() for c in names}, strings_can_be_null=True,
                            quoted_strings_can_be_null=False, null_values=[""]))
                    for batch in reader:
                        duck.register("_batch", pa.Table.from_batches([batch]))
                        duck.execute(f"INSERT INTO {table} SELECT {cast} FROM _batch")
                        duck.unregister("_batch")
                        n += batch.num_rows
            duck.execute("COMMIT")
        except BaseException:
            duck.execute("ROLLBACK")
            raise
        finally:
            duck.close()
        return n


def _pg_text(column: str, duck_type: str) -> str:
    """The PostgreSQL expression whose CSV text DuckDB casts back to `duck_type`."""
    if duck_type.endswith("[]"):
        return f"to_json({column})::text"
    if duck_type == "JSON":
        return f"{column}::text"
    return column


def _duck_cast(column: str, duck_type: str) -> str:
    if duck_type.endswith("[]"):
        return f"CAST(CAST({column} AS JSON) AS {duck_type})"
    return f"CAST({column} AS {duck_type})"
