"""Turn whatever a model wrote into candidate feedback items, without ever raising.

Models wrap JSON in code fences, write prose around it, emit several objects, use near-miss keys
or category names, and stop mid-object when they hit the token limit. This module recovers every
well-formed item it can and counts the rest, so the caller can log what was lost:
- every JSON value in the text is decoded (`raw_decode` at each `{` / `[`), fences or not;
- a truncated value yields the elements that were complete before the cut;
- items are found at any depth: `{"feedback": [...]}`, a bare list, or loose `{category, span}`s;
- category spellings are normalised ("Make aware with correction" -> aware_with_correction), and
  so are the paper's names and codes ("Positive Feedback (UR5)", "UR2");
- the paper's keys ("User Response Pattern" / "User Response Text", any case or spacing) are read
  like the project's own ("category" / "span"); its "No Feedback" items are counted, not dropped
  as errors; an item may name the message it quotes (`"message": i`, the gold format's index);
- objects in the paper's format that are not JSON (its template shows `[Insert ...]` placeholders,
  and small models fill them in unquoted) are read field by field.
Span validation against the user's message is not done here; see `llm.py`.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass

from feedback.extract.prompt import UR_CODES
from store.taxonomy import CATEGORY_IDS

_DECODER = json.JSONDecoder()
_FENCE = re.compile(r"```[a-zA-Z]*")
_CATEGORY_KEYS = ("category", "type", "label", "kind", "user_response_pattern", "pattern", "response_pattern")
_SPAN_KEYS = ("span", "text", "quote", "feedback_span", "user_response_text", "response_text")
_MESSAGE_KEYS = ("message", "message_index")
_LIST_KEYS = ("feedback", "items", "events", "spans", "results", "user_responses", "responses")
_UR = re.compile(r"\bur\s*_?([1-5])\b")
_NO_FEEDBACK = {"no_feedback", "none", "no", "n_a", "na", "not_feedback", "no_pattern", "ur6"}
# The paper's template filled in without quotes: a field's value runs to the next field, the
# closing brace or the end of its line.
_LOOSE_FIELD = re.compile(
    r'"?\s*user\s+response\s+(pattern|text)\s*"?\s*:\s*(?:"((?:[^"\\\n]|\\.)*)"|([^\n]*?)(?=\s*,\s*"|\s*\}|[ \t]*(?:\n|$)))',
    re.IGNORECASE)

_ALIASES = {
    "rephrase": "repeat_rephrase",
    "repeat": "repeat_rephrase",
    "repeat_or_rephrase": "repeat_rephrase",
    "repetition": "repeat_rephrase",
    "make_aware_with_correction": "aware_with_correction",
    "awareness_with_correction": "aware_with_correction",
    "correction": "aware_with_correction",
    "make_aware_without_correction": "aware_without_correction",
    "awareness_without_correction": "aware_without_correction",
    "clarification": "ask_clarification",
    "ask_for_clarification": "ask_clarification",
    "clarification_request": "ask_clarification",
    "positive_feedback": "positive",
    "praise": "positive",
}
MAX_ITEMS = 20  # per window: more than this is the model looping


@dataclass(frozen=True)
class Item:
    category: str
    span: str
    message: int | None = None  # the message index the model named, if it named one


def _key(value: str) -> str:
    return re.sub(r"[^a-z0-9]+", "_", value.strip().lower()).strip("_")


def normalise_category(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    code = _UR.search(value.lower())
    if code and f"ur{code.group(1)}" in UR_CODES:  # "Positive Feedback (UR5)", "UR5"
        return UR_CODES[f"ur{code.group(1)}"]
    key = re.sub(r"_?\(.*\)$", "", _key(value))
    key = _ALIASES.get(key, key)
    return key if key in CATEGORY_IDS else None


def is_no_feedback(value: object) -> bool:
    """The paper's "No Feedback" answer (and its spellings)."""
    return isinstance(value, str) and _key(value) in _NO_FEEDBACK


def json_values(text: str, stats: Counter, ranges: list[tuple[int, int]] | None = None) -> list[object]:
    """Every JSON object or array in `text`, in order. Where a value does not decode (truncated,
    or prose with a stray bracket) the scan moves one character on, so the complete elements of
    a truncated list are still found one by one. `ranges` collects where each value was."""
    text = _FENCE.sub(lambda m: " " * len(m.group(0)), text)  # same length: ranges stay offsets into `text`
    values: list[object] = []
    i = 0
    last_failed = last_end = -1
    while True:
        starts = [j for j in (text.find("{", i), text.find("[", i)) if j >= 0]
        if not starts:
            break
        start = min(starts)
        try:
            value, end = _DECODER.raw_decode(text, start)
        except ValueError:
            last_failed, i = start, start + 1
            continue
        values.append(value)
        if ranges is not None:
            ranges.append((start, end))
        last_end = i = end
    if last_failed > last_end:
        stats["truncated_output"] += 1
    return values


def _normalised_keys(value: dict) -> dict:
    return {(_key(k) if isinstance(k, str) else k): v for k, v in value.items()}


def _items_in(value: object, stats: Counter, depth: int = 0) -> list[dict]:
    if depth > 6:
        return []
    if isinstance(value, list):
        out: list[dict] = []
        for v in value:
            if isinstance(v, (dict, list)):
                out += _items_in(v, stats, depth + 1)
            else:
                stats["malformed_item"] += 1
        return out
    if not isinstance(value, dict):
        stats["malformed_item"] += 1  # e.g. {"feedback": "positive"}
        return []
    value = _normalised_keys(value)
    if any(k in value for k in _CATEGORY_KEYS) or any(k in value for k in _SPAN_KEYS):
        return [value]
    out = []
    for key in _LIST_KEYS:
        if key in value:
            out += _items_in(value[key], stats, depth + 1)
    return out


def loose_items(text: str, skip: list[tuple[int, int]]) -> list[dict]:
    """Items in the paper's format that are not JSON: a "User Response Pattern" field, then the
    "User Response Text" field after it, outside the stretches that decoded as JSON."""
    out: list[dict] = []
    pending: dict | None = None
    for m in _LOOSE_FIELD.finditer(text):
        if any(a <= m.start() < b for a, b in skip):
            continue
        value = m.group(2) if m.group(2) is not None else m.group(3).strip().rstrip(",").strip()
        if m.group(1).lower() == "pattern":
            pending = {"user_response_pattern": value.strip("[]\"' ")}
        elif pending is not None:
            try:  # a quoted value keeps JSON's escapes
                pending["user_response_text"] = json.loads(f'"{value}"') if m.group(2) is not None else value
            except ValueError:
                pending["user_response_text"] = value
            out.append(pending)
            pending = None
    return out


def parse_items(text: object, stats: Counter) -> list[Item]:
    """Candidate items from one completion. Everything unusable is counted in `stats` by reason."""
    if not isinstance(text, str):
        stats["no_output"] += 1
        return []
    if not text.strip():
        stats["empty_output"] += 1
        return []
    ranges: list[tuple[int, int]] = []
    truncated_before = stats["truncated_output"]
    values = json_values(text, stats, ranges)
    loose = loose_items(text, ranges)
    if loose and stats["truncated_output"] > truncated_before:
        stats["truncated_output"] -= 1  # what failed to decode was the paper's unquoted template, now read
    raws = [item for v in values for item in _items_in(v, stats)] + loose
    if not raws and not values:
        stats["no_json"] += 1
        return []
    items: list[Item] = []
    for raw in raws:
        category = next((raw[k] for k in _CATEGORY_KEYS if k in raw), None)
        span = next((raw[k] for k in _SPAN_KEYS if k in raw), None)
        if is_no_feedback(category):
            stats["no_feedback"] += 1  # the paper's way of saying there is none: not an error
            continue
        if not isinstance(span, str) or not isinstance(category, str):
            stats["malformed_item"] += 1
            continue
        normalised = normalise_category(category)
        if normalised is None:
            stats["unknown_category"] += 1
            continue
        if len(items) >= MAX_ITEMS:
            stats["too_many_items"] += 1
            continue
        message = next((raw[k] for k in _MESSAGE_KEYS if k in raw), None)
        items.append(Item(normalised, span, message if isinstance(message, int) and not isinstance(message, bool)
                          else None))
    return items
