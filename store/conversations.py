"""Conversations and their messages: a tree per conversation (`parent_id`), regenerate and edit
adding siblings, and the reads that walk it (the current branch, siblings, kept choices); the
explicit feedback on it: thumbs with reasons and a comment, and which sibling a user kept.

Design choices:
- An answer is written after its last token, so it is one statement: an INSERT whose point
  lookups check the parent, carrying its generation metadata as JSON on its own row (migration 2),
  committed on its own. DuckDB charges per statement and per column, not per byte.
- A question also touches its conversation (`updated_at`, a title if it has none) in the same
  transaction; a new conversation and its first question are one transaction of two inserts.
- The current branch follows, at each fork, the sibling the user kept (the latest choice wins),
  else the newest. Choices are append-only rows; the latest per fork is read with a window
  function, which DuckDB and PostgreSQL both run.
- Ratings and sibling choices are append-only events. A user may change their mind (a like,
  then a dislike; a thumb, then its reasons; a like taken back), so readers take each user's
  latest row per message; the history stays. A rating of 0 withdraws: the latest row is then "no
  rating", for the user's view, the operator's counts and the training sets alike.
- Only the owner of a conversation can rate its answers or choose among its siblings:
  `get_message(..., user_id=...)` answers `NotFound` for anyone else's.
- "Latest per key" is a `row_number()` window, not DuckDB's `arg_max`: PostgreSQL runs it too.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import datetime

from store.db import Database
from store.records import (
    CONVERSATION_COLUMNS,
    MESSAGE_COLUMNS,
    RATING_COLUMNS,
    Conversation,
    GenerationMeta,
    InvalidInput,
    Message,
    MessageNode,
    NotFound,
    Rating,
    clean_text,
    message_from_row,
    new_id,
    rating_from_row,
    without_nul,
)
from store.users import Users

_CREATE_CONVERSATION = ("INSERT INTO conversations (id, user_id, title, source) VALUES (?, ?, ?, ?) "
                        "RETURNING created_at, updated_at")


class Conversations:
    """Conversations, their messages (with each answer's generation metadata), ratings and the
    siblings users kept."""

    def __init__(self, db: Database, users: Users):
        self._db, self._users = db, users

    def create(self, user_id: str, *, title: str = "", source: str = "ui") -> Conversation:
        conv_id = new_id()
        with self._db.transaction():
            self._users.ensure(user_id)
            row = self._db.returning(_CREATE_CONVERSATION, [conv_id, user_id, title[:200], source])
        return Conversation(conv_id, user_id, title[:200], source, row[0], row[1])

    def get(self, conversation_id: str, *, user_id: str | None = None) -> Conversation:
        """With `user_id`, a conversation of another user is reported as not found."""
        sql = f"SELECT {CONVERSATION_COLUMNS} FROM conversations WHERE id = ?"
        params: list = [conversation_id]
        if user_id is not None:
            sql += " AND user_id = ?"
            params.append(user_id)
        row = self._db.read_one(sql, params)
        if row is None:
            raise NotFound(f"No conversation {conversation_id!r} for this user.")
        return Conversation(*row)

    def list(self, user_id: str, *, limit: int = 100, query: str | None = None,
                           before: datetime | None = None) -> list[Conversation]:
        """The user's conversations, most recently active first. `query` keeps those whose title
        or any message contains it (case-insensitive); `before` pages: only conversations last
        active before that time (pass the last one's `updated_at` to get the next page)."""
        sql = f"SELECT {CONVERSATION_COLUMNS} FROM conversations c WHERE user_id = ?"
        params: list = [user_id]
        if before is not None:
            sql += " AND updated_at < ?"
            params.append(before)
        if query and query.strip():
            pattern = "%" + query.strip().lower().replace("\\", "\\\\").replace("%", "\\%").replace("_", "\\_") + "%"
            sql += (" AND (lower(title) LIKE ? ESCAPE '\\' OR EXISTS (SELECT 1 FROM messages m WHERE "
                    "m.conversation_id = c.id AND lower(m.content) LIKE ? ESCAPE '\\'))")
            params += [pattern, pattern]
        rows = self._db.read(sql + " ORDER BY updated_at DESC, id LIMIT ?", [*params, limit])
        return [Conversation(*r) for r in rows]

    def rename(self, conversation_id: str, user_id: str, title: str) -> Conversation:
        """Give one of the user's conversations a title of their own (NotFound if not theirs)."""
        title = clean_text(title, what="title", max_chars=200)
        self.get(conversation_id, user_id=user_id)
        with self._db.transaction():
            self._db.execute("UPDATE conversations SET title = ? WHERE id = ? AND user_id = ?",
                             [title, conversation_id, user_id])
        return self.get(conversation_id, user_id=user_id)

    def all(self, *, limit: int, offset: int = 0) -> list[Conversation]:
        """Every user's conversations, oldest first, a page at a time (exports)."""
        rows = self._db.read(
            f"SELECT {CONVERSATION_COLUMNS} FROM conversations ORDER BY created_at, id LIMIT ? OFFSET ?",
            [limit, offset],
        )
        return [Conversation(*r) for r in rows]

    def start(self, user_id: str, text: str, *, source: str = "ui") -> tuple[Conversation, Message]:
        """A new conversation titled by its first question, and that question: one transaction of
        two inserts (the cheapest way to log the first half of a turn)."""
        if not isinstance(text, str):
            raise InvalidInput("Message content must be text.")
        conv_id, msg_id, title = new_id(), new_id(), text[:80]
        with self._db.transaction():
            self._users.ensure(user_id)
            created, updated = self._db.returning(_CREATE_CONVERSATION, [conv_id, user_id, title, source])
            seq, msg_created = self._db.returning(
                "INSERT INTO messages (id, conversation_id, parent_id, role, content, status) "
                "VALUES (?, ?, NULL, 'user', ?, 'complete') RETURNING seq, created_at",
                [msg_id, conv_id, text],
            )
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
        msg_id, content = new_id(), without_nul(content)  # a model's output is not cleaned text
        if parent_id is None:
            guard, guard_params = "(SELECT id FROM conversations WHERE id = ?) IS NOT NULL", [conversation_id]
        else:
            guard, guard_params = "(SELECT conversation_id FROM messages WHERE id = ?) = ?", [parent_id, conversation_id]
        # CAST: PostgreSQL types a SELECT list's parameter as text, which does not go into jsonb.
        sql = ("INSERT INTO messages (id, conversation_id, parent_id, role, content, status, generation) "
               f"SELECT ?, ?, ?, ?, ?, ?, CAST(? AS JSON) WHERE {guard} RETURNING seq, created_at")
        params = [msg_id, conversation_id, parent_id, role, content, status,
                  generation.to_json() if generation is not None else None, *guard_params]
        # A question's insert and UPDATE form one transaction; an answer's insert commits alone.
        with self._db.transaction() if role == "user" else self._db.serial():
            inserted = self._db.returning(sql, params)
            if inserted is None:
                self._raise_missing(conversation_id, parent_id)
            if role == "user":
                self._db.execute("UPDATE conversations SET updated_at = now(), "
                                 "title = CASE WHEN title = '' THEN ? ELSE title END WHERE id = ?",
                                 [content[:80], conversation_id])
        seq, created_at = inserted
        return Message(msg_id, conversation_id, parent_id, role, content, status, seq, created_at,
                       generation=generation)

    def _raise_missing(self, conversation_id: str, parent_id: str | None) -> None:
        """Which reference an insert's guard found missing, as the error the user sees."""
        if not self._db.read_one("SELECT 1 FROM conversations WHERE id = ?", [conversation_id]):
            raise NotFound(f"No conversation {conversation_id!r}.")
        raise NotFound(f"No message {parent_id!r} in this conversation.")

    def get_message(self, message_id: str, *, user_id: str | None = None) -> Message:
        row = self._db.read_one(f"SELECT {MESSAGE_COLUMNS} FROM messages m WHERE m.id = ?", [message_id])
        if row is not None and user_id is not None and not self._db.read_one(
            "SELECT 1 FROM conversations WHERE id = ? AND user_id = ?", [row[1], user_id]
        ):
            row = None
        if row is None:
            raise NotFound(f"No message {message_id!r} for this user.")
        return message_from_row(row)

    def get_messages(self, conversation_id: str) -> list[Message]:
        """Every message of the conversation tree, oldest first: one index lookup."""
        rows = self._db.read(
            f"SELECT {MESSAGE_COLUMNS} FROM messages m WHERE m.conversation_id = ? ORDER BY m.seq",
            [conversation_id],
        )
        return [message_from_row(r) for r in rows]

    def message_nodes(self, conversation_ids: Sequence[str]) -> list[MessageNode]:
        """The trees of several conversations at once, oldest first, without generation metadata."""
        if not conversation_ids:
            return []
        rows = self._db.read(
            "SELECT id, conversation_id, parent_id, role, content, status FROM messages "
            "WHERE conversation_id = ANY(?) ORDER BY seq",
            [list(conversation_ids)],
        )
        return [MessageNode(*r) for r in rows]

    def last_message_seq(self) -> int:
        """The highest `messages.seq` below which every message has committed (0 for an empty
        store): on PostgreSQL, where commits come in any order, not simply the highest seq."""
        return self._db.committed_seq()

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
        chosen = self.kept_siblings(conversation_id)
        children: dict[str | None, list[Message]] = {}
        for m in messages:
            children.setdefault(m.parent_id, []).append(m)
        node_id: str | None = None
        while children.get(node_id):
            kids = children[node_id]
            pick = chosen.get(node_id)
            node_id = pick if pick in {k.id for k in kids} else kids[-1].id
        return node_id  # type: ignore[return-value]

    def kept_siblings(self, conversation_id: str) -> dict[str | None, str]:
        """parent id → the child the user last chose to keep there (`choose_sibling`)."""
        rows = self._db.read(
            "SELECT parent_id, message_id FROM ("
            " SELECT parent_id, message_id,"
            "  row_number() OVER (PARTITION BY parent_id ORDER BY created_at DESC) AS nth"
            " FROM sibling_choices WHERE conversation_id = ?) AS latest WHERE nth = 1",
            [conversation_id],
        )
        return dict(rows)

    def siblings(self, message_id: str) -> list[Message]:
        msg = self.get_message(message_id)
        return [
            m for m in self.get_messages(msg.conversation_id)
            if m.parent_id == msg.parent_id and m.role == msg.role
        ]

    # ---- ratings and kept siblings

    def rate(
        self, message_id: str, user_id: str, value: int, *, reasons: Sequence[str] = (), comment: str = ""
    ) -> Rating:
        if value not in (-1, 0, 1):
            raise InvalidInput("A rating is +1 (like), -1 (dislike) or 0 (take it back).")
        if value == 0 and (reasons or (comment and comment.strip())):
            raise InvalidInput("Taking a rating back carries no reasons or comment.")
        msg = self.get_message(message_id, user_id=user_id)  # only your own conversation's answers
        if msg.role != "assistant":
            raise InvalidInput("Only answers can be rated.")
        reasons = [clean_text(r, what="reason", max_chars=100) for r in reasons]
        comment = clean_text(comment, what="comment", max_chars=2000) if comment and comment.strip() else ""
        rating_id = new_id()
        with self._db.transaction():
            row = self._db.returning(
                "INSERT INTO ratings (id, message_id, user_id, value, reasons, comment) VALUES (?, ?, ?, ?, ?, ?) "
                f"RETURNING {RATING_COLUMNS}",
                [rating_id, message_id, user_id, value, reasons, comment],
            )
        return rating_from_row(row)

    def ratings(self, message_id: str) -> list[Rating]:
        rows = self._db.read(
            f"SELECT {RATING_COLUMNS} FROM ratings WHERE message_id = ? ORDER BY created_at", [message_id]
        )
        return [rating_from_row(r) for r in rows]

    def latest_ratings(self, user_id: str, message_ids: Sequence[str]) -> dict[str, Rating]:
        """The user's latest rating of each of these messages (those they rated and did not take
        back), in one query."""
        if not message_ids:
            return {}
        rows = self._db.read(
            f"SELECT {RATING_COLUMNS} FROM ("
            f" SELECT {RATING_COLUMNS},"
            "  row_number() OVER (PARTITION BY message_id ORDER BY created_at DESC) AS nth"
            " FROM ratings WHERE user_id = ? AND message_id = ANY(?)) AS latest WHERE nth = 1 AND value <> 0",
            [user_id, list(message_ids)],
        )
        return {r.message_id: r for r in map(rating_from_row, rows)}

    def choose_sibling(self, message_id: str, user_id: str) -> None:
        """Record that the user kept this answer (or edit) over its siblings."""
        msg = self.get_message(message_id, user_id=user_id)
        with self._db.transaction():
            self._db.execute(
                "INSERT INTO sibling_choices (id, conversation_id, parent_id, message_id, user_id) "
                "VALUES (?, ?, ?, ?, ?)",
                [new_id(), msg.conversation_id, msg.parent_id, message_id, user_id],
            )
