"""Export conversations for analysis and for sharing outside the service.

JSON lines: one conversation per line, its whole message tree (parent ids kept, so regenerated and
edited branches survive), each answer with its generation metadata and explicit ratings.
Parquet: one flat row per message, written by DuckDB itself (columnar, no Python round trip).
"""

from __future__ import annotations

import json
from dataclasses import asdict
from pathlib import Path

from feedback.store import Store

_PARQUET_SQL = """
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


def export_parquet(store: Store, out: Path) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    table = store.query_df(_PARQUET_SQL)
    import pyarrow.parquet as pq

    pq.write_table(table, out)
    return table.num_rows


def iter_conversation_records(store: Store, *, chunk: int = 500):
    """Yield one dict per conversation, reading the store a chunk of conversations at a time."""
    offset = 0
    while True:
        convs = store.query(
            "SELECT id, user_id, title, source, created_at, updated_at FROM conversations "
            "ORDER BY created_at, id LIMIT ? OFFSET ?",
            [chunk, offset],
        )
        if not convs:
            return
        for conv_id, user_id, title, source, created, updated in convs:
            messages = []
            for m in store.get_messages(conv_id):
                record = {k: v for k, v in asdict(m).items() if k != "generation"}
                if m.generation is not None:
                    gen = asdict(m.generation)
                    gen["attributes"] = m.generation.attributes.as_dict()
                    record["generation"] = gen
                    record["ratings"] = [
                        {"value": r.value, "reasons": list(r.reasons), "comment": r.comment}
                        for r in store.ratings(m.id)
                    ]
                messages.append(record)
            yield {"id": conv_id, "user_id": user_id, "title": title, "source": source,
                   "created_at": created, "updated_at": updated, "messages": messages}
        offset += chunk


def export_jsonl(store: Store, out: Path) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with out.open("w", encoding="utf-8") as fh:
        for record in iter_conversation_records(store):
            fh.write(json.dumps(record, default=str, ensure_ascii=False) + "\n")
            n += 1
    return n
