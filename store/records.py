"""What the store hands out and takes in: frozen records, the errors it raises, input validation.

Design choices:
- Rows come back as small frozen dataclasses; callers never see database tuples, so the backend
  (DuckDB now, PostgreSQL next) can change under them.
- Each record's column list sits next to the function that turns a row into it: the two must
  agree on order, and keeping them together is what keeps them agreeing.
- Errors derive from `StoreError` and carry a message meant for the user; `NotFound` is also what
  another user's row looks like, on purpose.
- This module imports no database driver.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Sequence
from dataclasses import dataclass, field, fields
from datetime import datetime
from typing import Any

from store.attributes import NAMES as ATTRIBUTE_NAMES
from store.attributes import Attributes

MAX_MESSAGE_CHARS = 32_000
_CONTROL_CHARS = re.compile(r"[\x00-\x08\x0b\x0c\x0e-\x1f\x7f]")


class StoreError(RuntimeError):
    """Base class for store errors that carry a message meant for the user."""


class StoreLocked(StoreError):
    """Another process holds the database file."""


class NotFound(StoreError):
    """The row does not exist, or belongs to another user (the two are indistinguishable on purpose)."""


class InvalidInput(StoreError, ValueError):
    """Text or values that cannot be stored as given."""


def without_nul(value: Any) -> Any:
    """Text with NUL characters replaced by U+FFFD: PostgreSQL's text cannot hold NUL."""
    return value.replace("\x00", "\ufffd") if isinstance(value, str) else value


def new_id() -> str:
    return uuid.uuid4().hex


def clean_text(text: Any, *, what: str = "message", max_chars: int = MAX_MESSAGE_CHARS) -> str:
    """Validate user-supplied text at the boundary: a non-empty string, no control characters
    (newlines and tabs stay), within the length limit. Raises `InvalidInput` with a message
    that can be shown to the user as is."""
    if isinstance(text, bytes):
        try:
            text = text.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise InvalidInput(f"The {what} is not valid UTF-8 text.") from exc
    if not isinstance(text, str):
        raise InvalidInput(f"The {what} must be text, got {type(text).__name__}.")
    # Lone surrogates cannot be encoded to UTF-8 and would fail deep inside the database driver.
    text = text.encode("utf-8", errors="replace").decode("utf-8")
    text = _CONTROL_CHARS.sub("", text).strip()
    if not text:
        raise InvalidInput(f"The {what} is empty. Type something and send it again.")
    if len(text) > max_chars:
        raise InvalidInput(
            f"The {what} is {len(text):,} characters long; the limit is {max_chars:,}. "
            "Shorten it and send it again."
        )
    return text


# --------------------------------------------------------------------------- records


@dataclass(frozen=True)
class User:
    id: str
    name: str | None
    is_admin: bool
    created_at: datetime
    password_hash: str | None = field(default=None, repr=False)
    # "Use my conversations to improve the advisor": None = the deployment's default applies.
    training_consent: bool | None = None


@dataclass(frozen=True)
class Conversation:
    id: str
    user_id: str
    title: str
    source: str
    created_at: datetime
    updated_at: datetime


@dataclass(frozen=True)
class GenerationMeta:
    """What produced an assistant message. Stored as JSON on the answer's own `messages` row
    (`generation`), read back typed through the `generations` view (migration 2)."""

    backend: str
    model: str
    attributes: Attributes
    steering: str = "steerlm"
    release_id: str | None = None
    # Which arm served the answer: "live", or "canary" while a canary release serves a share of
    # users (JSON only: the `generations` view does not need it; reads use json_extract).
    arm: str | None = None
    adapter: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_new_tokens: int | None = None
    seed: int | None = None
    latency_ms: float | None = None
    first_token_ms: float | None = None
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    finish_reason: str | None = None
    error: str | None = None
    # The safety guard's decision (`chat.guard`): {"verdict": "allowed"|"refused"|"replaced", "score",
    # "judge", ...}; None when no guard judged the answer. JSON only, like `arm`.
    safety: dict | None = None

    def to_json(self) -> str:
        """The `messages.generation` document: the `generations` view's columns, flat."""
        doc = {name: getattr(self, name) for name in _GENERATION_FIELDS}
        doc.update(self.attributes.as_dict())
        # JSON has no NaN/inf, and PostgreSQL's text and jsonb no NUL: a broken timer or a NUL in
        # an error message must not make the answer unstorable (on either backend, the same way).
        return json.dumps({k: (None if isinstance(v, float) and not math.isfinite(v) else without_nul(v))
                           for k, v in doc.items()})

    @classmethod
    def from_json(cls, text: str | dict) -> "GenerationMeta":
        doc = json_doc(text)
        attributes = Attributes(**{n: int(doc[n]) for n in ATTRIBUTE_NAMES})
        return cls(attributes=attributes, **{name: doc.get(name) for name in _GENERATION_FIELDS})


# Every field but `attributes`, whose five values the JSON document holds flat beside them.
_GENERATION_FIELDS = tuple(f.name for f in fields(GenerationMeta) if f.name != "attributes")


@dataclass(frozen=True)
class Message:
    id: str
    conversation_id: str
    parent_id: str | None
    role: str
    content: str
    status: str
    seq: int
    created_at: datetime
    generation: GenerationMeta | None = None


@dataclass(frozen=True)
class MessageNode:
    """A message as a node of its tree, without timestamps or generation metadata: what walking
    many conversations' trees needs, read without parsing any answer's JSON."""

    id: str
    conversation_id: str
    parent_id: str | None
    role: str
    content: str
    status: str


@dataclass(frozen=True)
class Rating:
    id: str
    message_id: str
    user_id: str
    value: int
    reasons: tuple[str, ...]
    comment: str
    created_at: datetime


@dataclass(frozen=True)
class Job:
    id: str
    kind: str
    trigger: str
    status: str
    params: dict
    result: dict
    error: str | None
    parent_id: str | None
    created_at: datetime
    started_at: datetime | None
    finished_at: datetime | None
    owner: str | None = None  # the lease id of the store that runs it (`Jobs.owner`)
    heartbeat_at: datetime | None = None  # its owner's last sign of life while it runs


@dataclass(frozen=True)
class FeedbackEvent:
    conversation_id: str
    message_id: str
    target_message_id: str
    category: str
    span: str
    span_start: int
    span_end: int
    extractor: str
    extractor_version: str
    job_id: str | None = None
    id: str = field(default_factory=new_id)


@dataclass(frozen=True)
class Release:
    id: str
    run_id: str | None
    adapter_path: str | None
    base_model: str
    status: str
    decision: dict
    created_at: datetime
    promoted_at: datetime | None
    retired_at: datetime | None


@dataclass(frozen=True)
class TrainingRun:
    id: str
    job_id: str | None
    method: str
    status: str
    run_dir: str
    base_model: str
    parent_release_id: str | None
    data_hash: str | None
    config: dict
    metrics: dict
    error: str | None
    created_at: datetime
    finished_at: datetime | None


# --------------------------------------------------------------------------- rows → records

USER_COLUMNS = "id, name, is_admin, created_at, password_hash, training_consent"
CONVERSATION_COLUMNS = "id, user_id, title, source, created_at, updated_at"
MESSAGE_COLUMNS = "m.id, m.conversation_id, m.parent_id, m.role, m.content, m.status, m.seq, m.created_at, m.generation"
RATING_COLUMNS = "id, message_id, user_id, value, reasons, comment, created_at"
JOB_COLUMNS = (
    "id, kind, trigger, status, params, result, error, parent_id, created_at, started_at, finished_at, owner, "
    "heartbeat_at"
)
RELEASE_COLUMNS = "id, run_id, adapter_path, base_model, status, decision, created_at, promoted_at, retired_at"
RUN_COLUMNS = (
    "id, job_id, method, status, run_dir, base_model, parent_release_id, data_hash, config, metrics, "
    "error, created_at, finished_at"
)


def json_doc(value: Any) -> dict:
    """A JSON column as a dict: drivers hand JSON back as text or already parsed, NULL as None."""
    if value is None:
        return {}
    return json.loads(value) if isinstance(value, str) else value


def message_from_row(row: Sequence) -> Message:
    *base, generation = row
    return Message(*base, generation=GenerationMeta.from_json(generation) if generation is not None else None)


def rating_from_row(row: Sequence) -> Rating:
    return Rating(*row[:4], tuple(row[4]), *row[5:])


def job_from_row(row: Sequence) -> Job:
    r = list(row)
    r[4], r[5] = json_doc(r[4]), json_doc(r[5])
    return Job(*r)


def release_from_row(row: Sequence) -> Release:
    r = list(row)
    r[5] = json_doc(r[5])
    return Release(*r)


def run_from_row(row: Sequence) -> TrainingRun:
    r = list(row)
    r[8], r[9] = json_doc(r[8]), json_doc(r[9])
    return TrainingRun(*r)
