"""Explicit feedback: thumbs with reasons and a comment, and which sibling a user kept.

Design choices:
- Both are append-only events. A user may change their mind (a like, then a dislike; a thumb,
  then its reasons; a like taken back), so readers take each user's latest row per message; the
  history stays. A rating of 0 withdraws: the latest row is then "no rating", for the user's view,
  the operator's counts and the training sets alike.
- Only the owner of a conversation can rate its answers or choose among its siblings:
  `get_message(..., user_id=...)` answers `NotFound` for anyone else's.
- "Latest per key" is a `row_number()` window, not DuckDB's `arg_max`: PostgreSQL runs it too.
"""

from __future__ import annotations

from collections.abc import Sequence

from store.conversations import Conversations
from store.records import RATING_COLUMNS, InvalidInput, Rating, clean_text, new_id, rating_from_row


class Ratings(Conversations):
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
        with self.transaction():
            row = self._returning(
                "INSERT INTO ratings (id, message_id, user_id, value, reasons, comment) VALUES (?, ?, ?, ?, ?, ?) "
                f"RETURNING {RATING_COLUMNS}",
                [rating_id, message_id, user_id, value, reasons, comment],
            )
        return rating_from_row(row)

    def ratings(self, message_id: str) -> list[Rating]:
        rows = self._read(
            f"SELECT {RATING_COLUMNS} FROM ratings WHERE message_id = ? ORDER BY created_at", [message_id]
        )
        return [rating_from_row(r) for r in rows]

    def latest_ratings(self, user_id: str, message_ids: Sequence[str]) -> dict[str, Rating]:
        """The user's latest rating of each of these messages (those they rated and did not take
        back), in one query."""
        if not message_ids:
            return {}
        rows = self._read(
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
        with self.transaction():
            self._execute(
                "INSERT INTO sibling_choices (id, conversation_id, parent_id, message_id, user_id) "
                "VALUES (?, ?, ?, ?, ?)",
                [new_id(), msg.conversation_id, msg.parent_id, message_id, user_id],
            )
