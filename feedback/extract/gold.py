"""Gold files: load and check them, cut conversations into windows, run an extractor over them.

Gold format (JSON lines), one conversation a line:
    {"id": str, "messages": [{"role": "user"|"assistant", "content": str}],
     "feedback": [{"message": int, "category": str, "span": str}], "split": "train"|"dev"|"test" (optional)}
`message` is the 0-based index of a user message that is not the conversation's first user
message, and `span` a substring of it. Optional `"annotated_messages": [int]` says that only those
user messages were annotated (a review export: the others were never looked at); windows and
scores then cover those messages alone. Errors name the line and say what is wrong. A conversation
taken from HH-RLHF carries `"source": {"dataset": "Anthropic/hh-rlhf", "subset", "row"}`, and a row
below 1000 is refused (those rows are reserved for an unseen evaluation).
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

from feedback.extract.metrics import Prediction
from feedback.extract.types import BatchResult, Extractor, Window
from store.taxonomy import CATEGORY_IDS

DATA_DIR = Path(__file__).resolve().parent.parent / "data"
SHIPPED_GOLD = DATA_DIR / "dev_gold.jsonl"  # templated conversations written by the project: a unit-test set
REAL_GOLD = DATA_DIR / "hh_gold.jsonl"  # real HH-RLHF conversations annotated by careful reading
# Rows below this index of each HH-RLHF test subset are reserved for an evaluation the project does
# not see; a gold file that contains one is refused, so it can never leak into tuning.
HH_RESERVED_ROWS = 1000


class GoldFormatError(ValueError):
    """A gold file line that does not follow the format; the message names the line."""


@dataclass(frozen=True)
class GoldFeedback:
    message: int
    category: str
    span: str


@dataclass(frozen=True)
class GoldConversation:
    id: str
    messages: tuple[dict, ...]
    feedback: tuple[GoldFeedback, ...] = ()
    split: str | None = None
    extra: dict = field(default_factory=dict, compare=False)


def _check(record: object, where: str) -> GoldConversation:
    if not isinstance(record, dict):
        raise GoldFormatError(f"{where}: expected a JSON object, got {type(record).__name__}")
    conv_id, messages, feedback = record.get("id"), record.get("messages"), record.get("feedback", [])
    if not isinstance(conv_id, (str, int)):
        raise GoldFormatError(f"{where}: 'id' must be a string")
    if not isinstance(messages, list) or not messages:
        raise GoldFormatError(f"{where}: 'messages' must be a non-empty list")
    for k, m in enumerate(messages):
        if not isinstance(m, dict) or m.get("role") not in ("user", "assistant", "system") \
                or not isinstance(m.get("content"), str):
            raise GoldFormatError(f"{where}: messages[{k}] needs a role (user|assistant) and a string content")
    if not isinstance(feedback, list):
        raise GoldFormatError(f"{where}: 'feedback' must be a list")
    first_user = next((k for k, m in enumerate(messages) if m["role"] == "user"), None)
    items = []
    for k, f in enumerate(feedback):
        if not isinstance(f, dict):
            raise GoldFormatError(f"{where}: feedback[{k}] must be an object")
        idx, cat, span = f.get("message"), f.get("category"), f.get("span")
        if not isinstance(idx, int) or not 0 <= idx < len(messages) or messages[idx]["role"] != "user":
            raise GoldFormatError(f"{where}: feedback[{k}].message must index a user message, got {idx!r}")
        if idx == first_user:
            raise GoldFormatError(f"{where}: feedback[{k}] is in the first user message, which is never feedback")
        if cat not in CATEGORY_IDS:
            raise GoldFormatError(f"{where}: feedback[{k}].category {cat!r} is not one of {', '.join(CATEGORY_IDS)}")
        if not isinstance(span, str) or not span.strip() or span not in messages[idx]["content"]:
            raise GoldFormatError(f"{where}: feedback[{k}].span is not a substring of message {idx}")
        items.append(GoldFeedback(idx, cat, span))
    extra = {k: v for k, v in record.items() if k not in ("id", "messages", "feedback", "split")}
    scope = extra.get("annotated_messages")
    if scope is not None and not (isinstance(scope, list) and all(
            isinstance(i, int) and 0 <= i < len(messages) and messages[i]["role"] == "user" for i in scope)):
        raise GoldFormatError(f"{where}: 'annotated_messages' must list indices of user messages")
    if scope is not None and any(f.message not in scope for f in items):
        raise GoldFormatError(f"{where}: a feedback item is in a message outside 'annotated_messages'")
    source = extra.get("source") if isinstance(extra.get("source"), dict) else {}
    if "hh-rlhf" in str(source.get("dataset", "")).lower() and not (
            isinstance(source.get("row"), int) and source["row"] >= HH_RESERVED_ROWS):
        raise GoldFormatError(f"{where}: HH-RLHF row {source.get('row')!r} is below {HH_RESERVED_ROWS}; those rows are "
                              "reserved for an evaluation this project does not see and must never be annotated")
    return GoldConversation(str(conv_id), tuple(messages), tuple(items), record.get("split"), extra)


def load_gold(path: str | Path = SHIPPED_GOLD, *, split: str | None = None) -> list[GoldConversation]:
    """Read a gold file; `split` keeps only conversations of that split ('all' or None: every one)."""
    path = Path(path)
    if not path.is_file():
        raise GoldFormatError(f"gold file {path} does not exist")
    out, seen = [], set()
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except json.JSONDecodeError as exc:
            raise GoldFormatError(f"{path}:{n}: not valid JSON ({exc.msg})") from None
        conv = _check(record, f"{path}:{n}")
        if conv.id in seen:
            raise GoldFormatError(f"{path}:{n}: duplicate conversation id {conv.id!r}")
        seen.add(conv.id)
        if split in (None, "all") or conv.split == split:
            out.append(conv)
    if split not in (None, "all") and not out:
        raise GoldFormatError(f"{path} has no conversations with split {split!r}")
    return out


def windows_of(conv: GoldConversation) -> list[Window]:
    """One window per user message that follows an answer to an earlier user message, each with the
    conversation before it (`history`). A record that says which messages were annotated
    (`"annotated_messages": [i, ...]`, as review exports do) yields windows for those only: the
    others were never looked at, so nothing found there can be scored."""
    scope = conv.extra.get("annotated_messages")
    scope = set(scope) if isinstance(scope, list) else None
    out = []
    previous_user: str | None = None
    history = tuple((m["role"], m["content"]) for m in conv.messages)
    for k, m in enumerate(conv.messages):
        if m["role"] != "user":
            continue
        before = conv.messages[k - 1] if k > 0 else None
        if previous_user is not None and before is not None and before["role"] == "assistant" \
                and (scope is None or k in scope):
            out.append(Window((conv.id, k), m["content"], before["content"], previous_user, conversation=conv.id,
                              history=history[:k]))
        previous_user = m["content"]
    return out


def predict(
    extractor: Extractor, conversations: Iterable[GoldConversation], *, chunk: int = 512
) -> tuple[dict[str, list[Prediction]], BatchResult]:
    """Run `extractor` over every window of the conversations; predictions keyed by conversation id.
    The returned BatchResult carries the merged stats and errors (its `spans` is left empty)."""
    conversations = list(conversations)
    predictions: dict[str, list[Prediction]] = {c.id: [] for c in conversations}
    total = BatchResult(spans=[])
    part: list[Window] = []
    for k, conv in enumerate(conversations):  # chunks end at a conversation's end: one prompt each
        part += windows_of(conv)
        if len(part) >= chunk or k == len(conversations) - 1:
            _predict_part(extractor, part, predictions, total)
            part = []
    return predictions, total


def _predict_part(extractor: Extractor, part: list[Window], predictions: dict[str, list[Prediction]],
                  total: BatchResult) -> None:
    if not part:
        return
    result = extractor.extract(part)
    total.stats.update(result.stats)
    total.errors += result.errors
    for window, spans in zip(part, result.spans):
        conv_id, index = window.key
        seen = {(p.message, p.category, p.span) for p in predictions[conv_id]}
        for s in spans:  # a span two extractors both found is one prediction
            if (index, s.category, s.text) not in seen:
                seen.add((index, s.category, s.text))
                predictions[conv_id].append(Prediction(index, s.category, s.text, s.extractor))
