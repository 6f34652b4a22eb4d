"""What operators' reviews of mined events add up to: estimated precision, and a gold file.

- `precision(reviewed)`: per category and per week (the week the event was mined, Monday-based,
  UTC), the share of reviewed events the reviewer called correct, with a Wilson 95% interval, and
  the same over all weeks. Wilson rather than the bootstrap used for the gold metrics: here a cell
  is one binomial proportion, often of a handful of reviews, and Wilson stays inside [0, 1] and is
  honest at n = 3 where the normal interval is not.
  `by_version` gives the same per extractor version (`"<extractor> <extractor_version>"`, as the
  events store it): a training set's card and a canary's verdict name the versions whose events they
  used, and this is the estimate of those versions' precision.
- `gold_records(store, reviewed)` / `export_gold(store, path)`: the reviews as gold JSON lines
  (`feedback.extract.gold`'s format): one record per reviewed user message, holding the
  conversation on that message's branch up to the message, and its reviewed events as feedback
  items — "correct" as mined, "wrong_category" with the corrected category, "not_feedback" as
  nothing. `"annotated_messages"` names the one message that was looked at, so evaluating an
  extractor on the file scores that message only (the others were never annotated).

Design choices:
- A precision estimate, not recall: a review sees what was mined, never what was missed. Recall
  needs gold conversations annotated in full (`hh_gold.jsonl`).
- The sample the panel draws is uniform over unreviewed events (`Events.review_sample`), so a
  category's reviewed share estimates that category's precision without weighting.
- Records carry no split, so `load_gold(..., split="dev")` never mixes them into the tuning set
  by accident; `source.dataset` is "advisor-reviews" with the conversation and message ids.
"""

from __future__ import annotations

import json
import math
from collections import defaultdict
from collections.abc import Sequence
from datetime import datetime, timedelta, timezone
from pathlib import Path
from typing import TYPE_CHECKING

from store.analytics import branch_histories
from store.taxonomy import CATEGORY_IDS

if TYPE_CHECKING:
    from store import ReviewedEvent, Store

ALL = "all"
Z95 = 1.959964


def wilson(k: int, n: int, z: float = Z95) -> tuple[float, float, float]:
    """(k/n, low, high): the Wilson score interval for a binomial proportion; (0, 0, 1) for n = 0."""
    if n <= 0:
        return 0.0, 0.0, 1.0
    p = k / n
    denom = 1 + z * z / n
    centre = (p + z * z / (2 * n)) / denom
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / denom
    return p, max(0.0, centre - half), min(1.0, centre + half)


def week_of(when: datetime) -> str:
    """The Monday (UTC) of the week `when` falls in, as an ISO date."""
    if when.tzinfo is not None:
        when = when.astimezone(timezone.utc)
    day = when.date()
    return (day - timedelta(days=day.weekday())).isoformat()


def version_of(r: ReviewedEvent) -> str:
    """The extractor and its version, as `store.analytics.extractor_versions` names them."""
    return f"{r.extractor} {r.extractor_version or ''}".strip()


def _cell(k: int, n: int) -> dict:
    p, low, high = wilson(k, n)
    return {"reviewed": n, "correct": k, "precision": round(p, 4), "low": round(low, 4), "high": round(high, 4)}


def precision(reviewed: Sequence[ReviewedEvent]) -> dict:
    """Estimated precision per category (and all categories) by week and overall, with Wilson
    95% intervals, plus what the wrong ones really were (`corrections`)."""
    counts: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    versions: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
    corrections: dict[str, dict[str, int]] = {c: defaultdict(int) for c in CATEGORY_IDS}
    for r in reviewed:
        ok = int(r.verdict == "correct")
        for category in (r.category, ALL):
            for week in (week_of(r.mined_at), ALL):
                counts[(week, category)][0] += ok
                counts[(week, category)][1] += 1
            cell = versions[(version_of(r), category)]
            cell[0] += ok
            cell[1] += 1
        if not ok and r.category in corrections:
            corrections[r.category][r.true_category or "not_feedback"] += 1
    weeks = sorted({w for w, _ in counts if w != ALL})
    return {
        "method": "share of reviewed events called correct; Wilson 95% interval",
        "weeks": [{"week": w, "category": c, **_cell(*counts[(w, c)])}
                  for w in weeks for c in (*CATEGORY_IDS, ALL) if (w, c) in counts],
        "overall": {c: _cell(*counts[(ALL, c)]) for c in (*CATEGORY_IDS, ALL)},
        "by_version": [{"version": v, "category": c, **_cell(*versions[(v, c)])}
                       for v in sorted({v for v, _ in versions}) for c in (*CATEGORY_IDS, ALL) if (v, c) in versions],
        "corrections": {c: dict(v) for c, v in corrections.items()},
    }


def gold_records(store: Store, reviewed: Sequence[ReviewedEvent]) -> list[dict]:
    """One gold record per reviewed user message (see the module docstring), in mining order."""
    by_message: dict[str, list[ReviewedEvent]] = defaultdict(list)
    for r in reviewed:
        by_message[r.message_id].append(r)
    histories = branch_histories(store, list(by_message))
    records = []
    for message_id, events in by_message.items():
        message = store.conversations.get_message(message_id)
        history = histories.get(message_id, ())
        index = len(history)
        items, seen = [], set()
        for r in sorted(events, key=lambda e: (e.span_start, e.span_end)):
            category = r.true_category
            if category is None or (category, r.span) in seen:
                continue  # not feedback; or the same span found by two extractors
            seen.add((category, r.span))
            items.append({"message": index, "category": category, "span": message.content[r.span_start:r.span_end]})
        records.append({
            "id": f"review/{message_id}",
            "messages": [*({"role": role, "content": text} for role, text in history),
                         {"role": "user", "content": message.content}],
            "feedback": items,
            "annotated_messages": [index],
            "source": {"dataset": "advisor-reviews", "conversation_id": events[0].conversation_id,
                       "message_id": message_id, "events": [r.event_id for r in events],
                       "reviewers": sorted({r.reviewer for r in events}),
                       "reviewed_at": max(r.reviewed_at for r in events).isoformat()},
        })
    return records


def export_gold(store: Store, path: str | Path, *, extractor: str | None = None) -> int:
    """Write the reviewed events as gold JSON lines; returns how many records (messages)."""
    records = gold_records(store, store.events.reviewed_events(extractor=extractor))
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records), encoding="utf-8")
    tmp.replace(path)  # a reader never sees half a file
    return len(records)
