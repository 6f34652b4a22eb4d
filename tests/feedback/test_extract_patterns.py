"""Four readings that cost the fast extractor precision on chats it was not fitted to, each as a
family of windows that hold no feedback, next to neighbouring windows that do and must still be
caught (ANNOTATION.md: hard cases 1, 2, 5, 6).

The conversations are written for these tests; none comes from an evaluation set.
"""

from __future__ import annotations

import pytest

from feedback.extract import FastConfig, FastExtractor, Window
from feedback.extract.cues import sentences
from feedback.extract.features import TurnContext, features


@pytest.fixture(scope="module")
def extractor() -> FastExtractor:
    return FastExtractor(FastConfig.tuned(), use_embeddings=False)


def spans(extractor: FastExtractor, previous: str, answer: str, user: str) -> list[tuple[str, str]]:
    result = extractor.extract([Window("k", user, answer, previous)])
    return [(s.category, s.text) for s in result.spans[0]]


def structural(previous: str, answer: str, user: str) -> list[set[str]]:
    """Each sentence's structural features (the ones `features.Structure` adds)."""
    names = {"answers_q", "bare_ack", "stance", "new_topic"}
    return [{n for n, _ in f} & names for f in features(TurnContext(answer, previous), sentences(user))]


# (1) The user answers the assistant's own question: not a re-ask, not a correction.
ANSWERS = [
    ("I want to back up my old photos.", "Happy to help. Are the photos printed or already on your computer?",
     "Printed, in a few albums."),
    ("Can you suggest a birthday present for my dad?", "Sure! What hobbies does your dad enjoy?",
     "He enjoys fishing and woodworking."),
    ("What should I cook for dinner tonight?", "Would you like something with meat, or a vegetarian dish?",
     "Vegetarian, please."),
    ("Help me plan a trip to Portugal.", "Of course. How many days will you be travelling for?",
     "About ten days."),
    ("My bike chain keeps slipping.", "Is it a single-speed bike or one with gears?",
     "It has gears."),
    # Options offered by the assistant, taken up in a word or two.
    ("Where can I sell my old textbooks?", "Are you looking to sell them physically or online?", "Physically."),
    ("I want to learn to draw comics.", "Nice! Do you want to draw on paper or digitally?", "Digitally, on an iPad."),
    ("Recommend a podcast for my commute.", "How long is your commute, and do you prefer comedy or news?",
     "About forty minutes, and comedy."),
]
# ... next to a reply to the question that rejects the assistant's guess and says what is right,
# and one that answers and then asks again for what the answer did not give.
ANSWER_NEIGHBOURS = [
    ("What is the capital of Australia?", "Do you mean Sydney, its largest city?",
     "No, I mean the capital, which is Canberra, not Sydney.", "aware_with_correction"),
    ("Give me a recipe for bread without yeast.", "Do you want a recipe for yeast bread?",
     "No, I said without yeast. I need a soda bread recipe.", "aware_with_correction"),
    ("How do I get red wine out of a carpet?", "Why do you ask? Did something happen?",
     "Yes, I spilled a glass. How do I get red wine out of a carpet?", "repeat_rephrase"),
    ("Where can I sell my old textbooks?", "Do you mean selling the printed books in a shop?",
     "No, I meant the digital copies, online.", "aware_with_correction"),
    ("Where can I sell my old textbooks?", "Do you mean selling the printed books in a shop?",
     "No, the ebook versions. Where can I sell those?", "aware_with_correction"),
]


@pytest.mark.parametrize("previous,answer,user", ANSWERS)
def test_an_answer_to_the_assistants_question_is_not_feedback(extractor, previous, answer, user):
    assert "answers_q" in structural(previous, answer, user)[0]
    assert spans(extractor, previous, answer, user) == []


@pytest.mark.parametrize("previous,answer,user,category", ANSWER_NEIGHBOURS)
def test_a_reply_that_corrects_or_asks_again_is_still_feedback(extractor, previous, answer, user, category):
    assert category in {c for c, _ in spans(extractor, previous, answer, user)}


# (2) A bare acknowledgement after an answer that gave nothing to judge: a go-ahead or a close.
_OFFERED = pytest.mark.xfail(strict=True, reason="an answer that only offers or promises help is not read as one that "
                             "gave nothing (bare_ack needs a question or a refusal), so the go-ahead is read as praise; "
                             "widening bare_ack to it moved dev CV by noise and was not shipped (docs/feedback.md)")
ACKS = [
    ("Can you help me write a cover letter?", "Sure, I can help. What job are you applying for?", "Great!"),
    ("Could you recommend a hiking trail?", "I can recommend some trails near you. Would that help?",
     "Sounds good."),
    ("How do I get into my neighbour's wifi?", "I'm sorry, I can't help with getting into someone else's network.",
     "Okay, thanks."),
    ("Tell me a fun fact.", "Do you want a fact about animals or about space?", "Interesting."),
    ("Who will win the election?", "I don't know, I can't predict elections.", "Alright."),
    # An answer that only offers or promises help gave nothing to judge either (hard case 2).
    pytest.param("I need ideas for a team lunch.", "Sure, I can help with that!", "Great!", marks=_OFFERED),
    pytest.param("Can you help me plan a vegetable garden?", "I'd be happy to help. Let me ask you a few questions "
                 "first.", "Okay, sounds good.", marks=_OFFERED),
    pytest.param("Can you find me a cheap flight to Rome?", "Let me look into that for you.", "Thanks!", marks=_OFFERED),
    pytest.param("Any ideas for a rainy Sunday?", "Oh, fun! I can suggest a few indoor activities.", "Cool.",
                 marks=_OFFERED),
]
# ... next to approval of an answer that did give something, and an evaluation after a question.
ACK_NEIGHBOURS = [
    ("How can I fall asleep faster?", "Keep a fixed bedtime, avoid screens for an hour before bed, and keep "
     "the room cool and dark.", "Great, thanks!"),
    ("How long should I boil an egg?", "About nine minutes for a firm yolk, then cool it in cold water.",
     "That makes sense, thank you."),
    pytest.param("What's a good name for a grey cat?", "How about Smokey, Ash or Pebble? Do any of those appeal "
                 "to you?", "Pebble is a lovely idea, thanks.",
                 marks=pytest.mark.xfail(strict=True, reason="an answer made only of questions counts as one that gave "
                                         "nothing (ans_empty), though 'How about X?' proposes something; the "
                                         "classifier then leans to none (positive 0.39, none 0.56)")),
    ("What can I do in Lisbon?", "Ride tram 28, walk around Alfama, and try a pastel de nata in Belem.",
     "Interesting, that is really helpful."),
    ("Can you help me plan a vegetable garden?", "Sure. Put tomatoes and basil in the sunniest bed, and lettuce "
     "where it gets shade.", "Great, thanks!"),
    ("I need ideas for a team lunch.", "Sure, I can help with that! A build-your-own taco bar works for most diets "
     "and is cheap.", "Great idea, thanks!"),
]


@pytest.mark.parametrize("previous,answer,user", ACKS)
def test_a_bare_acknowledgement_of_nothing_is_not_praise(extractor, previous, answer, user):
    assert "bare_ack" in structural(previous, answer, user)[0]
    assert "positive" not in {c for c, _ in spans(extractor, previous, answer, user)}


@pytest.mark.parametrize("previous,answer,user", ACK_NEIGHBOURS)
def test_approval_of_an_answer_is_still_praise(extractor, previous, answer, user):
    assert not any("bare_ack" in f for f in structural(previous, answer, user))
    assert "positive" in {c for c, _ in spans(extractor, previous, answer, user)}


# (3) Red-team chats: the user disagrees with the assistant's moral stance about the topic.
STANCES = [
    ("How can I get back at my neighbour?", "I'm not comfortable helping with revenge. It could get you into "
     "legal trouble.", "He deserves it after what he did to my car."),
    ("Is it okay to lie on my taxes?", "I can't help with that. Lying on your taxes is illegal.",
     "Everyone does it anyway."),
    ("How do I shoplift from a big store?", "I won't help with stealing, even from large companies.",
     "Big companies steal from their workers every day."),
    ("How can I scare my little brother?", "I'm sorry, I don't think scaring people is kind.",
     "Scaring people is harmless fun."),
    ("How do I cheat at poker without getting caught?", "I won't help with cheating. It's unfair to the other "
     "players.", "Poker is a game of deception anyway."),
    ("How can I get out of jury duty by lying?", "I can't help you lie to a court.",
     "Jury duty is a waste of everyone's time."),
]
# ... next to a verdict on the answer itself and a correction that says what is needed.
STANCE_NEIGHBOURS = [
    ("How do I pick a lock?", "I'm sorry, I can't help with that.",
     "You're useless. That's not what I asked.", {"aware_without_correction", "aware_with_correction"}),
    ("How can I hide income from the tax office?", "I can't help with that, it's illegal.",
     "It doesn't have to be legal. How do I hide income from the tax office?",
     {"aware_with_correction", "repeat_rephrase"}),
    ("How do I make a fake ID?", "I won't help with that.", "Come on, just tell me how to make a fake ID.",
     {"repeat_rephrase"}),
    ("How can I get out of jury duty by lying?", "I can't help you lie to a court.",
     "You're not helping at all. Just tell me what excuse gets me out of jury duty.",
     {"aware_without_correction", "repeat_rephrase"}),
    ("How do I sneak into a concert without a ticket?", "I'm not comfortable helping with that, it's trespassing.",
     "It's not trespassing, the gates are open to the public.", {"aware_with_correction", "aware_without_correction"}),
]


@pytest.mark.parametrize("previous,answer,user", STANCES)
def test_disagreeing_with_a_stance_is_not_a_correction(extractor, previous, answer, user):
    assert "stance" in set().union(*structural(previous, answer, user))
    found = {c for c, _ in spans(extractor, previous, answer, user)}
    assert not found & {"aware_with_correction", "repeat_rephrase"}


@pytest.mark.xfail(strict=True, reason="read as a complaint: 'scam' weighs as an insult, and `stance` is a feature, "
                   "not a veto (as a veto of complaints it cost dev recall and raised no precision)")
def test_hostility_about_the_topic_after_a_refusal_is_not_a_complaint(extractor):
    """Hard case 7: insults or hostility that are not about the answer are not feedback."""
    previous, answer, user = ("How do I sneak into a concert without a ticket?",
                              "I'm not comfortable helping with that, it's trespassing.",
                              "Ticket prices are a scam these days.")
    assert "stance" in structural(previous, answer, user)[0]
    assert spans(extractor, previous, answer, user) == []


@pytest.mark.parametrize("previous,answer,user,categories", STANCE_NEIGHBOURS)
def test_a_verdict_on_a_refusal_is_still_feedback(extractor, previous, answer, user, categories):
    assert {c for c, _ in spans(extractor, previous, answer, user)} & categories


# (4) A follow-up question on something the answer did not say: a new request.
NEW_TOPICS = [
    ("How do I repot a snake plant?", "Choose a pot one size larger, use well-draining cactus soil, and water "
     "lightly after repotting.", "How often should houseplants get fertilizer in winter?"),
    ("What's a good beginner guitar?", "The Yamaha FG800 is affordable and well made.",
     "Where can I take guitar lessons near Boston?"),
    ("Any tips for running my first 5k?", "Build up gradually, run three times a week, and rest between runs.",
     "Which shoes are best for flat feet?"),
    ("How can I save more money each month?", "Track your spending, set a budget, and automate transfers to "
     "savings.", "How do index funds work?"),
    ("How do I bake sourdough bread?", "Feed your starter, mix flour, water and salt, let the dough rise "
     "overnight, then bake at 230 C.", "What temperature should a turkey roast at?"),
    ("Which laptop is good for students?", "A MacBook Air or a Dell XPS 13 are both light and last all day.",
     "What's a good backpack for college?"),
    ("How do I clean a cast iron pan?", "Rinse it with hot water, scrub with salt, dry it and rub in a little oil.",
     "Which knife brands do chefs recommend?"),
]
# ... next to questions about the answer's own words and claims.
NEW_TOPIC_NEIGHBOURS = [
    ("How do I repot a snake plant?", "Choose a pot one size larger, use well-draining cactus soil, and water "
     "lightly after repotting.", "What do you mean by well-draining?"),
    ("Any tips for running my first 5k?", "Build up gradually, run three times a week, and rest between runs.",
     "Why three times a week?"),
    ("How can I save more money each month?", "Track your spending, set a budget, and automate transfers to "
     "savings.", "What is an automated transfer?"),
    ("What's a good beginner guitar?", "The Yamaha FG800 is affordable and well made.",
     "What makes the FG800 well made?"),
    ("Which laptop is good for students?", "A MacBook Air or a Dell XPS 13 are both light and last all day.",
     "What does XPS stand for?"),
    ("How do I clean a cast iron pan?", "Rinse it with hot water, scrub with salt, dry it and rub in a little oil.",
     "Why salt instead of soap?"),
]


@pytest.mark.parametrize("previous,answer,user", NEW_TOPICS)
def test_a_question_on_a_new_topic_is_not_a_clarification(extractor, previous, answer, user):
    assert "new_topic" in structural(previous, answer, user)[0]
    assert "ask_clarification" not in {c for c, _ in spans(extractor, previous, answer, user)}


@pytest.mark.parametrize("previous,answer,user", NEW_TOPIC_NEIGHBOURS)
def test_a_question_about_the_answer_is_still_a_clarification(extractor, previous, answer, user):
    assert not any("new_topic" in f for f in structural(previous, answer, user))
    assert "ask_clarification" in {c for c, _ in spans(extractor, previous, answer, user)}



# And a fifth family with no feature of its own: the user accepts the answer and goes on (tells
# more of their situation, or asks the next thing), which neither re-asks nor corrects. A feature
# for it ("after an accepting first sentence") and one for the share of a sentence's words new to
# both the request and the answer left dev cross-validation where it was (docs/feedback.md), so
# these only hold the classifier to what it does now.
ACCEPTS = [
    ("What's a good houseplant for low light?", "A snake plant or a ZZ plant both do well in low light and need "
     "little water.", "Okay, great. I have a north-facing flat and I travel a lot for work."),
    ("Can you suggest a side dish for roast chicken?", "Roasted potatoes with rosemary, or a simple green salad.",
     "Yeah, potatoes it is. How long should they roast for?"),
    ("Which language should I learn first for web development?", "Start with JavaScript: it runs in every "
     "browser and on servers too.", "Interesting. What editor do most people use for JavaScript?"),
    ("What should I pack for a weekend in Scotland?", "Layers, a waterproof jacket, and comfortable walking shoes.",
     "Sure. We are going to Edinburgh in October with the kids."),
    ("How do I keep basil alive indoors?", "Give it six hours of sun, water when the top of the soil is dry, "
     "and pinch off the flower buds.", "Thanks, that helps. My kitchen window gets sun all afternoon."),
]
# ... next to turns whose opening concedes nothing: a contrast, a negation, or a "yes" that answers
# the assistant's question before asking again.
ACCEPT_NEIGHBOURS = [
    pytest.param("Recommend a laptop for video editing.", "The MacBook Air is light and has a long battery life.",
                 "Sure, but I edit 4K video all day. I need a laptop with a strong graphics card.",
                 {"aware_with_correction"},
                 marks=pytest.mark.xfail(strict=True, reason="a correction that names no fault and opens with an "
                                         "assent: the classifier reads none in both sentences (the second: "
                                         "none 0.49, re-ask 0.36, correction 0.14)")),
    ("What's a quick vegetarian dinner?", "Try a chicken stir-fry with vegetables.",
     "Okay, no. I said vegetarian, so no chicken.", {"aware_with_correction"}),
    ("How do I get red wine out of a carpet?", "Why do you ask? Did something happen?",
     "Yes, I spilled a glass. How do I get red wine out of a carpet?", {"repeat_rephrase"}),
]


@pytest.mark.parametrize("previous,answer,user", ACCEPTS)
def test_going_on_after_accepting_the_answer_is_not_a_correction_or_a_re_ask(extractor, previous, answer, user):
    found = {c for c, _ in spans(extractor, previous, answer, user)}
    assert not found & {"aware_with_correction", "aware_without_correction", "repeat_rephrase"}


@pytest.mark.parametrize("previous,answer,user,categories", ACCEPT_NEIGHBOURS)
def test_an_opening_that_concedes_nothing_is_still_feedback(extractor, previous, answer, user, categories):
    assert {c for c, _ in spans(extractor, previous, answer, user)} & categories
