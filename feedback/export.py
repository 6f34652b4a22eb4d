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
from feedback.store.analytics import messages_table


def export_parquet(store: Store, out: Path) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    table = messages_table(store)
    import pyarrow.parquet as pq

    pq.write_table(table, out)
    return table.num_rows


def iter_conversation_records(store: Store, *, chunk: int = 500):
    """Yield one dict per conversation, reading the store a chunk of conversations at a time."""
    offset = 0
    while True:
        convs = store.all_conversations(limit=chunk, offset=offset)
        if not convs:
            return
        for conv in convs:
            messages = []
            for m in store.get_messages(conv.id):
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
            yield {"id": conv.id, "user_id": conv.user_id, "title": conv.title, "source": conv.source,
                   "created_at": conv.created_at, "updated_at": conv.updated_at, "messages": messages}
        offset += chunk


def export_jsonl(store: Store, out: Path) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with out.open("w", encoding="utf-8") as fh:
        for record in iter_conversation_records(store):
            fh.write(json.dumps(record, default=str, ensure_ascii=False) + "\n")
            n += 1
    return n
