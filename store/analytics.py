"""The pipelines' reads: extraction windows, training-set material, exports, the trainer's trigger.

Named, typed functions over a `Store` for the jobs that scan the log in bulk, as opposed to the
aggregates' point reads and writes on the turn path.

Design choices:
- Analytics SQL, through `Database.analytics`: these reads run on DuckDB, on PostgreSQL stores over the
  in-memory mirror of its tables (`mirror.py`), so they may use DuckDB's dialect (`$name` parameters, `unnest`,
  `arg_max`, struct and list literals). `arg_max(x, created_at)` is DuckDB's "latest per key".
- Rows come back as named tuples: a caller unpacks them as tuples, or reads them by name.
- Training-set reads leave out every row of a user who asked to be forgotten, even one that got
  back in around the store's API (an import): the builders must never see them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

from store.attributes import NAMES as ATTRIBUTE_NAMES
from store.attributes import Attributes

if TYPE_CHECKING:
    import pyarrow as pa

    from store import Store


# --------------------------------------------------------------------------- extraction


class UserTurn(NamedTuple):
    """A user message past a watermark, with what it may be feedback on: the answer it replied to
    and the question that answer replied to (None when the message follows no answer)."""

    id: str
    conversation_id: str
    seq: int
    content: str
    answer_id: str | None
    answer: str | None
    previous: str | None


_USER_TURNS_SQL = """
WITH u AS (
    SELECT id, conversation_id, parent_id, content, seq FROM messages
    WHERE role = 'user' AND seq > ? AND seq <= ?
    ORDER BY seq LIMIT ?
)
SELECT u.id, u.conversation_id, u.seq, u.content, a.id, a.content, p.content
FROM u
LEFT JOIN messages a ON a.id = u.parent_id AND a.role = 'assistant' AND a.status <> 'error'
LEFT JOIN messages p ON p.id = a.parent_id AND p.role = 'user'
ORDER BY u.seq
"""


def user_turns_after(store: Store, after: int, upto: int, limit: int) -> list[UserTurn]:
    """Up to `limit` user messages with `after < seq <= upto`, in seq order (keyset pagination),
    each on its own branch of the tree: an errored answer is no answer."""
    return [UserTurn(*r) for r in store._db.analytics(_USER_TURNS_SQL, [after, upto, limit])]


def branch_histories(store: Store, message_ids: Sequence[str]) -> dict[str, tuple[tuple[str, str], ...]]:
    """For each message, the (role, content) of every message before it on its own branch of the
    tree, root first: what an extractor that reads whole conversations is shown. System messages
    and errored answers are left out (an errored answer is no answer)."""
    if not message_ids:
        return {}
    rows = store._db.analytics(
        "SELECT id, parent_id, role, content, status FROM messages WHERE conversation_id IN "
        "(SELECT conversation_id FROM messages WHERE list_contains(?, id))", [list(message_ids)])
    by_id = {r[0]: r for r in rows}
    out: dict[str, tuple[tuple[str, str], ...]] = {}
    for message_id in message_ids:
        chain: list[tuple[str, str]] = []
        row = by_id.get(message_id)
        seen = {message_id}
        while row is not None and row[1] is not None and row[1] not in seen:  # a cycle would be a bug: stop
            seen.add(row[1])
            row = by_id.get(row[1])
            if row is not None and row[2] in ("user", "assistant") and row[4] != "error":
                chain.append((row[2], row[3]))
        out[message_id] = tuple(reversed(chain))
    return out


# --------------------------------------------------------------------------- training sets


class TrainingMessage(NamedTuple):
    conversation_id: str
    id: str
    parent_id: str | None
    role: str
    content: str
    status: str
    seq: int
    attributes: Attributes | None  # the steering an answer was generated with; None for questions
    # The safety guard wrote this answer (it refused the request or replaced the model's answer): its
    # text is the guard's refusal, not the model's behaviour.
    guard_written: bool = False


class KeptSibling(NamedTuple):
    conversation_id: str
    parent_id: str | None
    message_id: str


class MinedFeedback(NamedTuple):
    conversation_id: str
    target_message_id: str
    category: str
    message_id: str  # the user message holding the span


@dataclass(frozen=True)
class TrainingRows:
    """Everything a training-set build reads about a chunk of conversations."""

    messages: list[TrainingMessage]  # in seq order
    ratings: dict[str, int]  # message id → the latest rating (any user's latest row)
    kept: list[KeptSibling]  # per fork, the latest choice
    feedback: list[MinedFeedback]  # distinct


class TrainingConversations(NamedTuple):
    """The conversations a training set may use, their owners, and how many were left out why."""

    ids: list[str]
    user_of: dict[str, str]
    excluded: dict[str, int]  # forgotten_user_conversations | opted_out_conversations


def training_conversation_ids(store: Store, *, consent_default: bool = True) -> TrainingConversations:
    """Every conversation whose user is not forgotten and lets their conversations train the
    advisor (their own setting, else `consent_default`), in creation order."""
    rows = store._db.analytics(
        "SELECT c.id, c.user_id, f.user_id IS NOT NULL, coalesce(u.training_consent, ?) FROM conversations c "
        "LEFT JOIN forgotten_users f ON f.user_id = c.user_id LEFT JOIN users u ON u.id = c.user_id "
        "ORDER BY c.created_at, c.id", [consent_default])
    keep = [(cid, uid) for cid, uid, forgotten, consent in rows if not forgotten and consent]
    excluded = {"forgotten_user_conversations": sum(1 for r in rows if r[2]),
                "opted_out_conversations": sum(1 for r in rows if not r[2] and not r[3])}
    return TrainingConversations([cid for cid, _ in keep], dict(keep), excluded)


def training_rows(store: Store, conversation_ids: Sequence[str]) -> TrainingRows:
    """The messages, latest ratings, kept siblings and mined feedback of these conversations."""
    ids = {"ids": list(conversation_ids)}
    attr_cols = ", ".join(f"g.{n}" for n in ATTRIBUTE_NAMES)
    msgs = store._db.analytics(
        f"SELECT m.conversation_id, m.id, m.parent_id, m.role, m.content, m.status, m.seq, "
        f"coalesce(json_extract_string(m.generation, '$.safety.verdict') IN ('refused', 'replaced'), false), "
        f"g.message_id IS NOT NULL, {attr_cols} FROM messages m "
        "LEFT JOIN generations g ON g.message_id = m.id "
        "WHERE m.conversation_id IN (SELECT unnest($ids)) ORDER BY m.seq", ids)
    ratings = store._db.analytics(
        "SELECT r.message_id, arg_max(r.value, r.created_at) FROM ratings r "
        "JOIN messages m ON m.id = r.message_id "
        "WHERE m.conversation_id IN (SELECT unnest($ids)) "
        "AND r.user_id NOT IN (SELECT user_id FROM forgotten_users) GROUP BY r.message_id", ids)
    kept = store._db.analytics(
        "SELECT m.conversation_id, s.parent_id, arg_max(s.message_id, s.created_at) FROM sibling_choices s "
        "JOIN messages m ON m.id = s.message_id WHERE m.conversation_id IN (SELECT unnest($ids)) "
        "AND s.user_id NOT IN (SELECT user_id FROM forgotten_users) GROUP BY m.conversation_id, s.parent_id", ids)
    feedback = store._db.analytics(
        "SELECT DISTINCT conversation_id, target_message_id, category, message_id FROM feedback_events "
        "WHERE conversation_id IN (SELECT unnest($ids))", ids)
    messages = [
        TrainingMessage(cid, mid, parent, role, content, status, seq,
                        Attributes(**dict(zip(ATTRIBUTE_NAMES, map(int, attrs)))) if has_gen else None,
                        bool(guard_written))
        for cid, mid, parent, role, content, status, seq, guard_written, has_gen, *attrs in msgs
    ]
    return TrainingRows(messages, {mid: int(v) for mid, v in ratings},
                        [KeptSibling(*r) for r in kept], [MinedFeedback(*r) for r in feedback])


def feedback_count_since(store: Store, since: datetime | None) -> int:
    """Explicit and mined feedback (ratings, sibling choices, feedback events) created after
    `since`, or ever when None: what decides whether another training run is worth it."""
    where, params = ("", []) if since is None else (" WHERE created_at > ?", [since])
    return sum(int(store._db.analytics(f"SELECT count(*) FROM {table}{where}", params)[0][0])
               for table in ("ratings", "feedback_events", "sibling_choices"))


# --------------------------------------------------------------------------- exports

_EXPORT_SQL = """
SELECT c.user_id, m.conversation_id, c.title, m.id AS message_id, m.parent_id, m.role, m.content,
       m.status, m.seq, m.created_at, g.release_id, g.backend, g.model, g.adapter, g.steering,
       g.helpfulness, g.correctness, g.coherence, g.complexity, g.verbosity, g.temperature, g.top_p,
       g.max_new_tokens, g.seed, g.latency_ms, g.first_token_ms, g.prompt_tokens,
       g.completion_tokens, g.finish_reason,
       (SELECT list({'value': r.value, 'reasons': r.reasons, 'comment': r.comment})
          FROM ratings r WHERE r.message_id = m.id) AS ratings
FROM messages m
JOIN conversations c ON c.id = m.conversation_id
LEFT JOIN generations g ON g.message_id = m.id
ORDER BY m.conversation_id, m.seq
"""


def messages_table(store: Store) -> pa.Table:
    """One flat row per message (its conversation's user and title, the answer's generation
    metadata, its ratings as a list), as an Arrow table: the Parquet export writes it as is."""
    return store._db.analytics_arrow(_EXPORT_SQL)


def extractor_versions(store: Store, *, conversations: Sequence[str] = (), answers: Sequence[str] = ()) -> dict[str, int]:
    """How many mined feedback events, by the extractor and version that found them
    (`"<extractor> <extractor_version>"`), lie in these conversations or react to these answers:
    what a training set or a canary's rates were made of, so a precision estimate for that version
    (the review panel's) can be set beside them."""
    if not conversations and not answers:
        return {}
    rows = store._db.analytics(
        "SELECT extractor, coalesce(extractor_version, ''), count(*) FROM feedback_events "
        "WHERE conversation_id IN (SELECT unnest($conversations)) OR target_message_id IN (SELECT unnest($answers)) "
        "GROUP BY 1, 2 ORDER BY 1, 2", {"conversations": list(conversations), "answers": list(answers)})
    return {f"{extractor} {version}".strip(): int(n) for extractor, version, n in rows}
