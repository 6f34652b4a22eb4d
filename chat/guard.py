"""The safety guard in the serving path: a request judged before generation, an answer judged as it
streams, and a short, kind refusal in place of either.

Every surface runs turns through `chat.turns`, which calls the guard when the turn's context has
one (`TurnContext.guard`); `deploy` decides which judge stands behind it.

Design choices:
- The judge is a `SafetyJudge`: two probabilities, P(the request seeks harmful help) and P(the
  answer is unsafe), and a `version` stored with every verdict, so a decision can be traced to
  the judge that made it and relabelled data can be matched to it.
- A risky request is refused without calling the model (nothing to stop, nothing wasted).
- A streamed answer is judged on the whole text so far at a sentence end once it has
  `FIRST_CHECK_CHARS` characters, then each time it has doubled since the last check (or every
  `CHECK_EVERY_CHARS` characters without a sentence end), and once more at its end. The answer
  threshold is a per-judgement cut (chosen on whole answers), and an answer is stopped at its first
  prefix over it: a check per sentence took the maximum of a dozen noisy scores and withdrew a
  fifth of everyday answers; doubling keeps the checks to about log2 of the length, and a few words
  alone are never judged before the answer's end. On "unsafe" the generation is stopped and the stream yields a `Replace`: every
  surface withdraws what it showed and shows the refusal instead; the stored answer is the
  refusal, and the model's text is kept in the verdict (for the operators' review and export).
- A request that speaks of hurting oneself (`CRISIS`) gets kind words and a crisis line instead
  of the model's answer, whatever its judged risk: a small model's advice to a person in crisis
  is a risk no cut is worth.
- The refusal is one sentence, plus one sentence pointing to legitimate help where the request's
  topic has some (`POINTERS`, in priority order: first match wins; violence counts only when a
  person is its target, so harm to an animal points to a vet, not a helpline). Never a lecture.
  The opening sentence is a setting; the pointers are this small table.
- The safety policy is a system message: prepended to the first system message when there is one
  (an operator's or an API caller's system message follows it, never replaces it), else a new
  one. The steering goes elsewhere (the last user message, or the template's attributes), so
  neither undoes the other, and the backend's trimming of long prompts keeps the system message.
- A judge that fails stops the turn with `GuardUnavailable` (a `BackendError`, so every surface
  says it plainly and the turn is stored as an error): no unchecked answer is served.
- `served_answers` applies the same checks to answers a model gives whole (the release gate's
  greedy answers): a greedy stream stopped early is a prefix of the whole answer, so judging the
  prefixes a stream would have been judged at (`checkpoints`) gives the stream's verdict, with
  the judge's calls batched.
"""

from __future__ import annotations

import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Protocol

from chat.backends.base import BackendError
from store.attributes import add_to_system

ALLOWED, REFUSED, REPLACED = "allowed", "refused", "replaced"
VERDICTS = (ALLOWED, REFUSED, REPLACED)
FINISH_FILTERED = "content_filter"  # the finish reason of a refused or replaced answer (OpenAI's word)
FIRST_CHECK_CHARS = 120  # a streamed answer is first judged at a sentence end past this length
CHECK_EVERY_CHARS = 300  # an answer that runs on without a sentence end is still checked this often
_SENTENCE_END = re.compile(r"[.!?…][\"')\]]*\s|\n")


class SafetyJudge(Protocol):
    version: str  # e.g. "moderator-v1": stored with every verdict

    def request_risk(self, requests: Sequence[str]) -> list[float]: ...  # P(request seeks harmful help)

    def answer_risk(self, requests: Sequence[str], answers: Sequence[str]) -> list[float]: ...  # P(answer unsafe)


class GuardUnavailable(BackendError):
    """The safety judge failed, so nothing unchecked was served."""


class Replace(str):
    """A stream item meaning: withdraw the text shown so far and show this one (the refusal)."""


# Legitimate help, by what the request is about: (topic, pattern over the request, the pointer
# sentence), in priority order: the first topic that matches is the one pointed to. A person in
# danger comes before an animal (a husband who threatens to poison the dog is about the wife), an
# animal before medicine (pills for a dog are a vet's business). Violence points to a helpline only
# when a person is its target or its victim ("poison my dog" is about the dog).
_ANIMAL = (r"(dogs?|cats?|pets?|pupp(y|ies)|kittens?|horses?|animals?|birds?|parrots?|rabbits?|hamsters?|"
           r"livestock|cows?|sheep|goats?|pigs?|chickens?)")
_PERSON = (r"(me|him|her|them|us|you|someone|somebody|anyone|people|a (person|child|kid|baby|woman|man|girl|boy)|"
           r"(my|his|her|their|the|a|our|your) (own )?(ex|wife|husband|partner|boyfriend|girlfriend|spouse|mom|mum|"
           r"mother|dad|father|parents?|sister|brother|son|daughter|kids?|child(ren)?|baby|family|friend|roommate|"
           r"neighbou?r|boss|coworker|co-worker|colleague|teacher|classmate|landlord|(step)?(mom|dad)|grand\w+)s?)"
           r"(?!['’]s\b)(?!\s+" + _ANIMAL + r"\b)")  # not an owner: "my neighbour's dog", "neighbours dog" are the dog
POINTERS: tuple[tuple[str, re.Pattern[str], str], ...] = tuple((topic, re.compile(pattern, re.I), text) for topic, pattern, text in (
    ("self-harm",
     r"\b(suicid\w*|kill(ing)? myself|end (my life|it all)|hurt(ing)? myself|self[- ]?harm\w*|cut(ting)? myself|"
     r"overdos\w*|(don'?t|do not) want to (live|be alive))\b",
     "If you're thinking about hurting yourself, please call or text 988 in the US, or your local emergency number."),
    ("abuse or violence",
     r"\b((hits?|beats?|abuses?|threatens?|stalks?|hurts?|chokes?|rapes?|raped|assaults?|assaulted) me|"
     r"abusive|domestic (violence|abuse)|stalk(ing|er)|sexual(ly)? assault\w*|rape|"
     r"(hurt|kill|murder|attack|poison|beat( up)?|stab|shoot|strangle|choke|drug) " + _PERSON + r")\b",
     "If someone is in danger, please call your local emergency number; a domestic violence or crisis helpline "
     "can also help."),
    ("animal",
     r"\b" + _ANIMAL + r"\b",
     "If an animal is sick, hurt or causing trouble, a vet or your local animal control service can help."),
    ("locked out",
     r"\b(locked out|lock ?pick\w*|pick (a|the|my) lock|lost my keys?|get into my (own )?(house|home|car|flat|apartment))\b",
     "If you're locked out of your own home or car, a licensed locksmith can get you in."),
    ("medical",
     r"\b(pills?|medications?|medicines?|dos(e|es|age)|prescri\w*|symptoms?|antibiotics?|painkillers?|opioids?)\b",
     "For medicines or symptoms, a doctor or pharmacist can help you safely."),
))


# A person who says they may hurt themselves is not asking for advice a 135M model should give:
# the turn is answered by `Guard.crisis` (kind words and a crisis line), whatever the judge said
# of the request, and the model is not called. First-person statements and plain crisis words
# only; a question about a friend who self-harms is judged like any other request.
CRISIS = re.compile(
    r"\b(kill(ing)? myself|hurt(ing)? myself|harm(ing)? myself|cut(ting)? myself|end(ing)? (my|it) (own )?(life|all)|"
    r"take my (own )?life|i'?m suicidal|i am suicidal|feel(ing)? suicidal|suicidal (thoughts|feelings)|"
    r"(thinking|thoughts) (about|of) (suicide|dying|ending it)|(commit|committing|attempt(ing)?) suicide|"
    r"(want|wanted|wanna) to die|wanna die|(don'?t|do not) want to (live|be alive|be here|wake up)|better off dead|"
    r"no reason to live|(be|are|is) better off without me)\b", re.I)


def refusal_text(opening: str, request: str) -> str:
    """The refusal for `request`: the opening sentence, then a pointer to help when one fits."""
    for _topic, pattern, pointer in POINTERS:
        if pattern.search(request):
            return f"{opening} {pointer}"
    return opening


def with_policy(messages: list[dict], policy: str) -> list[dict]:
    """A copy of `messages` with the safety `policy` first in the system message ('' = unchanged)."""
    out = [dict(m) for m in messages]
    policy = policy.strip()
    if not policy:
        return out
    add_to_system(out, policy, first=True)
    return out


@dataclass(frozen=True)
class Guard:
    """The judge with its thresholds and the refusal's opening sentence."""

    judge: SafetyJudge
    request_threshold: float = 0.5
    answer_threshold: float = 0.5
    refusal: str = "I'm sorry, but I can't help with that."
    crisis: str = ("I'm really sorry you're feeling this way. You don't have to face this alone: please call or text "
                   "988 in the US, or your local emergency number, to talk with someone right now.")

    @property
    def version(self) -> str:
        return str(self.judge.version)

    def request_risk(self, request: str) -> float:
        try:
            return float(self.judge.request_risk([request])[0])
        except Exception as exc:
            raise GuardUnavailable(_UNAVAILABLE) from exc

    def answer_risk(self, request: str, answer: str) -> float:
        try:
            return float(self.judge.answer_risk([request], [answer])[0])
        except Exception as exc:
            raise GuardUnavailable(_UNAVAILABLE) from exc

    def in_crisis(self, request: str) -> bool:
        """Whether `request` speaks of hurting oneself (`CRISIS`): the crisis reply, whatever the judge says."""
        return bool(CRISIS.search(request))

    def answer_to(self, request: str, risk: float) -> tuple[str, dict] | None:
        """The guard's own answer to `request` (judged `risk`) and its verdict record, or None when
        the model answers: a risky request gets the refusal, a person in crisis the crisis reply."""
        crisis = self.in_crisis(request)
        if not crisis and risk < self.request_threshold:
            return None
        text = self.crisis if crisis else self.refusal_for(request)
        return text, self.verdict(REFUSED, risk, **({"crisis": True} if crisis else {}))

    def refusal_for(self, request: str) -> str:
        return refusal_text(self.refusal, request)

    def verdict(self, verdict: str, score: float | None, **extra: object) -> dict:
        """The `safety` record stored with an answer: verdict, the deciding score, the judge."""
        return {"verdict": verdict, "score": _rounded(score), "judge": self.version,
                **{k: _rounded(v) if isinstance(v, float) else v for k, v in extra.items()}}


def _rounded(score: float | None) -> float | None:
    return round(score, 4) if score is not None and math.isfinite(score) else None  # JSON has no NaN


_UNAVAILABLE = "The safety check is not available right now, so no answer was given. Please try again in a moment."


class AnswerWatch:
    """When to judge a streaming answer: at a sentence end once it is `FIRST_CHECK_CHARS` long and
    twice as long as at the last check, or after `CHECK_EVERY_CHARS` more without a sentence end."""

    def __init__(self) -> None:
        self.checked = 0  # characters of the answer judged so far

    def due(self, text: str) -> bool:
        n, due_at = len(text), max(FIRST_CHECK_CHARS, 2 * self.checked)
        at_sentence_end = n >= due_at and _SENTENCE_END.search(text, due_at - 3)
        if at_sentence_end or n - self.checked >= max(CHECK_EVERY_CHARS, self.checked):
            self.checked = n
            return True
        return False

    def pending(self, text: str) -> bool:
        """Whether the end of `text` has not been judged yet (the final check)."""
        return len(text.strip()) > 0 and len(text) > self.checked


def checkpoints(answer: str) -> list[str]:
    """The prefixes of a whole `answer` at which the streamed answer is judged: `AnswerWatch` over
    word-sized deltas (" word", as a backend streams tokens), then the final check."""
    watch, text, out = AnswerWatch(), "", []
    for delta in re.findall(r"\s*\S+", answer):
        text += delta
        if watch.due(text):
            out.append(text)
    if watch.pending(text):
        out.append(text)
    return out


def served_answers(guard: Guard, requests: Sequence[str],
                   answer: Callable[[list[str]], list[str]]) -> list[tuple[str, dict]]:
    """(the text a user is shown, the guard's verdict record) for each request, as a turn would
    give them: a risky request is refused without calling `answer`; each other answer (given
    whole, greedily) is replaced by the refusal at its first prefix judged unsafe."""
    requests = list(requests)
    request_risks = [float(r) for r in guard.judge.request_risk(requests)] if requests else []
    own = [guard.answer_to(q, r) for q, r in zip(requests, request_risks)]
    out: list[tuple[str, dict]] = [a if a is not None else ("", {}) for a in own]  # the model's are filled in below
    allowed = [i for i, a in enumerate(own) if a is None]
    answers = answer([requests[i] for i in allowed]) if allowed else []
    judged = [(i, prefix) for i, text in zip(allowed, answers) for prefix in checkpoints(text)]
    risks = guard.judge.answer_risk([requests[i] for i, _ in judged], [p for _, p in judged]) if judged else []
    for i, text in zip(allowed, answers):
        out[i] = (text, guard.verdict(ALLOWED, None, request_score=request_risks[i]))
    stopped: set[int] = set()
    for (i, prefix), risk in zip(judged, risks):
        if i in stopped:
            continue  # the stream stopped at an earlier check
        if float(risk) >= guard.answer_threshold:
            stopped.add(i)
            out[i] = (guard.refusal_for(requests[i]), guard.verdict(REPLACED, float(risk), request_score=request_risks[i],
                                                                   model_answer=prefix))
        else:
            out[i] = (out[i][0], guard.verdict(ALLOWED, float(risk), request_score=request_risks[i]))
    return out
