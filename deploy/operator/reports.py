"""Operator reports: the queries behind the operator tab and `/api/admin/*`.

Plain functions over a `Store` returning lists of dicts (JSON-ready, and easy to turn into a
DataFrame for Gradio's plots), so the REST API and the UI show the same numbers.

A rating is an append-only event and a user may change their mind, so every count here uses
each user's *latest* rating of a message.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from feedback.store import Store

_LATEST_RATINGS = (
    "SELECT message_id, user_id, arg_max(value, created_at) AS value, arg_max(reasons, created_at) AS reasons, "
    "arg_max(comment, created_at) AS comment, max(created_at) AS created_at FROM ratings GROUP BY message_id, user_id"
)
BUCKETS = ("hour", "day", "week")


def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def _bucket(bucket: str) -> str:
    if bucket not in BUCKETS:
        raise ValueError(f"bucket must be one of {', '.join(BUCKETS)}, got {bucket!r}")
    return bucket


def counts_over_time(store: Store, *, days: int = 30, bucket: str = "day") -> list[dict]:
    """Rows {time, series, count} for series conversations, turns, likes, dislikes: one row per
    bucket of the window and series, zeros included, so a young service still draws a line."""
    b = _bucket(bucket)
    since = f"date_trunc('{b}', now() - INTERVAL {int(days)} DAY)"
    sources = {
        "conversations": "SELECT created_at FROM conversations",
        "turns": "SELECT created_at FROM messages WHERE role = 'assistant'",
        "likes": f"SELECT created_at FROM ({_LATEST_RATINGS}) WHERE value = 1",
        "dislikes": f"SELECT created_at FROM ({_LATEST_RATINGS}) WHERE value = -1",
    }
    union = " UNION ALL ".join(f"SELECT '{name}' AS series, created_at FROM ({sql})" for name, sql in sources.items())
    rows = store.query(
        f"WITH grid AS (SELECT unnest(generate_series({since}, date_trunc('{b}', now()), INTERVAL 1 {b})) AS t), "
        f"names AS (SELECT unnest(['conversations', 'turns', 'likes', 'dislikes']) AS series), "
        f"events AS (SELECT series, date_trunc('{b}', created_at) AS t FROM ({union}) WHERE created_at >= {since}) "
        f"SELECT grid.t, names.series, count(events.t) FROM grid CROSS JOIN names "
        f"LEFT JOIN events ON events.t = grid.t AND events.series = names.series "
        f"GROUP BY ALL ORDER BY 1, 2"
    )
    return [{"time": _iso(t), "series": series, "count": int(n)} for t, series, n in rows]


def ratings_by_reason(store: Store, *, days: int = 30) -> list[dict]:
    """Rows {reason, rating (like/dislike), count}; a rating without reasons counts as '(none)'."""
    rows = store.query(
        f"SELECT CASE WHEN value = 1 THEN 'like' ELSE 'dislike' END, "
        f"unnest(CASE WHEN len(reasons) = 0 THEN ['(none)'] ELSE reasons END) AS reason, count(*) "
        f"FROM ({_LATEST_RATINGS}) WHERE created_at >= now() - INTERVAL {int(days)} DAY GROUP BY 1, 2 ORDER BY 3 DESC"
    )
    return [{"rating": r, "reason": reason, "count": int(n)} for r, reason, n in rows]


def latest_turns(store: Store, *, limit: int = 50) -> list[dict]:
    """The newest answers with their question, steering, speed and latest rating."""
    rows = store.query(
        "SELECT a.id, a.created_at, c.user_id, c.source, q.content, a.content, a.status, "
        "g.verbosity, g.complexity, g.model, g.release_id, g.latency_ms, g.completion_tokens, "
        "lr.value, lr.reasons, lr.comment "
        "FROM messages a JOIN conversations c ON c.id = a.conversation_id "
        "LEFT JOIN messages q ON q.id = a.parent_id "
        "LEFT JOIN generations g ON g.message_id = a.id "
        "LEFT JOIN (SELECT message_id, arg_max(value, created_at) AS value, arg_max(reasons, created_at) AS reasons, "
        "  arg_max(comment, created_at) AS comment FROM ratings GROUP BY message_id) lr ON lr.message_id = a.id "
        "WHERE a.role = 'assistant' ORDER BY a.seq DESC LIMIT ?",
        [int(limit)],
    )
    keys = ("message_id", "time", "user", "source", "question", "answer", "status", "verbosity", "complexity",
            "model", "release", "latency_ms", "tokens", "rating", "reasons", "comment")
    out = []
    for row in rows:
        d = dict(zip(keys, row))
        d["time"] = _iso(d["time"])
        d["user"] = (d["user"] or "")[:10]
        d["reasons"] = list(d["reasons"] or [])
        d["latency_ms"] = round(d["latency_ms"], 1) if d["latency_ms"] is not None else None
        out.append(d)
    return out


def jobs_table(store: Store, *, limit: int = 50) -> list[dict]:
    return [
        {"id": j.id, "kind": j.kind, "trigger": j.trigger, "status": j.status, "created_at": _iso(j.created_at),
         "started_at": _iso(j.started_at), "finished_at": _iso(j.finished_at), "error": j.error,
         "result": j.result, "params": j.params, "parent_id": j.parent_id}
        for j in store.list_jobs(limit=limit)
    ]


def releases_table(store: Store, *, limit: int = 50) -> list[dict]:
    return [
        {"id": r.id, "status": r.status, "base_model": r.base_model, "adapter_path": r.adapter_path,
         "run_id": r.run_id, "created_at": _iso(r.created_at), "promoted_at": _iso(r.promoted_at),
         "retired_at": _iso(r.retired_at), "decision": r.decision}
        for r in store.list_releases(limit=limit)
    ]


def overview(store: Store) -> dict:
    """store.stats() plus the rating counts that count each user's latest rating once."""
    stats = store.stats()
    likes, dislikes = store.query(
        f"SELECT count(*) FILTER (value = 1), count(*) FILTER (value = -1) FROM ({_LATEST_RATINGS})"
    )[0]
    stats["rated_liked"] = int(likes)
    stats["rated_disliked"] = int(dislikes)
    return stats
