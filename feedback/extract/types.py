"""What every extractor takes and returns.

Design choices:
- The unit of work is a `Window`: one user message (the only place a span may come from), the
  assistant answer right before it, and the user message that answer replied to. That is all the
  context the taxonomy needs (a rephrase restates the previous request; a clarification points
  at the answer), it is what the store can hand out incrementally, and the gold set is cut into
  the same windows, so evaluation measures exactly what production runs.
- A window may also carry its whole conversation before the message (`history`, on the message's
  own branch) and the conversation it belongs to (`conversation`): the LLM extractor gives the
  model whole conversations, as Don-Yahiya et al. did, and groups windows by conversation; the
  fast extractor ignores both.
- Spans are located in the user's own text and carry offsets into it; an extractor can never
  emit text that is not a substring of the message (`locate_span` is the only way to make one).
- Extractors report, besides spans, counters of what they dropped and why (`stats`) and errors
  as strings; a job row stores both.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Protocol


@dataclass(frozen=True)
class Window:
    key: Hashable  # message id in the store; (conversation id, message index) for gold files
    user: str  # the message that may hold feedback
    assistant: str  # the answer right before it
    previous_user: str | None = None  # the request that answer replied to
    conversation: Hashable | None = None  # windows of one conversation share it (None: a window alone)
    # (role, content) of every message before `user` on its branch, oldest first; empty when unknown
    # (then the conversation is previous_user, assistant, user).
    history: tuple[tuple[str, str], ...] = ()

    def messages(self) -> list[tuple[str, str]]:
        """The conversation up to and including `user`, as (role, content) pairs."""
        if self.history:
            return [*self.history, ("user", self.user)]
        first = [("user", self.previous_user)] if self.previous_user is not None else []
        return [*first, ("assistant", self.assistant), ("user", self.user)]


@dataclass(frozen=True)
class Span:
    category: str
    start: int
    end: int
    text: str
    extractor: str


@dataclass
class BatchResult:
    spans: list[list[Span]]  # aligned with the windows
    stats: Counter = field(default_factory=Counter)  # dropped items by reason, embeddings used, ...
    errors: list[str] = field(default_factory=list)


class Extractor(Protocol):
    name: str  # stored in feedback_events.extractor: fast | llm
    version: str

    def extract(self, windows: Sequence[Window]) -> BatchResult: ...


class ExtractorUnavailable(RuntimeError):
    """The extractor cannot run at all right now (e.g. the model server is down). The runner stops
    without advancing its watermark, so the next run retries the same messages."""


_QUOTES = str.maketrans({"\u2018": "'", "\u2019": "'", "\u201c": '"', "\u201d": '"', "\u00a0": " "})
_STRIP = " \t\r\n\"'`\u2018\u2019\u201c\u201d\u2026"
MIN_SPAN_CHARS = 2


def locate_span(text: str, span: str) -> tuple[int, int] | None:
    """Offsets of `span` in `text`: exact first, then ignoring case, curly quotes and runs of
    whitespace (models often normalise those), then without trailing punctuation the model may
    have added. Returns None when it is not the user's text."""
    if not isinstance(span, str):
        return None
    stripped = span.strip(_STRIP)
    one_less = stripped[:-1] if stripped[-1:] in ".!?,;:" else stripped
    for needle in dict.fromkeys((stripped, one_less, stripped.rstrip(".!?,;:").strip(_STRIP))):
        if len(needle) < MIN_SPAN_CHARS or not any(ch.isalnum() for ch in needle):
            continue
        i = text.find(needle)
        if i >= 0:
            return i, i + len(needle)
        # One character maps to one, so offsets in the folded text are offsets in `text`.
        folded, folded_needle = text.translate(_QUOTES), needle.translate(_QUOTES)
        pattern = r"\s+".join(re.escape(part) for part in folded_needle.split())
        m = re.search(pattern, folded, flags=re.IGNORECASE)
        if m:
            return m.start(), m.end()
    return None


def make_span(text: str, start: int, end: int, category: str, extractor: str) -> Span:
    """A span from offsets, trimmed of surrounding whitespace."""
    while start < end and text[start].isspace():
        start += 1
    while end > start and text[end - 1].isspace():
        end -= 1
    return Span(category, start, end, text[start:end], extractor)
