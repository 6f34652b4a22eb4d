"""Numbered schema migrations for the conversation store, one SQL script per dialect.

Each migration is a `Migration(version, description, duckdb=..., postgres=...)`: the same schema
change written once for the embedded DuckDB file and once for PostgreSQL (several replicas on one
server). `schema_version` records every applied version; a store opens by applying
the missing ones in order, each in its own transaction, so a crash during an upgrade leaves the
previous version intact. Append new migrations; never edit a released one.

Adding one: write its `VN` script in `sql_duckdb.py` and in `sql_postgres.py`, and append
`Migration(N, "what", duckdb=sql_duckdb.VN, postgres=sql_postgres.VN)` below. The PostgreSQL
script must keep the same tables, columns and meanings (types: VARCHAR → text, TINYINT →
smallint, DOUBLE → double precision, JSON → jsonb, VARCHAR[] → text[]), and call
`track_changes("new_table", ...)` for every new table (see "the analytics mirror" below).

Design choices:
- Text ids (uuid4 hex) rather than sequences: log shards written by several replicas merge without
  renumbering. `messages.seq` is a per-database sequence used only as the extraction watermark;
  writes are serialised in-process, so seq order is commit order.
- No foreign keys: DuckDB enforces them eagerly enough to make deletes order-sensitive and updates
  costly; the store's API keeps references consistent inside transactions instead.
- Since v2 an answer's generation metadata (release, backend, attribute values, sampling parameters,
  latency, token counts) is one JSON column on its own `messages` row, and `generations` is a view
  that gives it back as typed columns, so training-set queries and the operator's plots still filter
  and group on them. Why: the answer is written after its last token, on the turn's critical path,
  and a one-row DuckDB insert costs about 35 µs per column plus a statement's overhead. v1's two
  inserts (8 + 22 columns) cost ≈ 2.5 ms; one insert of 9 columns ≈ 1 ms. Reads pay instead: the
  view parses the JSON (≈ 40 ms per 100k answers).

PostgreSQL specifics:
- `messages.seq` is NOT commit-ordered there: concurrent writers (threads, replicas) take values
  from the sequence and commit in any order. Its default is `next_message_seq()`, which assigns
  the transaction's id *before* taking the value, so every seq belongs to a transaction that
  already shows as in progress in any snapshot taken after the value was handed out. The store
  (`store/pg.py`, `settle`) uses that to find the highest seq below which nothing can
  still commit: read the sequence, then the snapshot, and wait for the transactions it lists.
- The analytics mirror (`store/mirror.py`) copies tables into an in-memory DuckDB and
  must know when one changed: `track_changes` gives each table a change counter (a sequence
  bumped by a statement-level trigger; sequences never block writers). `messages` counts only
  updates and deletes: its inserts are followed by `seq` itself, so the chat path pays no trigger.
"""

from __future__ import annotations

from dataclasses import dataclass

from store import sql_duckdb, sql_postgres


@dataclass(frozen=True)
class Migration:
    version: int
    description: str
    duckdb: str
    postgres: str

    def sql(self, dialect: str) -> str:
        return {"duckdb": self.duckdb, "postgres": self.postgres}[dialect]


MIGRATIONS: list[Migration] = [
    Migration(1, "initial schema", duckdb=sql_duckdb.V1, postgres=sql_postgres.V1),
    Migration(2, "generation metadata on the answer's message row (one insert per answer)",
              duckdb=sql_duckdb.V2, postgres=sql_postgres.V2),
    Migration(3, "people's data and chat UX: consent, server-side sessions, log-in attempts, audit log, who a run trained on, withdrawn ratings, canary releases",
              duckdb=sql_duckdb.V3, postgres=sql_postgres.V3),
    Migration(4, "operators audit mined feedback: event reviews", duckdb=sql_duckdb.V4, postgres=sql_postgres.V4),
    Migration(5, "crash recovery: a running job's owner and heartbeat (its lease)",
              duckdb=sql_duckdb.V5, postgres=sql_postgres.V5),
    Migration(6, "people's data: consent history, records of exports written to files",
              duckdb=sql_duckdb.V6, postgres=sql_postgres.V6),
    Migration(7, "operators mark the safety guard's refusals right or wrong: safety marks",
              duckdb=sql_duckdb.V7, postgres=sql_postgres.V7),
]

LATEST_VERSION = MIGRATIONS[-1].version
