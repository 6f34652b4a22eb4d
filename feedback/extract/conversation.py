"""Windows back into whole conversations, for extractors that read a conversation at a time.

The store and the gold files hand out windows (one user message each); the paper's extractor
reads whole conversations. `group` puts the windows of one conversation branch together: the
window with the longest history supplies the conversation, and every window whose history and
message are a prefix of it becomes one of its targets (a user turn whose spans are wanted).

Design choices:
- Branches are kept apart: a conversation whose user edited a message or regenerated an answer
  has several branches, and a window on another branch starts a group of its own, so the model
  never sees turns from two branches as one conversation.
- Windows without `conversation` or `history` (hand-made, or from an older caller) are a
  conversation of their own: previous request, answer, message.
- Turns in the history that are not targets (the first request, or turns an earlier run already
  read) are shown to the model but never yield spans: `llm.py` counts a span there as dropped.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from feedback.extract.types import Window


@dataclass
class Conversation:
    messages: list[tuple[str, str]]  # (role, content), oldest first, up to the latest target
    targets: dict[int, list[int]] = field(default_factory=dict)  # message index -> positions of its windows

    def first_user(self) -> int | None:
        return next((k for k, (role, _) in enumerate(self.messages) if role == "user"), None)


def group(windows: Sequence[Window]) -> list[Conversation]:
    """The conversations the windows come from, each with its targets; ordered by first window."""
    order = sorted(range(len(windows)), key=lambda p: (-len(windows[p].history), p))
    by_key: dict[object, list[Conversation]] = {}
    out: list[Conversation] = []
    for pos in order:
        w = windows[pos]
        messages = w.messages()
        index = len(messages) - 1
        home = None
        if w.conversation is not None and w.history:
            for conv in by_key.get(w.conversation, []):
                if len(conv.messages) > index and conv.messages[:index + 1] == messages:
                    home = conv
                    break
        if home is None:
            home = Conversation(messages)
            out.append(home)
            if w.conversation is not None and w.history:
                by_key.setdefault(w.conversation, []).append(home)
        home.targets.setdefault(index, []).append(pos)
    out.sort(key=lambda c: min(p for ps in c.targets.values() for p in ps))
    return out
