"""Write `dev_gold.jsonl`: the project's own gold set for natural-feedback extraction.

Run `python -m tools.data.make_dev_gold` to regenerate it (deterministic; a test checks that the
shipped file matches this script).

How the set is made, and why:
- Templated conversations: 40 hand-written advice topics (`gold_topics.py`) x 6 conversations, each
  following a turn plan (e.g. "positive, then a clarification about the second answer"). Plans
  rotate so every category is well represented in each split, and hard negatives are planned in:
  a new request phrased like a clarification, sarcasm ("great, another useless answer"), thanks
  inside a new question ("thanks in advance"), a correction of the user's own first message,
  "No, ..." answering the assistant's question, conversations with no feedback at all.
- Hand-written conversations (`HAND`) for cases templates cannot express: mixed feedback in one
  message, "thanks, but that's not what I asked", statements that ask for clarification,
  feedback-like words in a first message.
- Honest hold-out: `split` is `dev` (tuning) or `test` (reporting). The split is by topic AND by
  phrase: dev and test draw their feedback phrasings from disjoint pools, so the test figures
  measure phrasings the extractor's thresholds were never tuned on.
- Span convention: the span is the feedback itself, sentence-aligned; text in the same message
  that is not feedback (a new question after "Thanks!") stays outside the span.
"""

from __future__ import annotations

import json
import random
from pathlib import Path

from tools.data.gold_topics import TOPICS, Topic

OUT = Path(__file__).resolve().parents[2] / "feedback" / "data" / "dev_gold.jsonl"
SEED = 20240607
CONVERSATIONS_PER_TOPIC = 6

# ---------------------------------------------------------------------------- phrase pools (dev, test)

POSITIVE = (
    ("Thanks, that's really helpful!", "Thank you so much, this is exactly what I needed.",
     "Perfect, that makes sense.", "Great advice, I'll try that tonight.", "That worked, thanks a lot!",
     "This is super useful.", "Awesome, thank you!", "Ok, that's a great idea.", "I really appreciate it.",
     "Good point, I hadn't thought of that.", "Makes sense, cheers.", "thx, very helpful"),
    ("Thank you, that helps a lot.", "That's brilliant, thanks!", "This is exactly what I was looking for.",
     "Nice, that's really clear.", "Great, I'll give that a go.", "You're a lifesaver.",
     "Love this, thank you!", "Oh that's clever, thanks.", "Wow, that's actually really helpful.",
     "I tried it last night and it worked!", "Spot on, thanks.", "ty! super helpful"),
)
AWARE_WITHOUT = (
    ("That's not what I asked.", "This doesn't help at all.", "That's not helpful.",
     "You didn't answer my question.", "Hmm, that's wrong.", "I already tried all of that.",
     "That's way too generic.", "Great, another useless answer.", "That makes no sense.",
     "Nope, that's not it."),
    ("That doesn't answer what I asked.", "Not useful, sorry.", "This is just wrong.",
     "You're not really listening to me.", "I've done all of that already and it didn't work.",
     "That's pretty vague.", "Wow, thanks for nothing.", "Oh brilliant, more generic advice.",
     "That's not what I meant.", "Meh, that's not very helpful."),
)
# Prefixes for a correction; "" = the correction alone (no explicit negation).
CORRECTION_PREFIX = (
    ("No, ", "That won't work for me: ", "That doesn't fit my situation. ", "Not quite. ", "Actually, ", ""),
    ("Hmm, no. ", "That's not going to work, ", "You're missing something: ", "That's not right for me. ",
     "Well, ", ""),
)
CLARIFY_TERM = (
    ("What do you mean by {t}?", "Could you explain the {t} part?", "Sorry, what is '{t}'?",
     "How would the {t} thing work in practice?", "Can you say more about {t}?"),
    ("I don't get the bit about {t}. Can you explain?", "What does {t} mean here?",
     "Wait, {t}? What's that?", "Could you elaborate on {t}?", "Can you give an example of {t}?"),
)
CLARIFY_DEICTIC = (
    ("What do you mean by that?", "Can you explain that last part?", "How do I do that exactly?"),
    ("Sorry, I don't follow. What does that mean?", "Could you break that down a bit?",
     "Why would that help?"),
)
REPHRASE_WRAP = (("{r}", "Let me rephrase: {r}", "I'll ask again. {r}"),
                 ("{r}", "Let me try again. {r}", "In other words, {rl}"))
FOLLOW_WRAP = (("{f}", "Next question: {f}", "One more thing: {f}"),
               ("{f}", "Also, {fl}", "Different question: {f}"))
IN_ADVANCE = (("Quick question, thanks in advance: {f}", "Thank you in advance! {f}"),
              ("Thanks in advance for this one: {f}", "Many thanks in advance. {f}"))
NO_ANSWER = (("No, not yet. {f}", "No, I haven't. {f}"), ("Nope, never. {f}", "Not really, no. {f}"))
CHECK_QUESTION = " Have you tried any of this before?"

# Assistant replies to the second user turn, by what that turn was.
REPLY_PREFIX = {
    "pos": "Glad it helped! One more tip: ",
    "awo": "Sorry about that, let me try again. ",
    "awc": "Thanks for telling me, that changes things. ",
    "clar": "Sure. ",
    "reph": "Sorry, let me answer that more directly. ",
    "none": "",
}

# Turn plans: (second user turn, third user turn or None). Rotated across topics.
PLANS: tuple[tuple[str, str | None], ...] = (
    ("pos", None), ("pos_follow", "clar2"), ("awo", None), ("awo_reph", "pos"), ("reph", "pos"),
    ("awc", "pos"), ("clar", "follow"), ("follow", "follow"), ("self_fix", "pos"), ("no_answer", "awo"),
    ("in_advance", "clar2"), ("awc", "awo"), ("newq", "pos"), ("clar", "awc"), ("reph", "follow"),
    ("awc", None), ("follow", "awc"), ("clar_deictic", "pos"), ("reph", "awo"), ("awo_reph", None),
)


def _lower_first(s: str) -> str:
    return s if s.startswith(("I ", "I'")) else s[:1].lower() + s[1:]


class _Composer:
    """Builds one conversation's user turns with their gold spans."""

    def __init__(self, topic: Topic, pool: int, rng: random.Random):
        self.t, self.pool, self.rng = topic, pool, rng
        self.used_followups: list[str] = []

    def pick(self, options: tuple) -> str:
        return self.rng.choice(options[self.pool])

    def followup(self, skip_newq: bool = True) -> str:
        choices = [f for i, f in enumerate(self.t.followups) if not (skip_newq and i == 1)]
        choices = [f for f in choices if f not in self.used_followups] or choices
        f = self.rng.choice(choices)
        self.used_followups.append(f)
        return f

    def turn(self, kind: str, *, term: str) -> tuple[str, list[tuple[str, str]], str]:
        """(text, [(category, span)], reply kind)."""
        t = self.t
        if kind == "pos":
            s = self.pick(POSITIVE)
            return s, [("positive", s)], "pos"
        if kind == "pos_follow":
            s = self.pick(POSITIVE)
            return f"{s} {self.followup()}", [("positive", s)], "none"
        if kind == "awo":
            s = self.pick(AWARE_WITHOUT)
            return s, [("aware_without_correction", s)], "awo"
        if kind in ("reph", "awo_reph"):
            r = t.rephrases[self.rng.randrange(2)]
            text = self.pick(REPHRASE_WRAP).format(r=r, rl=_lower_first(r))
            if kind == "reph":
                return text, [("repeat_rephrase", text)], "reph"
            s = self.pick(AWARE_WITHOUT)
            return f"{s} {text}", [("aware_without_correction", s), ("repeat_rephrase", text)], "reph"
        if kind == "awc":
            prefix = self.pick(CORRECTION_PREFIX)
            body = t.correction if not prefix or prefix.endswith((". ", ": ")) else _lower_first(t.correction)
            text = prefix + body
            return text, [("aware_with_correction", text)], "awc"
        if kind in ("clar", "clar2"):
            s = self.pick(CLARIFY_TERM).format(t=term)
            return s, [("ask_clarification", s)], "clar"
        if kind == "clar_deictic":
            s = self.pick(CLARIFY_DEICTIC)
            return s, [("ask_clarification", s)], "clar"
        if kind == "follow":
            f = self.followup()
            return self.pick(FOLLOW_WRAP).format(f=f, fl=_lower_first(f)), [], "none"
        if kind == "newq":  # phrased like a clarification, about something the answer never mentioned
            return t.followups[1], [], "none"
        if kind == "self_fix":
            return t.self_fix, [], "none"
        if kind == "in_advance":
            return self.pick(IN_ADVANCE).format(f=self.followup()), [], "none"
        if kind == "no_answer":
            return self.pick(NO_ANSWER).format(f=self.followup()), [], "none"
        raise ValueError(f"unknown turn kind {kind!r}")


def _templated(topic: Topic, topic_index: int, pool: int, split: str, rng: random.Random) -> list[dict]:
    out = []
    for j in range(CONVERSATIONS_PER_TOPIC):
        first, second = PLANS[(topic_index * CONVERSATIONS_PER_TOPIC + j) % len(PLANS)]
        c = _Composer(topic, pool, rng)
        answer = topic.answer
        if first == "no_answer" or rng.random() < 0.2:  # the question must not give the plan away
            answer += CHECK_QUESTION
        messages = [{"role": "user", "content": topic.ask}, {"role": "assistant", "content": answer}]
        feedback: list[dict] = []
        term = topic.terms[j % len(topic.terms)]
        for turn_no, (kind, term_now) in enumerate(((first, term), (second, topic.more_term))):
            if kind is None:
                break
            text, spans, reply = c.turn(kind, term=term_now)
            index = len(messages)
            messages.append({"role": "user", "content": text})
            feedback += [{"message": index, "category": cat, "span": span} for cat, span in spans]
            if turn_no == 0:
                messages.append({"role": "assistant", "content": REPLY_PREFIX[reply] + topic.more})
        out.append({"id": f"{topic.key}-{j}", "split": split, "messages": messages, "feedback": feedback})
    return out


# ---------------------------------------------------------------------------- hand-written conversations

U, A = "user", "assistant"
# (id, [(role, text)], [(message index, category, span)])
HAND: tuple[tuple[str, list[tuple[str, str]], list[tuple[int, str, str]]], ...] = (
    ("rome-food", [
        (U, "Can you help me plan a 3-day trip to Rome?"),
        (A, "Day 1: the Colosseum and the Forum. Day 2: the Vatican Museums and St Peter's. Day 3: Trastevere "
            "and the Pantheon. Book the Vatican online to skip the queue."),
        (U, "Thanks, but that's not what I asked. I wanted food recommendations, not sights."),
        (A, "Sorry! Try cacio e pepe at Da Felice in Testaccio, pizza al taglio at Bonci, and gelato at Fatamorgana."),
        (U, "Perfect, that's what I needed!"),
    ], [(2, "aware_with_correction", "Thanks, but that's not what I asked. I wanted food recommendations, not sights."),
        (4, "positive", "Perfect, that's what I needed!")]),
    ("fruit-flies", [
        (U, "How do I get rid of fruit flies in my kitchen?"),
        (A, "Set a trap: a small bowl of apple cider vinegar with a drop of dish soap. Take the trash out daily "
            "and keep fruit in the fridge."),
        (U, "I don't understand the dish soap part."),
        (A, "The soap breaks the surface tension, so the flies sink instead of landing on the vinegar."),
        (U, "Oh, clever. It worked overnight, by the way."),
    ], [(2, "ask_clarification", "I don't understand the dish soap part."),
        (4, "positive", "Oh, clever. It worked overnight, by the way.")]),
    ("journaling", [
        (U, "What's a good way to start journaling?"),
        (A, "Start with three lines a night: what happened, how you felt, and one thing you're grateful for. "
            "Keep the notebook by your bed."),
        (U, "What do you mean when people say 'morning pages'?"),
        (A, "Morning pages are three handwritten pages first thing in the morning, a stream of consciousness, "
            "from Julia Cameron's The Artist's Way."),
        (U, "Can you suggest a good notebook for that?"),
    ], []),
    ("slow-laptop", [
        (U, "My laptop is really slow. What can I do?"),
        (A, "Restart it regularly, uninstall programs you don't use, and scan for malware."),
        (U, "Oh great, 'restart it'. Groundbreaking."),
        (A, "Fair, that's basic. Open Task Manager and look for processes using lots of memory; if the RAM is "
            "maxed out, adding more or moving to an SSD helps most."),
        (U, "Ok the SSD tip is actually useful, thanks."),
    ], [(2, "aware_without_correction", "Oh great, 'restart it'. Groundbreaking."),
        (4, "positive", "Ok the SSD tip is actually useful, thanks.")]),
    ("thank-neighbor", [
        (U, "My neighbor watered my plants for two weeks while I was away. How should I thank her?"),
        (A, "A handwritten card with a small gift works well: homemade cookies, flowers, or a plant of her own."),
        (U, "Would a gift card be too impersonal?"),
        (A, "A gift card is fine if you pair it with a personal note; a card for a local café feels warmer "
            "than a generic one."),
        (U, "Great idea, I'll do the café one."),
    ], [(4, "positive", "Great idea, I'll do the café one.")]),
    ("soft-eggs", [
        (U, "How long should I boil eggs for soft yolks? I'm at sea level."),
        (A, "About 6 to 7 minutes in boiling water, then straight into ice water."),
        (U, "Sorry, I got that wrong: I live in Denver, at about 1,600 m."),
        (A, "At that altitude water boils at about 95°C, so add a minute: 7 to 8 minutes."),
        (U, "That's still too long, the yolk came out solid at 7 minutes."),
    ], [(4, "aware_with_correction", "That's still too long, the yolk came out solid at 7 minutes.")]),
    ("cat-couch", [
        (U, "How do I get my cat to stop scratching the couch?"),
        (A, "Put a tall, sturdy scratching post right next to the couch and put double-sided tape on the "
            "couch arms. Reward her every time she uses the post."),
        (U, "Thanks! But what's the tape for exactly?"),
        (A, "Cats hate sticky paws, so the tape makes the couch unpleasant while the post stays inviting."),
    ], [(2, "positive", "Thanks!"), (2, "ask_clarification", "But what's the tape for exactly?")]),
    ("investing", [
        (U, "I want to start investing but I know nothing. Where do I start?"),
        (A, "First make sure you have an emergency fund and no high-interest debt. Then a low-cost index fund "
            "in a tax-advantaged account is a simple start. Do you have an employer retirement plan?"),
        (U, "No, I'm a freelancer. Which account should I open then?"),
        (A, "As a freelancer in the US, look at a SEP IRA or a Solo 401(k); both let you save much more than a "
            "regular IRA."),
        (U, "That's US stuff, I'm in the UK."),
    ], [(4, "aware_with_correction", "That's US stuff, I'm in the UK.")]),
    ("small-bedroom", [
        (U, "How can I make my small bedroom feel bigger?"),
        (A, "Use light colors on the walls, hang a large mirror opposite the window, and choose furniture with "
            "legs so you can see the floor."),
        (U, "Love the mirror idea. Where should the bed go in a narrow room?"),
        (A, "Put the headboard against the short wall if you can keep 60 cm free on both sides; otherwise push "
            "one side against the long wall."),
    ], [(2, "positive", "Love the mirror idea.")]),
    ("baby-sleep", [
        (U, "How do I get my baby to sleep through the night?"),
        (A, "At six months many babies can learn to self-soothe. A consistent bedtime routine, bath, feed, "
            "book, bed, helps, and put her down drowsy but awake."),
        (U, "Let me ask differently: how do I stop her waking up every two hours at night?"),
        (A, "Check she's getting enough daytime feeds and naps; overtired babies wake more. If she wakes out "
            "of habit, wait a few minutes before going in."),
        (U, "What do you mean by out of habit?"),
    ], [(2, "repeat_rephrase", "Let me ask differently: how do I stop her waking up every two hours at night?"),
        (4, "ask_clarification", "What do you mean by out of habit?")]),
    ("right-word", [
        (U, "I need a word for someone who always sees the bright side. Any ideas?"),
        (A, "'Optimist' is the obvious one; more formally, 'sanguine' or 'Pollyannaish' if it's a bit naive."),
        (U, "Sanguine! That's exactly the word I was looking for."),
    ], [(2, "positive", "That's exactly the word I was looking for.")]),
    ("clogged-sink", [
        (U, "My kitchen sink is clogged. How do I unclog it?"),
        (A, "Try a plunger first, then baking soda and vinegar followed by a kettle of boiling water."),
        (U, "Did both already, still clogged."),
        (A, "Then the clog is probably further down. Use a drain snake, or put a bucket under the sink and "
            "remove the P-trap to clean it out."),
        (U, "Removing the P-trap did it. Thank you!!"),
    ], [(2, "aware_without_correction", "Did both already, still clogged."),
        (4, "positive", "Removing the P-trap did it. Thank you!!")]),
    ("first-apartment", [
        (U, "What should I look for when viewing my first apartment?"),
        (A, "Check the water pressure, the phone signal and the noise at night. Ask about utilities and whether "
            "heating is included in the rent."),
        (U, "Which of those matters most if I work from home?"),
        (A, "Noise and signal: you'll be there all day, and calls need a reliable connection."),
    ], [(2, "ask_clarification", "Which of those matters most if I work from home?")]),
    ("sourdough", [
        (U, "How do I keep my sourdough starter alive?"),
        (A, "Feed it equal weights of flour and water once a day at room temperature, or once a week if it "
            "lives in the fridge."),
        (U, "Can I use whole wheat flour?"),
        (A, "Yes, whole wheat makes it more active because of the extra nutrients."),
        (U, "How do I know when it's ready to bake with?"),
        (A, "When it doubles within 4 to 8 hours of feeding and smells pleasantly sour."),
    ], []),
    ("long-flight", [
        (U, "Any tips for a 10-hour flight?"),
        (A, "Book an aisle seat so you can stretch, bring a neck pillow, and drink plenty of water."),
        (U, "No, I meant tips for flying with a toddler."),
        (A, "Got it. Bring new small toys to unwrap every hour, snacks, and a tablet with downloaded shows. "
            "Give her something to suck on during takeoff and landing."),
        (U, "The unwrapping idea is genius, thank you."),
    ], [(2, "aware_with_correction", "No, I meant tips for flying with a toddler."),
        (4, "positive", "The unwrapping idea is genius, thank you.")]),
    ("cover-letter", [
        (U, "Thank you for yesterday's tips! Now I need help writing a cover letter for a nursing job."),
        (A, "Open with why this hospital, not why you want a job. Pick two stories that show clinical skill and "
            "compassion, and end by asking for an interview."),
        (U, "How long should it be?"),
        (A, "One page, three or four short paragraphs."),
    ], []),
    ("same-answer", [
        (U, "How do I stop overthinking everything?"),
        (A, "Try writing your thoughts down, set a worry time each day, and practise mindfulness."),
        (U, "Isn't there anything practical I can do when I'm stuck in a spiral?"),
        (A, "Try writing your thoughts down and practise mindfulness regularly."),
        (U, "You've given me the same answer twice now."),
    ], [(2, "repeat_rephrase", "Isn't there anything practical I can do when I'm stuck in a spiral?"),
        (4, "aware_without_correction", "You've given me the same answer twice now.")]),
    ("walk-20", [
        (U, "How can I have more energy in the afternoon?"),
        (A, "Take a 20-minute walk after lunch, eat a lighter lunch with protein, and skip coffee after 2pm."),
        (U, "Why 20 minutes?"),
        (A, "It's long enough to raise your heart rate and get daylight, short enough to fit a lunch break."),
        (U, "I tried the walk today and felt way less sleepy. Thanks!"),
    ], [(2, "ask_clarification", "Why 20 minutes?"),
        (4, "positive", "I tried the walk today and felt way less sleepy. Thanks!")]),
    ("gym-anxiety", [
        (U, "I'm anxious about going to the gym for the first time. Any advice?"),
        (A, "Go at quiet hours, like mid-morning, and bring a simple written plan so you always know your next "
            "exercise. Most people are focused on themselves, not on you."),
        (U, "I can only go at 6pm, which is the busiest time."),
        (A, "Then pick a corner routine that needs one bench and dumbbells, so you're not waiting for machines, "
            "and wear headphones to stay in your bubble."),
        (U, "Sounds good. What should the plan include for a total beginner?"),
    ], [(2, "aware_with_correction", "I can only go at 6pm, which is the busiest time.")]),
    ("paint-color", [
        (U, "What paint color goes well with a dark wood floor?"),
        (A, "Warm whites and soft greiges keep it bright; sage green works if you want some color."),
        (U, "Sage green, nice! Would that work in a north-facing room too?"),
        (A, "Yes, but choose a sage with warm undertones, since north light is cool and can make it look grey."),
        (U, "What's an undertone?"),
    ], [(2, "positive", "Sage green, nice!"), (4, "ask_clarification", "What's an undertone?")]),
    ("resume-gap", [
        (U, "How do I explain a two-year gap in my resume?"),
        (A, "Be brief and honest: name the reason, caring for a family member, health, or travel, and pivot to "
            "what you're ready to do now."),
        (U, "I asked how to explain it on the resume itself, not in the interview."),
        (A, "On the resume, add a one-line entry for the period, e.g. 'Career break: family care', with any "
            "courses or freelance work underneath."),
        (U, "Ok that's actually helpful."),
    ], [(2, "aware_with_correction", "I asked how to explain it on the resume itself, not in the interview."),
        (4, "positive", "Ok that's actually helpful.")]),
    ("houseguest", [
        (U, "My friend has been staying on my couch for two months and shows no sign of leaving. What do I do?"),
        (A, "Give a clear, kind deadline: 'I need my space back by the end of the month.' Offer to help with "
            "the search so it doesn't feel like a rejection."),
        (U, "Thanks, great. And what do I say if he asks for more time?"),
        (A, "Acknowledge it's hard, then repeat the date. Offer a small concrete help, like sharing listings, "
            "rather than more time."),
    ], [(2, "positive", "Thanks, great.")]),
    ("plant-care-wrong", [
        (U, "How often should I water a snake plant?"),
        (A, "Water it every two to three days so the soil stays moist."),
        (U, "That's wrong, snake plants rot if you water them that much."),
        (A, "You're right, sorry. Water every two to three weeks, only when the soil is completely dry."),
        (U, "Great, another answer I have to double check."),
    ], [(2, "aware_with_correction", "That's wrong, snake plants rot if you water them that much."),
        (4, "aware_without_correction", "Great, another answer I have to double check.")]),
    ("mentor-thanks", [
        (U, "How do I ask someone senior to be my mentor?"),
        (A, "Don't ask 'will you be my mentor' cold. Ask for one 20-minute conversation about a specific "
            "question, follow up with what you did with their advice, and let the relationship grow."),
        (U, "Should I send them a thank-you note after the first chat?"),
        (A, "Yes, a short note within a day, mentioning one thing you'll act on."),
        (U, "And how often is it okay to reach out after that?"),
    ], []),
    ("bike-commute", [
        (U, "I want to start cycling to work, 12 km each way. How do I prepare?"),
        (A, "Do a test ride on a weekend, pick quieter streets over the fastest route, and carry a spare tube "
            "and a mini pump."),
        (U, "Hmm, how do I change a tube? I've never done it."),
        (A, "Flip the bike, open the brake, remove the wheel, lever one side of the tire off, swap the tube, and "
            "pump it up a little before refitting the tire."),
        (U, "Too many steps at once, I'm lost."),
    ], [(2, "ask_clarification", "Hmm, how do I change a tube?"),
        (4, "aware_without_correction", "Too many steps at once, I'm lost.")]),
    ("party-guests", [
        (U, "I'm hosting eight people for dinner and I panic about cooking. What's easy?"),
        (A, "A tray-bake of chicken thighs and vegetables, a big green salad, and a store-bought dessert. "
            "Everything goes in one oven."),
        (U, "Two of them are vegetarian, so chicken is a problem."),
        (A, "Then make a tray-bake of halloumi, chickpeas and vegetables for everyone; it's just as easy."),
        (U, "Oh nice, everyone can eat that. Thanks!"),
    ], [(2, "aware_with_correction", "Two of them are vegetarian, so chicken is a problem."),
        (4, "positive", "Oh nice, everyone can eat that. Thanks!")]),
)


def _hand(index: int, record: tuple) -> dict:
    conv_id, turns, spans = record
    return {
        "id": f"hand-{conv_id}",
        "split": "dev" if index % 2 == 0 else "test",
        "messages": [{"role": r, "content": c} for r, c in turns],
        "feedback": [{"message": m, "category": cat, "span": s} for m, cat, s in spans],
    }


def build() -> list[dict]:
    rng = random.Random(SEED)
    records = []
    for i, topic in enumerate(TOPICS):
        pool, split = (0, "dev") if i < 20 else (1, "test")
        records += _templated(topic, i, pool, split, rng)
    records += [_hand(i, r) for i, r in enumerate(HAND)]
    for r in records:  # every span must be the user's own text
        for f in r["feedback"]:
            msg = r["messages"][f["message"]]
            assert msg["role"] == "user" and f["span"] in msg["content"], (r["id"], f)
    return records


def write(path: Path = OUT) -> int:
    records = build()
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in records))
    return len(records)


if __name__ == "__main__":
    print(f"wrote {write()} conversations to {OUT}")
