"""The operator's reads: the numbers behind the operator screen and `/api/admin/*`.

Plain functions over a `Store` returning lists of dicts (JSON-ready, and easy to turn into a
DataFrame for Gradio's plots), so the REST API and the UI show the same numbers.

Design choices:
- Analytics SQL, in DuckDB's dialect (`arg_max`, `generate_series`, list literals, `unnest`):
  these reads scan whole tables, and run on DuckDB (on a PostgreSQL store, over the in-memory
  mirror of its tables, `mirror.py`), never on the transactional path. They go through `Database.analytics`, apart from the
  aggregates' portable SQL.
- A rating is an append-only event and a user may change their mind, so every count here uses
  each user's *latest* rating of a message (`arg_max` by time: DuckDB's "latest per key").
- `feedback_prevalence` and `recent_feedback` are the mined-feedback panel's reads, here with
  the rest of the operator's SQL.
"""

from __future__ import annotations

from datetime import datetime, timedelta, timezone
from typing import TYPE_CHECKING, Any

from store.migrations import LATEST_VERSION
from store.taxonomy import CATEGORY_IDS

if TYPE_CHECKING:
    from store import Store

_LATEST_RATINGS = (
    "SELECT message_id, user_id, arg_max(value, created_at) AS value, arg_max(reasons, created_at) AS reasons, "
    "arg_max(comment, created_at) AS comment, max(created_at) AS created_at FROM ratings GROUP BY message_id, user_id"
)
_TABLES = ("users", "conversations", "messages", "generations", "ratings", "sibling_choices", "feedback_events",
           "jobs", "training_runs", "eval_results", "releases", "forgotten_users")
BUCKETS = ("hour", "day", "week")


def _iso(value: Any) -> Any:
    return value.isoformat() if isinstance(value, datetime) else value


def _bucket(bucket: str) -> str:
    if bucket not in BUCKETS:
        raise ValueError(f"bucket must be one of {', '.join(BUCKETS)}, got {bucket!r}")
    return bucket


def stats(store: Store) -> dict[str, Any]:
    """Rows per table, likes and dislikes (each user's latest rating of a message), the schema
    version and the live release."""
    counts = {t: int(store._db.analytics(f"SELECT count(*) FROM {t}")[0][0]) for t in _TABLES}
    likes, dislikes = store._db.analytics(
        f"SELECT count(*) FILTER (WHERE value = 1), count(*) FILTER (WHERE value = -1) FROM ({_LATEST_RATINGS})"
    )[0]
    live = store.releases.live()
    return {
        "path": str(store.path),
        "schema_version": store.schema_version(),
        "latest_schema_version": LATEST_VERSION,
        "rows": counts,
        "likes": int(likes),
        "dislikes": int(dislikes),
        "live_release": live.id if live else None,
    }


def overview(store: Store) -> dict:
    """`stats` plus the rating counts under the names the operator screen shows."""
    out = stats(store)
    out["rated_liked"] = out["likes"]
    out["rated_disliked"] = out["dislikes"]
    return out


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
    rows = store._db.analytics(
        f"WITH grid AS (SELECT unnest(generate_series({since}, date_trunc('{b}', now()), INTERVAL 1 {b})) AS t), "
        f"names AS (SELECT unnest(['conversations', 'turns', 'likes', 'dislikes']) AS series), "
        f"events AS (SELECT series, date_trunc('{b}', created_at) AS t FROM ({union}) WHERE created_at >= {since}) "
        f"SELECT grid.t, names.series, count(events.t) FROM grid CROSS JOIN names "
        f"LEFT JOIN events ON events.t = grid.t AND events.series = names.series "
        f"GROUP BY grid.t, names.series ORDER BY 1, 2"
    )
    return [{"time": _iso(t), "series": series, "count": int(n)} for t, series, n in rows]


def ratings_by_reason(store: Store, *, days: int = 30) -> list[dict]:
    """Rows {reason, rating (like/dislike), count}; a rating without reasons counts as '(none)'."""
    rows = store._db.analytics(
        f"SELECT CASE WHEN value = 1 THEN 'like' ELSE 'dislike' END, "
        f"unnest(CASE WHEN len(reasons) = 0 THEN ['(none)'] ELSE reasons END) AS reason, count(*) "
        f"FROM ({_LATEST_RATINGS}) WHERE value <> 0 AND created_at >= now() - INTERVAL {int(days)} DAY "
        f"GROUP BY 1, 2 ORDER BY 3 DESC"
    )
    return [{"rating": r, "reason": reason, "count": int(n)} for r, reason, n in rows]


def latest_turns(store: Store, *, limit: int = 50) -> list[dict]:
    """The newest answers with their question, steering, speed and latest rating."""
    rows = store._db.analytics(
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
        for j in store.jobs.list(limit=limit)
    ]


def releases_table(store: Store, *, limit: int = 50) -> list[dict]:
    """Releases, newest first; `forgotten_users`: how many users whose data the adapter was
    trained on have since asked to be forgotten (weights cannot be un-trained: retire it, or run
    a cycle, which trains without them)."""
    forgotten = store.privacy.forgotten_users_per_release()
    return [
        {"id": r.id, "status": r.status, "base_model": r.base_model, "adapter_path": r.adapter_path,
         "run_id": r.run_id, "created_at": _iso(r.created_at), "promoted_at": _iso(r.promoted_at),
         "retired_at": _iso(r.retired_at), "decision": r.decision, "forgotten_users": forgotten.get(r.id, 0)}
        for r in store.releases.list(limit=limit)
    ]


# --------------------------------------------------------------------------- mined feedback


def feedback_prevalence(store: Store, days: int = 30, *, extractor: str | None = None,
                        now: datetime | None = None) -> list[dict]:
    """Share of conversations with feedback, per category and day, over the last `days` days.

    One row per (day, category) for every day with user activity, categories in taxonomy order
    plus "any": {"day", "category", "conversations", "with_feedback", "share"}. A conversation
    counts on a day when a user wrote in it that day; it has feedback of a category on that day
    when an event of that category sits in one of that day's messages."""
    since = (now or datetime.now(timezone.utc)) - timedelta(days=days)
    active = dict(store._db.analytics(
        "SELECT CAST(created_at AS DATE) AS day, count(DISTINCT conversation_id) FROM messages "
        "WHERE role = 'user' AND created_at >= ? GROUP BY day", [since]))
    filter_sql, params = ("AND e.extractor = ?", [since, extractor]) if extractor else ("", [since])
    found: dict = {}
    for day, category, n in store._db.analytics(
        "SELECT CAST(m.created_at AS DATE) AS day, coalesce(e.category, 'any'), count(DISTINCT e.conversation_id) "
        "FROM feedback_events e JOIN messages m ON m.id = e.message_id "
        f"WHERE m.created_at >= ? {filter_sql} GROUP BY GROUPING SETS ((day, e.category), (day))", params
    ):
        found[(day, category)] = int(n)
    rows = []
    for day in sorted(active):
        total = int(active[day])
        for category in (*CATEGORY_IDS, "any"):
            k = found.get((day, category), 0)
            rows.append({"day": day, "category": category, "conversations": total, "with_feedback": k,
                         "share": round(k / total, 4) if total else 0.0})
    return rows


def recent_feedback(store: Store, limit: int = 50, *, category: str | None = None) -> list[dict]:
    """The newest mined events with the whole user message, for a person to check the spans
    (`message[span_start:span_end]` is the span)."""
    where, params = ("WHERE e.category = ?", [category, limit]) if category else ("", [limit])
    rows = store._db.analytics(
        "SELECT e.id, e.conversation_id, e.message_id, e.category, e.span, e.span_start, e.span_end, "
        "e.extractor, e.extractor_version, e.job_id, e.created_at, m.content "
        f"FROM feedback_events e JOIN messages m ON m.id = e.message_id {where} "
        "ORDER BY e.created_at DESC LIMIT ?", params)
    keys = ("id", "conversation_id", "message_id", "category", "span", "span_start", "span_end", "extractor",
            "extractor_version", "job_id", "created_at", "message")
    return [dict(zip(keys, r)) for r in rows]
