"""The natural-feedback taxonomy: five categories of feedback that users give without being asked.

After Don-Yahiya et al. (2024), "Naturally Occurring Feedback is Common, Extractable and Useful",
who build on Petrak et al. (2023). The ids are fixed: they are stored in `feedback_events.category`,
written into training sets and shown on the operator screen, so never rename one.

A feedback is a span of a user message that refers to the assistant message right before it.
A conversation's first user message is never feedback: there is no answer yet to react to.
"""

from __future__ import annotations

from dataclasses import dataclass

REPEAT_REPHRASE = "repeat_rephrase"
AWARE_WITH_CORRECTION = "aware_with_correction"
AWARE_WITHOUT_CORRECTION = "aware_without_correction"
ASK_CLARIFICATION = "ask_clarification"
POSITIVE = "positive"


@dataclass(frozen=True)
class Category:
    id: str
    name: str
    definition: str
    examples: tuple[str, ...]
    # Whether the feedback says the answer fell short (KTO "undesirable") or did well ("desirable").
    polarity: str  # negative | positive | neutral


CATEGORIES: tuple[Category, ...] = (
    Category(
        REPEAT_REPHRASE,
        "Repeat or rephrase",
        "The user asks again for what they already asked in their previous message, in the same or "
        "other words, because the answer missed it. The request is not new: it restates the earlier one.",
        ("Let me ask again: how do I get my toddler to sleep through the night?",
         "I mean, what should I actually say to my landlord?"),
        "negative",
    ),
    Category(
        AWARE_WITH_CORRECTION,
        "Make aware with correction",
        "The user says the answer is wrong, unsuitable or missed something, and adds the information "
        "or instruction needed to fix it (a fact the answer got wrong, a constraint it ignored, what "
        "they actually meant).",
        ("No, I work night shifts, so going to bed at ten is impossible.",
         "That's for renters, but I own the flat."),
        "negative",
    ),
    Category(
        AWARE_WITHOUT_CORRECTION,
        "Make aware without correction",
        "The user says the answer is wrong, unhelpful or off the mark, without saying what the right "
        "answer would be. Sarcasm counts ('great, another useless answer').",
        ("That's not what I asked.", "This doesn't help at all."),
        "negative",
    ),
    Category(
        ASK_CLARIFICATION,
        "Ask for clarification",
        "The user asks about something in the answer itself: a term, a step, a claim they did not "
        "understand or want spelled out. A question about something the answer did not mention is a "
        "new request, not a clarification.",
        ("What do you mean by a wind-down routine?", "How exactly do I do the first step?"),
        "neutral",
    ),
    Category(
        POSITIVE,
        "Positive feedback",
        "The user says the answer helped, was right or was good, or thanks the assistant for it. "
        "Thanks for future help ('thanks in advance') or gratitude aimed at someone else is not "
        "feedback on the answer.",
        ("Thanks, that's really helpful!", "That worked, I slept much better."),
        "positive",
    ),
)

CATEGORY_IDS: tuple[str, ...] = tuple(c.id for c in CATEGORIES)
BY_ID: dict[str, Category] = {c.id: c for c in CATEGORIES}
NEGATIVE: frozenset[str] = frozenset(c.id for c in CATEGORIES if c.polarity == "negative")

