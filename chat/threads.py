"""The view of a conversation that people see, shared by the chat UI and the REST API.

Design choices:
- `thread_view` is the one place that turns the message tree into what a person sees: the
  current branch, each message with its position among its siblings ("2 / 3"), the user's own
  latest rating, and the generation metadata. The UI and `GET /api/conversations/{id}` both
  use it, so they can never disagree.
- Ratings and sibling choices are append-only events; the latest one by a user wins (the same
  rule the store applies to sibling choices). A like that is followed by reasons is two rows.
- `display_markdown` neutralises HTML outside code: `<` becomes `&lt;`, so a `<script>` or
  `<img onerror=…>` is shown as text, not run and not silently dropped. Markdown still renders,
  and code spans/blocks are left as they are (the renderer escapes them itself). The Chatbot's
  own sanitizer stays on as a second line of defence.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any

from store import Message, Store

# Fixed reason lists, as Open WebUI has them: short, and the same for everyone so they can be counted.
POSITIVE_REASONS = ("accurate", "practical", "empathetic", "clear")
NEGATIVE_REASONS = ("wrong", "not what I asked", "too long", "too vague", "unsafe")


# --------------------------------------------------------------------------- views


@dataclass
class MessageView:
    id: str
    role: str
    content: str
    status: str
    parent_id: str | None
    created_at: str
    sibling_ids: list[str]
    sibling_index: int  # 0-based position among siblings
    rating: dict | None = None  # {"value", "reasons", "comment"} — the user's latest
    generation: dict | None = None
    # Steering attributes an answer's siblings were generated with ({} where unknown): the
    # chat shows which values changed between regenerated answers.
    sibling_attributes: list[dict] = field(default_factory=list)

    @property
    def sibling_count(self) -> int:
        return len(self.sibling_ids)

    def as_dict(self) -> dict[str, Any]:
        return {
            "id": self.id, "role": self.role, "content": self.content, "status": self.status,
            "parent_id": self.parent_id, "created_at": self.created_at,
            "siblings": {"index": self.sibling_index + 1, "count": self.sibling_count, "ids": self.sibling_ids,
                         "attributes": self.sibling_attributes},
            "rating": self.rating, "generation": self.generation,
        }


def generation_dict(message: Message) -> dict | None:
    g = message.generation
    if g is None:
        return None
    return {
        "backend": g.backend, "model": g.model, "adapter": g.adapter, "release_id": g.release_id,
        "steering": g.steering, "attributes": g.attributes.as_dict(),
        "temperature": g.temperature, "top_p": g.top_p, "max_new_tokens": g.max_new_tokens, "seed": g.seed,
        "latency_ms": g.latency_ms, "first_token_ms": g.first_token_ms,
        "prompt_tokens": g.prompt_tokens, "completion_tokens": g.completion_tokens,
        "finish_reason": g.finish_reason, "error": g.error,
    }


def safety_dict(message: Message) -> dict | None:
    """What the safety guard decided about an answer, as a user may see it: verdict and score (the
    model's withdrawn text stays with the operators)."""
    safety = message.generation.safety if message.generation is not None else None
    if not safety:
        return None
    return {"verdict": safety.get("verdict"), "score": safety.get("score")}


def latest_ratings(store: Store, user_id: str, message_ids: list[str]) -> dict[str, dict]:
    """The user's latest rating of each message, in one query, as the view shows it."""
    return {mid: {"value": int(r.value), "reasons": list(r.reasons or []), "comment": r.comment or ""}
            for mid, r in store.conversations.latest_ratings(user_id, message_ids).items()}


def thread_view(store: Store, conversation_id: str, user_id: str, *, leaf_id: str | None = None) -> list[MessageView]:
    """The branch ending at `leaf_id` (default: the current branch), as the user sees it.
    The caller has already checked that the conversation is the user's."""
    everything = store.conversations.get_messages(conversation_id)
    if not everything:
        return []
    thread = store.conversations.thread(conversation_id, leaf_id)
    children: dict[tuple[str | None, str], list[str]] = {}
    attributes: dict[str, dict] = {}
    for m in everything:
        children.setdefault((m.parent_id, m.role), []).append(m.id)
        if m.generation is not None:
            attributes[m.id] = m.generation.attributes.as_dict()
    ratings = latest_ratings(store, user_id, [m.id for m in thread if m.role == "assistant"])
    views = []
    for m in thread:
        sibs = children.get((m.parent_id, m.role), [m.id])
        views.append(MessageView(
            id=m.id, role=m.role, content=m.content, status=m.status, parent_id=m.parent_id,
            created_at=m.created_at.isoformat(), sibling_ids=sibs, sibling_index=sibs.index(m.id),
            rating=ratings.get(m.id), generation=generation_dict(m),
            sibling_attributes=[attributes.get(s, {}) for s in sibs] if m.role == "assistant" else [],
        ))
    return views


def descend(store: Store, conversation_id: str, start_id: str) -> str:
    """The leaf reached from `start_id` by following, at each fork, the kept child (else the newest):
    where the branch goes when the user switches to sibling `start_id`."""
    everything = store.conversations.get_messages(conversation_id)
    chosen = store.conversations.kept_siblings(conversation_id)
    kids: dict[str, list[str]] = {}
    for m in everything:
        if m.parent_id is not None:
            kids.setdefault(m.parent_id, []).append(m.id)
    node = start_id
    while kids.get(node):
        options = kids[node]
        pick = chosen.get(node)
        node = pick if pick in options else options[-1]
    return node


# --------------------------------------------------------------------------- safe display

_FENCE = re.compile(r"(^|\n)(```|~~~)[^\n]*\n.*?(\n\2[ \t]*(?=\n|$)|$)", re.S)
_INLINE_CODE = re.compile(r"(`+)(?:(?!\1).)+?\1", re.S)


def _escape_outside_inline_code(text: str) -> str:
    out, pos = [], 0
    for m in _INLINE_CODE.finditer(text):
        out.append(text[pos:m.start()].replace("<", "&lt;"))
        out.append(m.group(0))
        pos = m.end()
    out.append(text[pos:].replace("<", "&lt;"))
    return "".join(out)


def display_markdown(text: str) -> str:
    """Markdown for display with every HTML tag outside code shown as text."""
    out, pos = [], 0
    for m in _FENCE.finditer(text):
        out.append(_escape_outside_inline_code(text[pos:m.start()]))
        out.append(m.group(0))
        pos = m.end()
    out.append(_escape_outside_inline_code(text[pos:]))
    return "".join(out)
