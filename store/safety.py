"""The safety guard's decisions as the operators see them, and their marks on them.

Every answer records the guard's decision in its generation metadata (`generation.safety`:
verdict allowed | refused | replaced, the deciding score, the judge's version; for a replaced
answer the model's withdrawn text as `model_answer`). Operators mark a refusal (or a replacement)
"wrong" — the guard should have let it through — or "right"; the marks, with the decisions,
are the labelled safety data a judge is measured and retrained on.

Design choices:
- Marks are append-only, like ratings and reviews: a second mark is a new row, the latest counts,
  and the history stays for the audit. The operator is the audit actor (`deploy.audit.actor_of`).
- Only an answer the guard wrote (refused or replaced) can be marked: "wrong" means "should have
  been answered", which says nothing about an answer the guard let through.
- The write is portable SQL (`SafetyMarks.mark`); the reads parse the generation JSON, so they
  are analytics SQL in DuckDB's dialect (`json_extract_string`), like `store.outcomes`.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

from store.conversations import Conversations
from store.db import Database
from store.records import InvalidInput, NotFound, new_id

if TYPE_CHECKING:
    from store import Store

MARK_LABELS = ("wrong", "right")
GUARD_WRITTEN = ("refused", "replaced")


@dataclass(frozen=True)
class SafetyMark:
    id: str
    message_id: str
    operator: str
    label: str
    created_at: datetime | None = None

    def as_dict(self) -> dict[str, Any]:
        return {"id": self.id, "message_id": self.message_id, "operator": self.operator, "label": self.label,
                "created_at": self.created_at.isoformat() if self.created_at else None}


class SafetyMarks:
    """Operators' marks on the guard's refusals and replacements."""

    def __init__(self, db: Database, conversations: Conversations):
        self._db, self._conversations = db, conversations

    def mark(self, message_id: str, operator: str, label: str) -> SafetyMark:
        """Record an operator's mark on an answer the guard refused or replaced."""
        if label not in MARK_LABELS:
            raise InvalidInput(f"a mark is one of {', '.join(MARK_LABELS)}, got {label!r}")
        if not operator:
            raise InvalidInput("a mark needs an operator")
        mark_id = new_id()
        with self._db.transaction():
            message = self._conversations.get_message(message_id)  # NotFound for an unknown id
            safety = message.generation.safety if message.generation is not None else None
            if message.role != "assistant" or not safety or safety.get("verdict") not in GUARD_WRITTEN:
                raise InvalidInput("Only an answer the safety guard refused or replaced can be marked.")
            self._db.execute("INSERT INTO safety_marks (id, message_id, operator, label) VALUES (?, ?, ?, ?)",
                             [mark_id, message_id, operator, label])
        return self.marks(message_id)[-1]

    def marks(self, message_id: str) -> list[SafetyMark]:
        """Every mark on an answer, oldest first (the last one counts)."""
        rows = self._db.read("SELECT id, message_id, operator, label, created_at FROM safety_marks "
                             "WHERE message_id = ? ORDER BY created_at, id", [message_id])
        if not rows and self._db.read_one("SELECT id FROM messages WHERE id = ?", [message_id]) is None:
            raise NotFound(f"No message {message_id!r}.")
        return [SafetyMark(*r) for r in rows]


# --------------------------------------------------------------------------- reads (analytics SQL)

_DECISIONS = """
WITH d AS (
    SELECT a.id, a.created_at, a.content, q.content AS request,
           json_extract_string(a.generation, '$.safety.verdict') AS verdict,
           TRY_CAST(json_extract_string(a.generation, '$.safety.score') AS DOUBLE) AS score,
           json_extract_string(a.generation, '$.safety.judge') AS judge,
           json_extract_string(a.generation, '$.safety.model_answer') AS model_answer
    FROM messages a LEFT JOIN messages q ON q.id = a.parent_id
    WHERE a.role = 'assistant' AND a.generation IS NOT NULL
), marks AS (
    SELECT message_id, arg_max(label, created_at) AS label, arg_max(operator, created_at) AS operator,
           max(created_at) AS marked_at
    FROM safety_marks GROUP BY message_id
)
SELECT d.id, d.created_at, d.request, d.content, d.model_answer, d.verdict, d.score, d.judge,
       marks.label, marks.operator, marks.marked_at
FROM d LEFT JOIN marks ON marks.message_id = d.id
WHERE d.verdict IN ({verdicts}) {extra}
ORDER BY d.created_at DESC, d.id
"""
_DECISION_KEYS = ("message_id", "time", "request", "shown", "model_answer", "verdict", "score", "judge",
                  "operator_label", "operator", "marked_at")


def guard_decisions(store: Store, *, verdicts: tuple[str, ...] = GUARD_WRITTEN, marked_only: bool = False,
                    limit: int | None = None) -> list[dict[str, Any]]:
    """The guard's decisions, newest first: the request, what the user was shown, the model's
    withdrawn text (replaced answers), verdict, score, judge, and the latest operator mark."""
    bad = [v for v in verdicts if v not in ("allowed", *GUARD_WRITTEN)]
    if bad or not verdicts:
        raise ValueError(f"verdicts must be among allowed, refused, replaced; got {list(verdicts)}")
    sql = _DECISIONS.format(verdicts=", ".join("?" for _ in verdicts),
                            extra="AND marks.label IS NOT NULL" if marked_only else "")
    params: list[Any] = list(verdicts)
    if limit is not None:
        sql += " LIMIT ?"
        params.append(int(limit))
    return [dict(zip(_DECISION_KEYS, row)) for row in store._db.analytics(sql, params)]


def labelled_safety_rows(store: Store, *, marked_only: bool = False) -> list[dict[str, Any]]:
    """Labelled safety data: {request, answer, verdict, score, judge, operator_label} per refused or
    replaced answer (`answer` is the model's text the guard withdrew; None when the model was never
    asked), plus the answer's id and time. `operator_label` is the latest mark, or None."""
    return [{"message_id": d["message_id"], "time": d["time"].isoformat() if d["time"] else None,
             "request": d["request"], "answer": d["model_answer"], "verdict": d["verdict"], "score": d["score"],
             "judge": d["judge"], "operator_label": d["operator_label"]}
            for d in guard_decisions(store, marked_only=marked_only)]


def refusal_rate(store: Store, *, days: int = 30) -> list[dict[str, Any]]:
    """Per day of the window (zeros included): answers the guard judged, how many it refused and
    replaced, and the share it wrote (refused + replaced over judged)."""
    since = f"date_trunc('day', now() - INTERVAL {int(days)} DAY)"
    rows = store._db.analytics(
        f"WITH grid AS (SELECT unnest(generate_series({since}, date_trunc('day', now()), INTERVAL 1 DAY)) AS t), "
        "v AS (SELECT date_trunc('day', created_at) AS t, json_extract_string(generation, '$.safety.verdict') AS verdict "
        f"  FROM messages WHERE role = 'assistant' AND generation IS NOT NULL AND created_at >= {since}) "
        "SELECT grid.t, count(v.verdict), count(*) FILTER (WHERE v.verdict = 'refused'), "
        "count(*) FILTER (WHERE v.verdict = 'replaced') "
        "FROM grid LEFT JOIN v ON v.t = grid.t GROUP BY grid.t ORDER BY grid.t")
    return [{"day": t.isoformat() if isinstance(t, datetime) else t, "judged": int(n), "refused": int(r),
             "replaced": int(p), "rate": (r + p) / n if n else None} for t, n, r, p in rows]
