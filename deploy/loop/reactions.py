"""What simulated users say when they react to an answer: real people's words by default.

Two phrasebooks, one shape (`Phrasebook`):
- `real` (the default): feedback spans annotated in the *test* split of the real gold set, the ones
  that read naturally after any advice (`real_reactions.jsonl`, made and explained by
  `tools/data/make_real_reactions.py`, each line naming its HH-RLHF conversation). The fast
  extractor was fitted on the dev split only, so how well it reads these users is a measurement,
  not a given. Real users do not announce a rephrase: they ask again, in other words or with a
  real re-ask ("Do you have any suggestions?"), and open their next question without a marker.
  Real corrections name their own conversation's particulars, so none is portable; a user who
  would correct says a complaint instead.
- `templates`: the round-1 phrases, written so the fast extractor files each under its intended
  category (tests/deploy/loop/test_simulate.py checks them). Kept for unit tests of the pipeline, where a
  known reading is the point; the learning demo uses `real`.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

REAL_REACTIONS = Path(__file__).resolve().parent / "real_reactions.jsonl"
PHRASINGS = ("real", "templates")

# The templates (phrasing "templates").
THANKS = (
    "Thanks, that's really helpful!",
    "Perfect, that makes sense. I'll try that.",
    "Great advice, thank you.",
    "Thank you, that helps a lot.",
)
CORRECTIONS = {
    "short": (
        "No, that's too long. I only have a couple of minutes each morning, so just give me the main point.",
        "No, that's too long for me. I read this on my phone during my commute, so keep it to one or two sentences.",
    ),
    "long": (
        "No, that's too short. I need more detail about my situation, since I work night shifts and sleep during the day.",
        "That's too vague. I need more detail on how to actually do it, because I've never managed this before.",
    ),
    "steps": (
        "That's too vague. Give me concrete numbered steps I can follow tomorrow morning before work.",
        "That's too vague. I need a list of steps I can tick off one by one this week.",
    ),
}
CLARIFICATIONS = ("What do you mean by that?", "Can you explain that?", "I don't understand the last part.")
REPHRASE_PREFIX = "Let me rephrase: "
NEXT_QUESTION_PREFIX = "Another question: "


@dataclass(frozen=True)
class Phrasebook:
    """For one preference: what a satisfied user says, what one says about a miss (instead of a
    correction), asking about the answer, asking again; and how a rephrase and a next question
    open. `reasks` empty: asking again is always the question in other words."""

    name: str
    thanks: tuple[str, ...]
    complaints: tuple[str, ...]
    clarifications: tuple[str, ...]
    reasks: tuple[str, ...]
    rephrase_prefix: str
    next_question_prefix: str


def phrasebook(phrasing: str, prefer: str) -> Phrasebook:
    """The phrasebook a user with preference `prefer` (short | long | steps) speaks from."""
    if phrasing == "templates":
        return Phrasebook("templates", THANKS, CORRECTIONS[prefer], CLARIFICATIONS, (), REPHRASE_PREFIX,
                          NEXT_QUESTION_PREFIX)
    if phrasing != "real":
        raise ValueError(f"phrasing must be one of {', '.join(PHRASINGS)}; got {phrasing!r}")
    by_kind: dict[str, list[str]] = {"thanks": [], "complaint": [], "clarify": [], "reask": []}
    for row in load_real_reactions():
        if row["prefer"] in (None, prefer):  # "unnecessarily lengthy" only from users who want short
            by_kind[row["kind"]].append(row["text"])
    return Phrasebook("real", tuple(by_kind["thanks"]), tuple(by_kind["complaint"]), tuple(by_kind["clarify"]),
                      tuple(by_kind["reask"]), "", "")


def load_real_reactions(path: Path = REAL_REACTIONS) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]
