"""The conversation store: one DuckDB file, owned by one process, shared by its threads.

Design choices:
- DuckDB lets exactly one process open a file read-write and then locks everyone else out, even
  readers. So the service owns the file; other processes go through its REST API. When the lock
  is held, `StoreLocked` names the holder (PID and command line) and says what to do.
- One connection per `Store`, one cursor per thread (DuckDB cursors are independent connections
  to the same database). Reads run concurrently under MVCC; writes are serialised by a lock and
  each multi-row write is one explicit transaction, so a crash leaves all of it or none of it.
  Serialised writes also make `messages.seq` commit-ordered, which the extraction watermark needs.
- An answer is written after its last token, so it is one statement: an INSERT whose point
  lookups check the parent, carrying its generation metadata as JSON on its own row (migration 2),
  committed on its own. DuckDB charges per statement and per column, not per byte.
- A write that returned is committed: DuckDB has written it to its WAL, which is replayed on the
  next open, so SIGKILL loses nothing acknowledged.
- Rows come back as small frozen dataclasses; callers never see DuckDB tuples.
"""

from __future__ import annotations

import json
import math
import re
import threading
import uuid
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, fields
from datetime import datetime
from pathlib import Path
from typing import Any

import duckdb

from feedback.attributes import NAMES as ATTRIBUTE_NAMES
from feedback.attributes import Attributes
from feedback.migrations import LATEST_VERSION, MIGRATIONS

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
    # Lone surrogates cannot be encoded to UTF-8 and would fail deep inside DuckDB.
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

    def to_json(self) -> str:
        """The `messages.generation` document: the `generations` view's columns, flat."""
        doc = {name: getattr(self, name) for name in _GENERATION_FIELDS}
        doc.update(self.attributes.as_dict())
        # JSON has no NaN/inf: a broken timer must not make the answer unstorable.
        return json.dumps({k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in doc.items()})

    @classmethod
    def from_json(cls, text: str | dict) -> "GenerationMeta":
        doc = _json(text)
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


_MESSAGE_COLUMNS = "m.id, m.conversation_id, m.parent_id, m.role, m.content, m.status, m.seq, m.created_at, m.generation"
_JOB_COLUMNS = "id, kind, trigger, status, params, result, error, parent_id, created_at, started_at, finished_at"
_RELEASE_COLUMNS = "id, run_id, adapter_path, base_model, status, decision, created_at, promoted_at, retired_at"
_RUN_COLUMNS = (
    "id, job_id, method, status, run_dir, base_model, parent_release_id, data_hash, config, metrics, "
    "error, created_at, finished_at"
)


def _json(value: Any) -> dict:
    if value is None:
        return {}
    return json.loads(value) if isinstance(value, str) else value


def _message_from_row(row: Sequence) -> Message:
    *base, generation = row
    return Message(*base, generation=GenerationMeta.from_json(generation) if generation is not None else None)


def _job_from_row(row: Sequence) -> Job:
    r = list(row)
    r[4], r[5] = _json(r[4]), _json(r[5])
    return Job(*r)


def _release_from_row(row: Sequence) -> Release:
    r = list(row)
    r[5] = _json(r[5])
    return Release(*r)


def _run_from_row(row: Sequence) -> TrainingRun:
    r = list(row)
    r[8], r[9] = _json(r[8]), _json(r[9])
    return TrainingRun(*r)


# --------------------------------------------------------------------------- lock diagnosis

_LOCK_PID = re.compile(r"PID (\d+)")


def _lock_holder(pid: int) -> str:
    try:
        raw = Path(f"/proc/{pid}/cmdline").read_bytes()
        cmd = raw.replace(b"\0", b" ").decode(errors="replace").strip()
    except OSError:
        cmd = ""
    return f"PID {pid} ({cmd})" if cmd else f"PID {pid}"


def _locked_error(path: Path, exc: Exception) -> StoreLocked:
    match = _LOCK_PID.search(str(exc))
    holder = _lock_holder(int(match.group(1))) if match else "another process"
    return StoreLocked(
        f"The database {path} is in use by {holder}. DuckDB lets only one process open it.\n"
        "If that is the Advisor service, run this command against the service instead "
        "(`--url http://HOST:PORT`, or use its web UI / REST API); otherwise stop that process "
        "and run the command again."
    )


# --------------------------------------------------------------------------- the store


class Store:
    """Typed read/write API over one DuckDB file. Safe for many threads of one process."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        try:
            self._conn = duckdb.connect(str(self.path))
        except duckdb.IOException as exc:
            if "lock" in str(exc).lower():
                raise _locked_error(self.path, exc) from None
            raise StoreError(f"Cannot open the database {self.path}: {exc}") from exc
        self._write_lock = threading.RLock()
        self._local = threading.local()
        self._closed = False
        # Users whose row is known to exist: skips two lookups on every new conversation (the turn
        # path is benchmarked). `forget_user` removes the id before deleting, under the write lock.
        self._known_users: set[str] = set()
        self._migrate()

    # ---- plumbing

    def __enter__(self) -> "Store":
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        with self._write_lock:
            if not self._closed:
                self._closed = True
                self._conn.close()

    def _cursor(self) -> duckdb.DuckDBPyConnection:
        if self._closed:
            raise StoreError("The store is closed.")
        cur = getattr(self._local, "cursor", None)
        if cur is None:
            cur = self._conn.cursor()
            self._local.cursor = cur
        return cur

    @contextmanager
    def transaction(self) -> Iterator[duckdb.DuckDBPyConnection]:
        """One serialised write transaction; commits on success, rolls back on any error."""
        with self._write_lock:
            cur = self._cursor()
            if getattr(self._local, "in_txn", False):  # nested: join the outer transaction
                yield cur
                return
            cur.execute("BEGIN TRANSACTION")
            self._local.in_txn = True
            try:
                yield cur
                cur.execute("COMMIT")
            except BaseException:
                cur.execute("ROLLBACK")
                raise
            finally:
                self._local.in_txn = False

    def query(self, sql: str, params: Sequence | dict | None = None) -> list[tuple]:
        """Read-only SQL for reports and the modules that own their queries (extraction, datasets)."""
        return self._cursor().execute(sql, params or []).fetchall()

    def query_df(self, sql: str, params: Sequence | dict | None = None):
        """The same, as an Arrow table (for plots and exports)."""
        return self._cursor().sql(sql, params=params or None).to_arrow_table()

    def _migrate(self) -> None:
        with self.transaction() as cur:
            cur.execute(
                "CREATE TABLE IF NOT EXISTS schema_version ("
                "version INTEGER PRIMARY KEY, description VARCHAR, applied_at TIMESTAMPTZ DEFAULT now())"
            )
        for version, description, sql in MIGRATIONS:
            if version <= self.schema_version():
                continue
            with self.transaction() as cur:
                cur.execute(sql)
                cur.execute("INSERT INTO schema_version (version, description) VALUES (?, ?)", [version, description])

    def schema_version(self) -> int:
        row = self._cursor().execute("SELECT coalesce(max(version), 0) FROM schema_version").fetchone()
        return int(row[0])

    # ---- users

    def ensure_user(self, user_id: str, *, name: str | None = None) -> None:
        """Create the user row on first sight (anonymous users get one per session cookie)."""
        if user_id in self._known_users:
            return
        with self.transaction() as cur:
            if cur.execute("SELECT 1 FROM forgotten_users WHERE user_id = ?", [user_id]).fetchone():
                # A forgotten user id never comes back; the caller must mint a new one.
                raise InvalidInput("This user's data was deleted; start a new session.")
            if not cur.execute("SELECT 1 FROM users WHERE id = ?", [user_id]).fetchone():
                cur.execute("INSERT INTO users (id, name) VALUES (?, ?)", [user_id, name])
        self._known_users.add(user_id)

    def create_user(self, name: str, *, password_hash: str | None = None, is_admin: bool = False) -> User:
        name = clean_text(name, what="user name", max_chars=100)
        if self.get_user_by_name(name):
            raise InvalidInput(f"A user named {name!r} already exists.")
        user_id = new_id()
        with self.transaction() as cur:
            cur.execute(
                "INSERT INTO users (id, name, password_hash, is_admin) VALUES (?, ?, ?, ?)",
                [user_id, name, password_hash, is_admin],
            )
        return self.get_user(user_id)

    def get_user(self, user_id: str) -> User:
        row = self._cursor().execute(
            "SELECT id, name, is_admin, created_at, password_hash FROM users WHERE id = ?", [user_id]
        ).fetchone()
        if row is None:
            raise NotFound(f"No user {user_id!r}.")
        return User(*row)

    def get_user_by_name(self, name: str) -> User | None:
        row = self._cursor().execute(
            "SELECT id, name, is_admin, created_at, password_hash FROM users WHERE name = ?", [name]
        ).fetchone()
        return User(*row) if row else None

    def is_forgotten(self, user_id: str) -> bool:
        return bool(self.query("SELECT 1 FROM forgotten_users WHERE user_id = ?", [user_id]))

    # ---- conversations and messages

    def create_conversation(self, user_id: str, *, title: str = "", source: str = "ui") -> Conversation:
        conv_id = new_id()
        with self.transaction() as cur:
            self.ensure_user(user_id)
            row = cur.execute(
                "INSERT INTO conversations (id, user_id, title, source) VALUES (?, ?, ?, ?) "
                "RETURNING created_at, updated_at",
                [conv_id, user_id, title[:200], source],
            ).fetchone()
        return Conversation(conv_id, user_id, title[:200], source, row[0], row[1])

    def get_conversation(self, conversation_id: str, *, user_id: str | None = None) -> Conversation:
        """With `user_id`, a conversation of another user is reported as not found."""
        sql = "SELECT id, user_id, title, source, created_at, updated_at FROM conversations WHERE id = ?"
        params: list = [conversation_id]
        if user_id is not None:
            sql += " AND user_id = ?"
            params.append(user_id)
        row = self._cursor().execute(sql, params).fetchone()
        if row is None:
            raise NotFound(f"No conversation {conversation_id!r} for this user.")
        return Conversation(*row)

    def list_conversations(self, user_id: str, *, limit: int = 100) -> list[Conversation]:
        rows = self.query(
            "SELECT id, user_id, title, source, created_at, updated_at FROM conversations "
            "WHERE user_id = ? ORDER BY updated_at DESC LIMIT ?",
            [user_id, limit],
        )
        return [Conversation(*r) for r in rows]

    def start_conversation(self, user_id: str, text: str, *, source: str = "ui") -> tuple[Conversation, Message]:
        """A new conversation titled by its first question, and that question: one transaction of
        two inserts (the cheapest way to log the first half of a turn)."""
        if not isinstance(text, str):
            raise InvalidInput("Message content must be text.")
        conv_id, msg_id, title = new_id(), new_id(), text[:80]
        with self.transaction() as cur:
            self.ensure_user(user_id)
            created, updated = cur.execute(
                "INSERT INTO conversations (id, user_id, title, source) VALUES (?, ?, ?, ?) "
                "RETURNING created_at, updated_at",
                [conv_id, user_id, title, source],
            ).fetchone()
            seq, msg_created = cur.execute(
                "INSERT INTO messages (id, conversation_id, parent_id, role, content, status) "
                "VALUES (?, ?, NULL, 'user', ?, 'complete') RETURNING seq, created_at",
                [msg_id, conv_id, text],
            ).fetchone()
        return (Conversation(conv_id, user_id, title, source, created, updated),
                Message(msg_id, conv_id, None, "user", text, "complete", seq, msg_created))

    def add_message(
        self, conversation_id: str, role: str, content: str, *, parent_id: str | None = None,
        status: str = "complete", generation: GenerationMeta | None = None,
    ) -> Message:
        """Store one message, an answer with its generation metadata, as one guarded insert.

        The existence check (the parent in this conversation, or the conversation) rides in the
        INSERT as point lookups, so an answer, written after its last token, costs one statement
        in autocommit: no separate lookup, no BEGIN/COMMIT round trips. A question also updates its
        conversation (`updated_at`, and the title if it has none), in one transaction with it;
        answers leave the conversation alone (one UPDATE less per turn)."""
        if role not in ("system", "user", "assistant"):
            raise InvalidInput(f"Unknown role {role!r}.")
        if not isinstance(content, str):
            raise InvalidInput("Message content must be text.")
        msg_id = new_id()
        if parent_id is None:
            guard, guard_params = "(SELECT id FROM conversations WHERE id = ?) IS NOT NULL", [conversation_id]
        else:
            guard, guard_params = "(SELECT conversation_id FROM messages WHERE id = ?) = ?", [parent_id, conversation_id]
        sql = ("INSERT INTO messages (id, conversation_id, parent_id, role, content, status, generation) "
               f"SELECT ?, ?, ?, ?, ?, ?, ? WHERE {guard} RETURNING seq, created_at")
        params = [msg_id, conversation_id, parent_id, role, content, status,
                  generation.to_json() if generation is not None else None, *guard_params]
        # A question's insert and UPDATE form one transaction; an answer's insert commits alone.
        with self.transaction() if role == "user" else self._write_lock:
            cur = self._cursor()
            inserted = cur.execute(sql, params).fetchone()
            if inserted is None:
                self._raise_missing(conversation_id, parent_id)
            if role == "user":
                cur.execute("UPDATE conversations SET updated_at = now(), "
                            "title = CASE WHEN title = '' THEN ? ELSE title END WHERE id = ?",
                            [content[:80], conversation_id])
        seq, created_at = inserted
        return Message(msg_id, conversation_id, parent_id, role, content, status, seq, created_at,
                       generation=generation)

    def _raise_missing(self, conversation_id: str, parent_id: str | None) -> None:
        """Which reference an insert's guard found missing, as the error the user sees."""
        if not self._cursor().execute("SELECT 1 FROM conversations WHERE id = ?", [conversation_id]).fetchone():
            raise NotFound(f"No conversation {conversation_id!r}.")
        raise NotFound(f"No message {parent_id!r} in this conversation.")

    def get_message(self, message_id: str, *, user_id: str | None = None) -> Message:
        row = self._cursor().execute(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages m WHERE m.id = ?", [message_id]
        ).fetchone()
        if row is not None and user_id is not None and not self._cursor().execute(
            "SELECT 1 FROM conversations WHERE id = ? AND user_id = ?", [row[1], user_id]
        ).fetchone():
            row = None
        if row is None:
            raise NotFound(f"No message {message_id!r} for this user.")
        return _message_from_row(row)

    def get_messages(self, conversation_id: str) -> list[Message]:
        """Every message of the conversation tree, oldest first: one index lookup."""
        rows = self._cursor().execute(
            f"SELECT {_MESSAGE_COLUMNS} FROM messages m WHERE m.conversation_id = ? ORDER BY m.seq",
            [conversation_id],
        ).fetchall()
        return [_message_from_row(r) for r in rows]

    def thread(self, conversation_id: str, leaf_id: str | None = None) -> list[Message]:
        """The path from the root to `leaf_id` (default: the current branch — at each fork the
        sibling the user kept, else the newest)."""
        messages = self.get_messages(conversation_id)
        if not messages:
            return []
        by_id = {m.id: m for m in messages}
        if leaf_id is None:
            leaf_id = self._current_leaf(conversation_id, messages)
        if leaf_id not in by_id:
            raise NotFound(f"No message {leaf_id!r} in this conversation.")
        path = []
        node: Message | None = by_id[leaf_id]
        while node is not None:
            path.append(node)
            node = by_id.get(node.parent_id) if node.parent_id else None
        return path[::-1]

    def _current_leaf(self, conversation_id: str, messages: list[Message]) -> str:
        chosen = {
            parent: msg for parent, msg in self.query(
                "SELECT parent_id, arg_max(message_id, created_at) FROM sibling_choices "
                "WHERE conversation_id = ? GROUP BY parent_id",
                [conversation_id],
            )
        }
        children: dict[str | None, list[Message]] = {}
        for m in messages:
            children.setdefault(m.parent_id, []).append(m)
        node_id: str | None = None
        while children.get(node_id):
            kids = children[node_id]
            pick = chosen.get(node_id)
            node_id = pick if pick in {k.id for k in kids} else kids[-1].id
        return node_id  # type: ignore[return-value]

    def siblings(self, message_id: str) -> list[Message]:
        msg = self.get_message(message_id)
        return [
            m for m in self.get_messages(msg.conversation_id)
            if m.parent_id == msg.parent_id and m.role == msg.role
        ]

    # ---- explicit feedback

    def rate(
        self, message_id: str, user_id: str, value: int, *, reasons: Sequence[str] = (), comment: str = ""
    ) -> Rating:
        if value not in (-1, 1):
            raise InvalidInput("A rating is +1 (like) or -1 (dislike).")
        msg = self.get_message(message_id, user_id=user_id)  # only your own conversation's answers
        if msg.role != "assistant":
            raise InvalidInput("Only answers can be rated.")
        reasons = [clean_text(r, what="reason", max_chars=100) for r in reasons]
        comment = clean_text(comment, what="comment", max_chars=2000) if comment and comment.strip() else ""
        rating_id = new_id()
        with self.transaction() as cur:
            cur.execute(
                "INSERT INTO ratings (id, message_id, user_id, value, reasons, comment) VALUES (?, ?, ?, ?, ?, ?)",
                [rating_id, message_id, user_id, value, reasons, comment],
            )
        row = self._cursor().execute(
            "SELECT id, message_id, user_id, value, reasons, comment, created_at FROM ratings WHERE id = ?",
            [rating_id],
        ).fetchone()
        return Rating(*row[:4], tuple(row[4]), *row[5:])

    def ratings(self, message_id: str) -> list[Rating]:
        rows = self.query(
            "SELECT id, message_id, user_id, value, reasons, comment, created_at FROM ratings "
            "WHERE message_id = ? ORDER BY created_at",
            [message_id],
        )
        return [Rating(*r[:4], tuple(r[4]), *r[5:]) for r in rows]

    def choose_sibling(self, message_id: str, user_id: str) -> None:
        """Record that the user kept this answer (or edit) over its siblings."""
        msg = self.get_message(message_id, user_id=user_id)
        with self.transaction() as cur:
            cur.execute(
                "INSERT INTO sibling_choices (id, conversation_id, parent_id, message_id, user_id) "
                "VALUES (?, ?, ?, ?, ?)",
                [new_id(), msg.conversation_id, msg.parent_id, message_id, user_id],
            )

    # ---- mined feedback

    def add_feedback_events(self, events: Sequence[FeedbackEvent]) -> int:
        """Insert events, skipping ones already stored (same message, category, span, extractor).
        Returns how many were new."""
        if not events:
            return 0
        with self.transaction() as cur:
            before = cur.execute("SELECT count(*) FROM feedback_events").fetchone()[0]
            cur.executemany(
                "INSERT OR IGNORE INTO feedback_events (id, conversation_id, message_id, target_message_id, "
                "category, span, span_start, span_end, extractor, extractor_version, job_id) "
                "VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)",
                [[e.id, e.conversation_id, e.message_id, e.target_message_id, e.category, e.span,
                  e.span_start, e.span_end, e.extractor, e.extractor_version, e.job_id] for e in events],
            )
            after = cur.execute("SELECT count(*) FROM feedback_events").fetchone()[0]
        return int(after - before)

    def get_watermark(self, name: str) -> int:
        row = self._cursor().execute("SELECT value FROM watermarks WHERE name = ?", [name]).fetchone()
        return int(row[0]) if row else 0

    def set_watermark(self, name: str, value: int) -> None:
        with self.transaction() as cur:
            cur.execute(
                "INSERT INTO watermarks (name, value) VALUES (?, ?) "
                "ON CONFLICT (name) DO UPDATE SET value = excluded.value, updated_at = now()",
                [name, value],
            )

    # ---- jobs

    def create_job(
        self, kind: str, *, trigger: str = "manual", params: dict | None = None,
        status: str = "running", parent_id: str | None = None,
    ) -> Job:
        job_id = new_id()
        with self.transaction() as cur:
            cur.execute(
                "INSERT INTO jobs (id, kind, trigger, status, params, parent_id, started_at) "
                "VALUES (?, ?, ?, ?, ?, ?, CASE WHEN ? = 'running' THEN now() END)",
                [job_id, kind, trigger, status, json.dumps(params or {}), parent_id, status],
            )
        return self.get_job(job_id)

    def update_job(
        self, job_id: str, *, status: str | None = None, result: dict | None = None, error: str | None = None,
    ) -> Job:
        """Change a job's status/result; a terminal status stamps `finished_at`."""
        sets, params = [], []
        if status is not None:
            sets.append("status = ?")
            params.append(status)
            if status == "running":
                sets.append("started_at = coalesce(started_at, now())")
            if status in ("succeeded", "failed", "skipped", "cancelled"):
                sets.append("finished_at = now()")
        if result is not None:
            sets.append("result = ?")
            params.append(json.dumps(result, default=str))
        if error is not None:
            sets.append("error = ?")
            params.append(error)
        if sets:
            with self.transaction() as cur:
                cur.execute(f"UPDATE jobs SET {', '.join(sets)} WHERE id = ?", [*params, job_id])
        return self.get_job(job_id)

    def get_job(self, job_id: str) -> Job:
        row = self._cursor().execute(f"SELECT {_JOB_COLUMNS} FROM jobs WHERE id = ?", [job_id]).fetchone()
        if row is None:
            raise NotFound(f"No job {job_id!r}.")
        return _job_from_row(row)

    def list_jobs(self, *, kind: str | None = None, limit: int = 50) -> list[Job]:
        sql = f"SELECT {_JOB_COLUMNS} FROM jobs"
        params: list = []
        if kind:
            sql += " WHERE kind = ?"
            params.append(kind)
        sql += " ORDER BY created_at DESC LIMIT ?"
        return [_job_from_row(r) for r in self.query(sql, [*params, limit])]

    # ---- training runs, evaluation results, releases

    def create_training_run(
        self, *, method: str, run_dir: str, base_model: str, job_id: str | None = None,
        parent_release_id: str | None = None, data_hash: str | None = None, config: dict | None = None,
        run_id: str | None = None,
    ) -> TrainingRun:
        run_id = run_id or new_id()
        with self.transaction() as cur:
            cur.execute(
                "INSERT INTO training_runs (id, job_id, method, status, run_dir, base_model, parent_release_id, "
                "data_hash, config) VALUES (?, ?, ?, 'queued', ?, ?, ?, ?, ?)",
                [run_id, job_id, method, run_dir, base_model, parent_release_id, data_hash,
                 json.dumps(config or {}, default=str)],
            )
        return self.get_training_run(run_id)

    def update_training_run(
        self, run_id: str, *, status: str | None = None, metrics: dict | None = None, error: str | None = None,
    ) -> TrainingRun:
        sets, params = [], []
        if status is not None:
            sets.append("status = ?")
            params.append(status)
            if status in ("succeeded", "failed", "cancelled"):
                sets.append("finished_at = now()")
        if metrics is not None:
            sets.append("metrics = ?")
            params.append(json.dumps(metrics, default=str))
        if error is not None:
            sets.append("error = ?")
            params.append(error)
        if sets:
            with self.transaction() as cur:
                cur.execute(f"UPDATE training_runs SET {', '.join(sets)} WHERE id = ?", [*params, run_id])
        return self.get_training_run(run_id)

    def get_training_run(self, run_id: str) -> TrainingRun:
        row = self._cursor().execute(f"SELECT {_RUN_COLUMNS} FROM training_runs WHERE id = ?", [run_id]).fetchone()
        if row is None:
            raise NotFound(f"No training run {run_id!r}.")
        return _run_from_row(row)

    def list_training_runs(self, *, limit: int = 50) -> list[TrainingRun]:
        rows = self.query(f"SELECT {_RUN_COLUMNS} FROM training_runs ORDER BY created_at DESC LIMIT ?", [limit])
        return [_run_from_row(r) for r in rows]

    def add_eval_results(
        self, subject: str, suite: str, metrics: dict[str, float], *, job_id: str | None = None,
        details: dict | None = None,
    ) -> None:
        with self.transaction() as cur:
            cur.executemany(
                "INSERT INTO eval_results (id, job_id, subject, suite, metric, value, details) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                [[new_id(), job_id, subject, suite, name, float(value), json.dumps(details or {}, default=str)]
                 for name, value in metrics.items()],
            )

    def eval_results(self, subject: str) -> dict[str, dict[str, float]]:
        """Latest value of each (suite, metric) for a subject."""
        rows = self.query(
            "SELECT suite, metric, arg_max(value, created_at) FROM eval_results WHERE subject = ? "
            "GROUP BY suite, metric",
            [subject],
        )
        out: dict[str, dict[str, float]] = {}
        for suite, metric, value in rows:
            out.setdefault(suite, {})[metric] = value
        return out

    def create_release(
        self, *, base_model: str, adapter_path: str | None, run_id: str | None = None,
        status: str = "candidate", decision: dict | None = None, release_id: str | None = None,
    ) -> Release:
        release_id = release_id or new_id()
        with self.transaction() as cur:
            cur.execute(
                "INSERT INTO releases (id, run_id, adapter_path, base_model, status, decision, promoted_at) "
                "VALUES (?, ?, ?, ?, ?, ?, CASE WHEN ? = 'live' THEN now() END)",
                [release_id, run_id, adapter_path, base_model, status, json.dumps(decision or {}, default=str),
                 status],
            )
        return self.get_release(release_id)

    def get_release(self, release_id: str) -> Release:
        row = self._cursor().execute(f"SELECT {_RELEASE_COLUMNS} FROM releases WHERE id = ?", [release_id]).fetchone()
        if row is None:
            raise NotFound(f"No release {release_id!r}.")
        return _release_from_row(row)

    def list_releases(self, *, limit: int = 50) -> list[Release]:
        rows = self.query(f"SELECT {_RELEASE_COLUMNS} FROM releases ORDER BY created_at DESC LIMIT ?", [limit])
        return [_release_from_row(r) for r in rows]

    def live_release(self) -> Release | None:
        row = self._cursor().execute(
            f"SELECT {_RELEASE_COLUMNS} FROM releases WHERE status = 'live' ORDER BY promoted_at DESC LIMIT 1"
        ).fetchone()
        return _release_from_row(row) if row else None

    def set_release_status(self, release_id: str, status: str, *, decision: dict | None = None) -> Release:
        """Change a release's status. Making one live retires the previous live one in the same
        transaction, so there is never zero or two live releases."""
        with self.transaction() as cur:
            if status == "live":
                cur.execute(
                    "UPDATE releases SET status = 'retired', retired_at = now() WHERE status = 'live' AND id <> ?",
                    [release_id],
                )
            stamp = {"live": ", promoted_at = now(), retired_at = NULL", "retired": ", retired_at = now()"}
            cur.execute(f"UPDATE releases SET status = ?{stamp.get(status, '')} WHERE id = ?", [status, release_id])
            if decision is not None:
                cur.execute("UPDATE releases SET decision = ? WHERE id = ?",
                            [json.dumps(decision, default=str), release_id])
        return self.get_release(release_id)

    # ---- privacy

    def forget_user(self, user_id: str) -> dict[str, int]:
        """Delete everything the user wrote and everything derived from it, in one transaction,
        and remember the id so it can never be written again. Returns rows deleted per table."""
        counts: dict[str, int] = {}
        own_convs = "SELECT id FROM conversations WHERE user_id = $u"
        own_msgs = f"SELECT id FROM messages WHERE conversation_id IN ({own_convs})"
        steps = [
            ("ratings", f"DELETE FROM ratings WHERE user_id = $u OR message_id IN ({own_msgs})"),
            ("sibling_choices", f"DELETE FROM sibling_choices WHERE user_id = $u OR message_id IN ({own_msgs})"),
            ("feedback_events", f"DELETE FROM feedback_events WHERE conversation_id IN ({own_convs})"),
            # Generation metadata lives on the answers' rows: counted here, deleted with them.
            ("generations", f"SELECT count(*) FROM messages WHERE generation IS NOT NULL "
                            f"AND conversation_id IN ({own_convs})"),
            ("messages", f"DELETE FROM messages WHERE conversation_id IN ({own_convs})"),
            ("conversations", "DELETE FROM conversations WHERE user_id = $u"),
            ("users", "DELETE FROM users WHERE id = $u"),
        ]
        with self.transaction() as cur:
            self._known_users.discard(user_id)
            for table, sql in steps:
                counts[table] = int(cur.execute(sql, {"u": user_id}).fetchone()[0])
            cur.execute("INSERT INTO forgotten_users (user_id) VALUES (?) ON CONFLICT DO NOTHING", [user_id])
        return counts

    # ---- reporting

    def stats(self) -> dict[str, Any]:
        tables = ["users", "conversations", "messages", "generations", "ratings", "sibling_choices",
                  "feedback_events", "jobs", "training_runs", "eval_results", "releases", "forgotten_users"]
        counts = {t: int(self.query(f"SELECT count(*) FROM {t}")[0][0]) for t in tables}
        # A user may rate an answer several times (a thumb, then its reasons): the latest counts.
        likes, dislikes = self.query(
            "SELECT count(*) FILTER (v = 1), count(*) FILTER (v = -1) FROM ("
            "SELECT arg_max(value, created_at) AS v FROM ratings GROUP BY message_id, user_id)"
        )[0]
        live = self.live_release()
        return {
            "path": str(self.path),
            "schema_version": self.schema_version(),
            "latest_schema_version": LATEST_VERSION,
            "rows": counts,
            "likes": int(likes),
            "dislikes": int(dislikes),
            "live_release": live.id if live else None,
        }
