"""Per-answer outcomes for the canary's online judgement: what each answer of a release got.

One row per complete answer of the given releases since a time: who got it (user, conversation),
which release and arm served it (`generation.release_id`, `generation.arm`), and what followed:
an explicit like or dislike, mined natural feedback on it (positive; rephrase; correction = a
make-aware turn, with or without the correction), and whether the user carried on talking (a
user message whose parent is this answer).

Design choices:
- Analytics SQL (DuckDB dialect, `Database.analytics`), like the pipelines' reads: the canary check scans
  a window of answers in bulk. The arm is read from the generation JSON (no schema change: the
  `generations` view predates it).
- Mined feedback is counted by its `target_message_id`, the answer a feedback span refers to, so
  an extractor's choice of span does not matter, only that it found feedback on that answer.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, NamedTuple

from store.taxonomy import AWARE_WITH_CORRECTION, AWARE_WITHOUT_CORRECTION, POSITIVE, REPEAT_REPHRASE

if TYPE_CHECKING:
    from store import Store


class AnswerOutcome(NamedTuple):
    id: str
    user_id: str
    conversation_id: str
    release_id: str | None
    arm: str | None
    liked: bool
    disliked: bool
    positive: bool
    rephrase: bool
    correction: bool
    continued: bool


_OUTCOMES_SQL = """
WITH a AS (
    SELECT m.id, c.user_id, m.conversation_id,
           json_extract_string(m.generation, '$.release_id') AS release_id,
           json_extract_string(m.generation, '$.arm') AS arm
    FROM messages m JOIN conversations c ON c.id = m.conversation_id
    WHERE m.role = 'assistant' AND m.status = 'complete' AND m.generation IS NOT NULL AND m.created_at >= ?
)
SELECT a.id, a.user_id, a.conversation_id, a.release_id, a.arm,
       EXISTS (SELECT 1 FROM ratings r WHERE r.message_id = a.id AND r.value = 1),
       EXISTS (SELECT 1 FROM ratings r WHERE r.message_id = a.id AND r.value = -1),
       EXISTS (SELECT 1 FROM feedback_events f WHERE f.target_message_id = a.id AND f.category = ?),
       EXISTS (SELECT 1 FROM feedback_events f WHERE f.target_message_id = a.id AND f.category = ?),
       EXISTS (SELECT 1 FROM feedback_events f WHERE f.target_message_id = a.id AND f.category IN (?, ?)),
       EXISTS (SELECT 1 FROM messages u WHERE u.parent_id = a.id AND u.role = 'user')
FROM a WHERE a.release_id IN ({ids})
ORDER BY a.id
"""


def answer_outcomes(store: Store, release_ids: Sequence[str], since: datetime) -> list[AnswerOutcome]:
    """Outcomes of every complete answer of `release_ids` created at or after `since`."""
    if not release_ids:
        return []
    sql = _OUTCOMES_SQL.format(ids=", ".join("?" for _ in release_ids))
    params = [since, POSITIVE, REPEAT_REPHRASE, AWARE_WITH_CORRECTION, AWARE_WITHOUT_CORRECTION, *release_ids]
    return [AnswerOutcome(*(bool(v) if i >= 5 else v for i, v in enumerate(row)))
            for row in store._db.analytics(sql, params)]
