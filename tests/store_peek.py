"""Raw SQL for tests that check the store's state behind its typed API.

Not an API, and not for code outside tests: these go through the store's private helpers on
purpose, so a test can see what no typed function shows (the schema version table, leftovers
after a delete) or plant a row the API would refuse (an import that bypassed the store).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def peek(store: Any, sql: str, params: Sequence | dict | None = None) -> list[tuple]:
    """Rows of a read-only query (DuckDB SQL; `?` or `$name` parameters)."""
    return store._db.analytics(sql, params)


def poke(store: Any, sql: str, params: Sequence = ()) -> int:
    """One write on this thread's cursor: inside `store.transaction()` it joins that transaction.
    Returns the rows it changed."""
    return store._db.execute(sql, params)


def read(store: Any, sql: str, params: Sequence = ()) -> list[tuple]:
    """Rows of a query on the backend itself, not the analytics mirror (portable SQL, `?`
    parameters): the schema as PostgreSQL has it, or rows right after a write."""
    return store._db.read(sql, params)
