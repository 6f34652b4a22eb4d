"""Export conversations: for the operator's analysis, for sharing outside the service, and for a
person who asks for their own data.

JSON lines: one conversation per line, its whole message tree (parent ids kept, so regenerated and
edited branches survive), each answer with its generation metadata and explicit ratings.
Parquet: one flat row per message, written by DuckDB itself (columnar, no Python round trip).

An export marked for sharing (`sharing=SharingRules(...)`) leaves out the conversations of users
who did not let their data be used (their setting, else the deployment default) and replaces
personal data in every text (titles, messages, rating comments) by typed placeholders. A user's
own export (`user_export`) is theirs as they wrote it: nothing redacted.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from feedback.store import Store
from feedback.store.analytics import messages_table


def export_parquet(store: Store, out: Path) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    table = messages_table(store)
    import pyarrow.parquet as pq

    pq.write_table(table, out)
    return table.num_rows


@dataclass(frozen=True)
class SharingRules:
    consent_default: bool = True
    redactor: Any = None  # feedback.pii.Redactor (anything with `redact(text).text`); None: no redaction


def _record(store: Store, conv, sharing: SharingRules | None) -> dict:
    clean = (lambda s: sharing.redactor.redact(s).text if s else s) if sharing and sharing.redactor else (lambda s: s)
    messages = []
    for m in store.get_messages(conv.id):
        record = {k: v for k, v in asdict(m).items() if k != "generation"}
        record["content"] = clean(m.content)
        if m.generation is not None:
            gen = asdict(m.generation)
            gen["attributes"] = m.generation.attributes.as_dict()
            record["generation"] = gen
            record["ratings"] = [
                {"value": r.value, "reasons": list(r.reasons), "comment": clean(r.comment), "at": r.created_at}
                for r in store.ratings(m.id)
            ]
        messages.append(record)
    return {"id": conv.id, "user_id": conv.user_id, "title": clean(conv.title), "source": conv.source,
            "created_at": conv.created_at, "updated_at": conv.updated_at, "messages": messages}


def iter_conversation_records(store: Store, *, chunk: int = 500, sharing: SharingRules | None = None):
    """Yield one dict per conversation, reading the store a chunk of conversations at a time."""
    offset, consent = 0, {}
    while True:
        convs = store.all_conversations(limit=chunk, offset=offset)
        if not convs:
            return
        for conv in convs:
            if sharing is not None:
                if conv.user_id not in consent:
                    own = store.training_consent(conv.user_id)
                    consent[conv.user_id] = sharing.consent_default if own is None else own
                if not consent[conv.user_id]:
                    continue
            yield _record(store, conv, sharing)
        offset += chunk


def user_export(store: Store, user_id: str, *, settings: dict | None = None) -> dict:
    """Everything the store holds about one user, as they wrote it: their conversations (every
    branch), answers with generation metadata, their ratings, and their settings."""
    convs, page, before = [], 200, None
    while True:
        batch = store.list_conversations(user_id, limit=page, before=before)
        convs += batch
        if len(batch) < page:
            break
        before = batch[-1].updated_at
    return {"user_id": user_id, "settings": settings or {},
            "conversations": [_record(store, c, None) for c in convs]}


def export_jsonl(store: Store, out: Path, *, sharing: SharingRules | None = None) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with out.open("w", encoding="utf-8") as fh:
        for record in iter_conversation_records(store, sharing=sharing):
            fh.write(json.dumps(record, default=str, ensure_ascii=False) + "\n")
            n += 1
    return n
