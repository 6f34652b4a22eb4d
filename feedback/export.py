"""Export conversations: for the operator's analysis, for sharing outside the service, and for a
person who asks for their own data.

JSON lines: one conversation per line, its whole message tree (parent ids kept, so regenerated and
edited branches survive), each answer with its generation metadata and explicit ratings.
Parquet: one flat row per message, written by DuckDB itself (columnar, no Python round trip).

An export marked for sharing (`sharing=SharingRules(...)`) leaves out the conversations of users
who did not let their data be used (their setting, else the deployment default) and replaces
personal data in every text (titles, messages, rating comments) by typed placeholders. A user's
own export (`user_export`) is theirs as they wrote it: nothing redacted, every row keyed to them,
and a `left_out` section naming what it does not hold and why (secrets, data derived across users).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from store import NotFound, Store
from store.analytics import messages_table
from store.privacy import NOT_EXPORTED


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
    for m in store.conversations.get_messages(conv.id):
        record = {k: v for k, v in asdict(m).items() if k != "generation"}
        record["content"] = clean(m.content)
        if m.generation is not None:
            gen = asdict(m.generation)
            gen["attributes"] = m.generation.attributes.as_dict()
            record["generation"] = gen
            record["ratings"] = [
                {"value": r.value, "reasons": list(r.reasons), "comment": clean(r.comment), "at": r.created_at}
                for r in store.conversations.ratings(m.id)
            ]
        messages.append(record)
    return {"id": conv.id, "user_id": conv.user_id, "title": clean(conv.title), "source": conv.source,
            "created_at": conv.created_at, "updated_at": conv.updated_at, "messages": messages}


def iter_conversation_records(store: Store, *, chunk: int = 500, sharing: SharingRules | None = None):
    """Yield one dict per conversation, reading the store a chunk of conversations at a time."""
    offset, consent = 0, {}
    while True:
        convs = store.conversations.all(limit=chunk, offset=offset)
        if not convs:
            return
        for conv in convs:
            if sharing is not None:
                if conv.user_id not in consent:
                    own = store.users.training_consent(conv.user_id)
                    consent[conv.user_id] = sharing.consent_default if own is None else own
                if not consent[conv.user_id]:
                    continue
            yield _record(store, conv, sharing)
        offset += chunk


# What a person's own export leaves out, and why; the export carries this list. Tables with a
# user_id column that are left out are `store.privacy.NOT_EXPORTED`, added to it.
LEFT_OUT = {
    "sessions.id": "each session's id is a hash of the token in your sign-in cookie: a secret that "
                   "identifies the session to the server and tells you nothing",
    "users.password_hash": "a scrypt hash of your password: a secret, and no use to you",
    "trained adapters": "model weights trained on many people's conversations at once: your part cannot "
                        "be separated out; `training_runs` lists the runs that used your conversations",
    "event_reviews": "operators' verdicts on whether a feedback event was mined correctly: a check of the "
                     "miner, naming the operator; deleted with your data",
    "audit_log": "the operators' record of their actions; where it names you, what changed is in this "
                 "export already (for example `consent_history`)",
    "copies outside the store": "training snapshots and operators' exports hold copies of the same "
                                "conversations; deleting your data removes you from those under the "
                                "service's data directory",
}


def user_export(store: Store, user_id: str, *, settings: dict | None = None) -> dict:
    """Everything the store holds keyed to one person, as they wrote it: their account, their
    conversations (every branch) with answers' generation metadata, and every other row keyed to
    them (`Privacy.subject_data`: ratings, sibling choices, mined feedback events, sessions without
    their secret ids, consent history, training runs), plus `left_out`: what is not here and why."""
    convs, page, before = [], 200, None
    while True:
        batch = store.conversations.list(user_id, limit=page, before=before)
        convs += batch
        if len(batch) < page:
            break
        before = batch[-1].updated_at
    try:
        user = store.users.get(user_id)
        account = {"id": user.id, "name": user.name, "is_admin": user.is_admin, "created_at": user.created_at,
                   "training_consent": user.training_consent}
    except NotFound:  # a guest who has written nothing has no row yet
        account = {"id": user_id}
    return {"user_id": user_id, "account": account, "settings": settings or {},
            "conversations": [_record(store, c, None) for c in convs], **store.privacy.subject_data(user_id),
            "left_out": {**NOT_EXPORTED, **LEFT_OUT}}


def export_jsonl(store: Store, out: Path, *, sharing: SharingRules | None = None) -> int:
    out.parent.mkdir(parents=True, exist_ok=True)
    n = 0
    with out.open("w", encoding="utf-8") as fh:
        for record in iter_conversation_records(store, sharing=sharing):
            fh.write(json.dumps(record, default=str, ensure_ascii=False) + "\n")
            n += 1
    return n
