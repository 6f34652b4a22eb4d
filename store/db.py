"""The database under the store: one DuckDB file (the default), or a PostgreSQL server that
several service replicas share. Backend-neutral; the engines do the talking.

    Database("data/advisor.duckdb")                    # embedded, one process (duck.py)
    Database("postgresql://user@host:5432/advisor")    # shared, many processes (pg.py)

The repositories (users, conversations, events, ...) each hold this object, write SQL and hand
it to the small helpers here; they never hold a cursor or a connection. Nothing outside the
store package sees it (`Store._db`).

Design choices:
- Composition, not a class per backend: `Database` stays one class whatever the backend, and an
  engine (`DuckDBEngine`, `PostgresEngine`) implements the same dozen methods. The helpers below
  are the only way in; what differs between drivers is settled inside the engines, each in one
  place: PostgreSQL's placeholder translation (`?` → `%s`, `pg.to_pyformat`), the changed-row
  count (DuckDB answers a DML statement with a row holding it; psycopg has `cursor.rowcount`),
  bulk inserts (a registered Arrow table; `COPY`), and what "committed so far" means for
  `messages.seq` (`committed_seq`).
- Two kinds of SQL, kept apart: transactional statements (`read`, `read_one`, `execute`,
  `returning`, `executemany`, `insert_rows`), written in SQL both backends accept, `?`
  placeholders only; and analytics reads (`analytics`, `analytics_arrow`) in DuckDB's dialect.
  On DuckDB they run on the file; on PostgreSQL on an in-memory DuckDB that mirrors the tables
  a query names (`mirror.py`), never on the transactional path.
- `transaction()` yields nothing: it groups typed store calls (they run on this thread's cursor
  or connection, so they join it), and is no way in for raw SQL. Nested transactions join the
  outer one. DuckDB serialises write transactions with a lock; PostgreSQL runs them
  concurrently (row locks, READ COMMITTED).
- Schema changes are numbered migrations (`migrations.py`), applied on open, each in its own
  transaction, in the engine's dialect; on PostgreSQL under an advisory lock, so replicas
  starting together apply each migration once.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Self

from store.migrations import MIGRATIONS

Params = Sequence[Any]


def is_url(target: str | Path) -> bool:
    return isinstance(target, str) and target.startswith(("postgresql://", "postgres://"))


def open_engine(target: str | Path, **options: Any):
    """The engine for a DuckDB file path or a `postgresql://` URL (`options`: PostgreSQL's)."""
    if is_url(target):
        from store.pg import PostgresEngine

        return PostgresEngine(str(target), **options)
    from store.duck import DuckDBEngine

    return DuckDBEngine(target)


class Database:
    """One open database: the engine, transactions, the SQL helpers and migrations. The
    repositories add the typed API on top; nothing outside the store package uses this."""

    def __init__(self, target: str | Path, **options: Any):
        self._engine = open_engine(target, **options)
        self.path = self._engine.path  # a file, or the URL without its password
        self.dialect: str = self._engine.dialect
        self._migrate()

    def __enter__(self) -> Self:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        self._engine.close()

    @property
    def shared(self) -> bool:
        """True when other processes may use the same database (PostgreSQL)."""
        return self._engine.shared

    @contextmanager
    def transaction(self) -> Iterator[None]:
        """One write transaction around typed store calls; commits on success, rolls back on any
        error. Inside another transaction of this thread it joins that one."""
        with self._engine.transaction():
            yield

    def dedicated_connection(self):
        """A PostgreSQL connection of its own, outside the pool (`coordination`: a session-level
        advisory lock, LISTEN)."""
        return self._engine.dedicated_connection()

    def serial(self):
        """Context for a lone write that must commit in seq order on DuckDB (its write lock);
        nothing on PostgreSQL, where `committed_seq` copes with any commit order."""
        return self._engine.serial()

    # ---- transactional SQL (portable: both backends accept it; `?` placeholders)

    def read(self, sql: str, params: Params = ()) -> list[tuple]:
        return self._engine.read(sql, params)

    def read_one(self, sql: str, params: Params = ()) -> tuple | None:
        rows = self._engine.read(sql, params)
        return rows[0] if rows else None

    def execute(self, sql: str, params: Params = ()) -> int:
        """A write on this thread's cursor (inside the caller's transaction, if any, else in
        autocommit). Returns the rows it changed."""
        return self._engine.execute(sql, params)

    def returning(self, sql: str, params: Params = ()) -> tuple | None:
        """A write with a RETURNING clause: its first row, None when it wrote nothing."""
        return self._engine.returning(sql, params)

    def executemany(self, sql: str, rows: Sequence[Params]) -> None:
        self._engine.executemany(sql, rows)

    def insert_rows(self, table: str, columns: Sequence[str], rows: dict[str, list], *,
                     skip_conflicts: bool = False) -> int:
        """Insert many rows as one statement and return how many went in. `rows` is column-wise.
        With `skip_conflicts` a row that breaks a unique key is left out (`ON CONFLICT DO
        NOTHING`); the count is of rows actually inserted."""
        with self.transaction():
            return self._engine.insert_rows(table, columns, rows, skip_conflicts)

    def xact_lock(self, name: str) -> None:
        """Serialise this transaction with others taking the same named lock, until it ends
        (PostgreSQL: `pg_advisory_xact_lock`; DuckDB: its write lock, held already)."""
        self._engine.xact_lock(name)

    def compact(self, tables: Sequence[str] = (), *, full: bool = False) -> None:
        """Reclaim the space deleted rows held, the database's way: the DuckDB file is rewritten
        whole (`duck.DuckDBEngine.compact`); PostgreSQL VACUUMs `tables`, with `full` VACUUM FULL
        (`pg.PostgresEngine.compact`). Outside any transaction."""
        self._engine.compact(tables, full=full)

    def committed_seq(self) -> int:
        """The highest `messages.seq` below which every message that will ever commit has
        committed: the extraction's upper bound. DuckDB: the highest seq (writes are serialised).
        PostgreSQL: see `pg.Settler`."""
        return self._engine.committed_seq()

    # ---- analytics reads (DuckDB SQL: the file itself, or the mirror of a PostgreSQL store)

    def analytics(self, sql: str, params: Params | dict | None = None) -> list[tuple]:
        return self._engine.analytics(sql, params)

    def analytics_arrow(self, sql: str, params: Params | dict | None = None):
        """The same, as an Arrow table (exports write it to Parquet without a Python round trip)."""
        return self._engine.analytics_arrow(sql, params)

    # ---- schema

    def _migrate(self) -> None:
        with self.transaction(), self._engine.migration_lock():
            self.execute(
                "CREATE TABLE IF NOT EXISTS schema_version ("
                "version INTEGER PRIMARY KEY, description VARCHAR, applied_at TIMESTAMPTZ DEFAULT now())"
            )
        for migration in MIGRATIONS:
            if migration.version <= self.schema_version():
                continue
            with self.transaction(), self._engine.migration_lock():
                if migration.version <= self.schema_version():
                    continue  # another replica applied it while this one waited for the lock
                self._engine.script(migration.sql(self.dialect))
                self.execute("INSERT INTO schema_version (version, description) VALUES (?, ?)",
                              [migration.version, migration.description])

    def schema_version(self) -> int:
        row = self.read_one("SELECT coalesce(max(version), 0) FROM schema_version")
        return int(row[0]) if row else 0
