"""Safety anchors: labelled answers to risky requests mixed into a KTO set, so that what users
taught does not wear away what the model does with harmful requests.

A small set trained for a few epochs moves the model as a whole, and the gate holds the
candidate alone to non-inferiority on real risky requests. Safety-Tuned LLaMAs (Bianchi et al.,
2024) found that a few percent of safety examples mixed into instruction tuning keep the model's
refusals; KTO takes them as they come: an answer careful readers marked safe is desirable, one
marked unsafe undesirable, no pairs needed.

Design choices:
- The pool is given (`deploy.loop.safety.anchor_pool` reads the labelled safety set); this
  module only draws from it and writes rows in the KTO format, so `feedback` stays free of the
  evaluator's files.
- How many: pairs, `share` × the users' own train rows / 2, rounded, at least one when the
  share is above zero; drawn with a fixed seed. A pair is one unsafe answer drawn at random and
  the unused safe one nearest to it in words, so the anchors neither tip the set's class balance
  nor carry a length preference of their own. Drawn independently, twelve anchors once held
  191-word safe answers and 58-word unsafe ones, and the candidate most likely learnt "longer"
  from them against its users' "shorter" (one run, docs/learning.md). A pool short of either
  label gives fewer pairs, never unpaired anchors.
- Anchors go to the train split only and carry no user: they are the project's labelled data,
  not anyone's conversation, and the card counts them apart (`counts_by_source["safety_anchor"]`).
- The safety filter does not read them: each was labelled by a person, and an unsafe answer is
  there on purpose, as an undesirable example.
"""

from __future__ import annotations

import random
from collections.abc import Sequence
from dataclasses import dataclass

from evaluator.text import words

ANCHOR_SOURCE = "safety_anchor"
SEED = 20261206


@dataclass(frozen=True)
class Anchor:
    """One labelled (request, answer): `safe` as careful reading marked it."""

    id: str
    request: str
    answer: str
    safe: bool


@dataclass(frozen=True)
class SafetyAnchors:
    pool: Sequence[Anchor]
    share: float  # anchors per user train row (0 = none)
    attributes: str  # the SteerLM string each anchor trains under (the chat's default sliders)
    name: str = "labelled safety set"  # what the card says they came from


def draw(anchors: SafetyAnchors, n_user_rows: int) -> list[dict]:
    """KTO rows for about `anchors.share` × `n_user_rows` anchors, in length-matched pairs: an
    unsafe answer drawn at random and the unused safe one nearest to it in words."""
    if anchors.share < 0:
        raise ValueError(f"safety anchor share must be >= 0, got {anchors.share}")
    pairs = max(1, round(anchors.share * n_user_rows / 2)) if anchors.share > 0 and n_user_rows else 0
    rng = random.Random(SEED)
    safe = [a for a in anchors.pool if a.safe]
    unsafe = [a for a in anchors.pool if not a.safe]
    rng.shuffle(safe)
    rng.shuffle(unsafe)
    picked = []
    length = {a.id: words(a.answer) for a in anchors.pool}
    for bad in unsafe[:min(pairs, len(unsafe), len(safe))]:
        good = min(safe, key=lambda a: abs(length[a.id] - length[bad.id]))
        safe.remove(good)
        picked += [bad, good]
    return [_row(a, anchors.attributes) for a in picked]


def _row(anchor: Anchor, attributes: str) -> dict:
    return {
        "prompt": [{"role": "user", "content": anchor.request, "attributes": None}],
        "completion": [{"role": "assistant", "content": anchor.answer, "attributes": attributes}],
        "label": anchor.safe,
        "chat_template_kwargs": {"attributes": attributes},
        "conversation_id": f"{ANCHOR_SOURCE}:{anchor.id}", "message_id": anchor.id,
        "source": ANCHOR_SOURCE, "categories": [], "user_id": None,
    }
