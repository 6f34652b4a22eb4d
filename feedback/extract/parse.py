"""Turn whatever a model wrote into candidate feedback items, without ever raising.

Models wrap JSON in code fences, write prose around it, emit several objects, use near-miss keys
or category names, and stop mid-object when they hit the token limit. This module recovers every
well-formed item it can and counts the rest, so the caller can log what was lost:
- every JSON value in the text is decoded (`raw_decode` at each `{` / `[`), fences or not;
- a truncated value yields the elements that were complete before the cut;
- items are found at any depth: `{"feedback": [...]}`, a bare list, or loose `{category, span}`s;
- category spellings are normalised ("Make aware with correction" -> aware_with_correction).
Span validation against the user's message is not done here; see `llm.py`.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from dataclasses import dataclass

from feedback.taxonomy import CATEGORY_IDS

_DECODER = json.JSONDecoder()
_FENCE = re.compile(r"```[a-zA-Z]*")
_CATEGORY_KEYS = ("category", "type", "label", "kind")
_SPAN_KEYS = ("span", "text", "quote", "feedback_span")
_LIST_KEYS = ("feedback", "items", "events", "spans", "results")

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


def normalise_category(value: object) -> str | None:
    if not isinstance(value, str):
        return None
    key = re.sub(r"[^a-z]+", "_", value.strip().lower()).strip("_")
    key = _ALIASES.get(key, key)
    return key if key in CATEGORY_IDS else None


def json_values(text: str, stats: Counter) -> list[object]:
    """Every JSON object or array in `text`, in order. Where a value does not decode (truncated,
    or prose with a stray bracket) the scan moves one character on, so the complete elements of
    a truncated list are still found one by one."""
    text = _FENCE.sub(" ", text)
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
        last_end = i = end
    if last_failed > last_end:
        stats["truncated_output"] += 1
    return values


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
    if any(k in value for k in _CATEGORY_KEYS) or any(k in value for k in _SPAN_KEYS):
        return [value]
    out = []
    for key in _LIST_KEYS:
        if key in value:
            out += _items_in(value[key], stats, depth + 1)
    return out


def parse_items(text: object, stats: Counter) -> list[Item]:
    """Candidate items from one completion. Everything unusable is counted in `stats` by reason."""
    if not isinstance(text, str):
        stats["no_output"] += 1
        return []
    if not text.strip():
        stats["empty_output"] += 1
        return []
    values = json_values(text, stats)
    if not values:
        stats["no_json"] += 1
        return []
    items: list[Item] = []
    for raw in (item for v in values for item in _items_in(v, stats)):
        category = next((raw[k] for k in _CATEGORY_KEYS if k in raw), None)
        span = next((raw[k] for k in _SPAN_KEYS if k in raw), None)
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
        items.append(Item(normalised, span))
    return items
