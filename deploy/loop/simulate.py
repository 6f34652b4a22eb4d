"""Simulated users for the whole loop: they chat with the real service over its REST API and react
to each answer the way people do, according to a preference that can be set.

`simulate(config)` runs `config.users` users, each with its own HTTP client and cookie jar (so
its own anonymous user), for `config.turns` generated answers each, and returns a
`SimulationSummary` (turns, reactions per kind, errors). It feeds the demo, the load test and the
learning test (tests/proofs/test_learning.py).

Design choices:
- The REST API, not the store: the simulator exercises exactly what a browser does (ask,
  regenerate, choose a sibling, rate), so the answers, attributes, ratings and sibling choices it
  leaves are logged by the service's own code path, and it works against any running service.
- A preference is a judgement of one answer (`Preference.fits`) and a ranking of two
  (`Preference.score`): `short` (at most `length_words` words), `long` (more than that),
  `steps` (at least `min_steps` list items). One threshold for short and long, so reversing
  the preference turns the same answers' verdicts around; with `length_by_verbosity` the
  threshold follows the slider (a taste relative to the setting the user chose).
- What users say comes from a phrasebook (`reactions.py`): by default real people's feedback
  from the gold set's test split, which the fast extractor was not fitted on, so the loop's
  learning does not rest on users who speak in the extractor's own cues; `phrasing="templates"`
  gives the round-1 phrases the extractor is known to read (pipeline tests). Explicit
  like/dislike carry reason chips from the service's fixed list.
- A user who dislikes an answer sometimes regenerates it and keeps the better of the two
  siblings by the preference (choose endpoint), which is where DPO sibling pairs come from; if
  the kept one still misses, they move on rather than complain about their own choice. A
  rephrase followed by a well-received answer makes a DPO rephrase pair.
- The attributes (verbosity slider) are drawn per question from `verbosities`, independently of
  the preference: users move the slider, but what the model learns must come from feedback.
- Everything random comes from `random.Random` seeded with the run seed and the user's index,
  and every request carries a sampling seed drawn from it, so a run against the same model is
  reproducible.
- Service errors (4xx/5xx, timeouts, refused connections) are counted by kind and the user goes
  on with a new question; only an unreachable service at the start stops the run, with a
  message saying which URL was tried.
"""

from __future__ import annotations

import json
import random
import re
import time
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from deploy.loop.reactions import PHRASINGS, phrasebook
from evaluator.text import words

QUESTIONS_PATH = Path(__file__).resolve().parent / "simulated_questions.jsonl"
PREFERENCES = ("short", "long", "steps")
# A list item: "- ", "* ", "1. ", "2) " at the start of a line.
_STEP = re.compile(r"^\s*(?:[-*\u2022]|\d+[.)])\s+", re.M)


class SimulationError(RuntimeError):
    """The simulation cannot run at all (service unreachable, bad configuration)."""


@dataclass(frozen=True)
class Question:
    text: str
    rephrases: tuple[str, ...]
    topic: str = ""


def load_questions(path: str | Path = QUESTIONS_PATH) -> list[Question]:
    """JSON lines `{"question", "rephrases": [...], "topic"}`. Shipped: 30 everyday dilemmas,
    worded apart from the held-out prompts the evaluations use."""
    out = []
    for i, line in enumerate(Path(path).read_text().splitlines()):
        if not line.strip():
            continue
        obj = json.loads(line)
        if not obj.get("question"):
            raise SimulationError(f"{path} line {i + 1}: every line needs a 'question'")
        out.append(Question(obj["question"], tuple(obj.get("rephrases", ())), obj.get("topic", "")))
    if not out:
        raise SimulationError(f"{path} holds no questions")
    return out


# --------------------------------------------------------------------------- preferences


def step_count(text: str) -> int:
    return len(_STEP.findall(text))


@dataclass(frozen=True)
class Preference:
    """What the simulated users want from an answer."""

    kind: str = "short"
    length_words: int = 35  # short: at most this many words; long: more
    min_steps: int = 2  # steps: at least this many list items
    # A taste relative to the slider: one threshold per verbosity 0-4 (what the model usually
    # writes there), so "long" means longer than this setting usually gives. Empty: `length_words`
    # at every position, a taste that ignores the slider.
    length_by_verbosity: tuple[int, ...] = ()

    def __post_init__(self) -> None:
        if self.kind not in PREFERENCES:
            raise SimulationError(f"unknown preference {self.kind!r}; choose one of {', '.join(PREFERENCES)}")
        if self.length_by_verbosity and len(self.length_by_verbosity) != 5:
            raise SimulationError(f"length_by_verbosity needs one threshold per verbosity 0-4, got "
                                  f"{len(self.length_by_verbosity)}")

    def threshold(self, verbosity: int | None = None) -> int:
        """The short/long threshold at this slider position."""
        if self.length_by_verbosity and verbosity is not None:
            return self.length_by_verbosity[verbosity]
        return self.length_words

    def fits(self, answer: str, verbosity: int | None = None) -> bool:
        if self.kind == "short":
            return words(answer) <= self.threshold(verbosity)
        if self.kind == "long":
            return words(answer) > self.threshold(verbosity)
        return step_count(answer) >= self.min_steps

    def score(self, answer: str) -> float:
        """Higher = preferred; ranks two siblings."""
        if self.kind == "short":
            return -words(answer)
        if self.kind == "long":
            return words(answer)
        return step_count(answer) + words(answer) / 1000  # ties go to the fuller answer

    def pick(self, a: str, b: str) -> tuple[str, str] | None:
        """(kept, left) of two answers to the same prompt, as these users decide; None on a tie."""
        if self.score(a) == self.score(b):
            return None
        return (a, b) if self.score(a) > self.score(b) else (b, a)


LIKE_REASONS = {"short": ("clear",), "long": ("practical",), "steps": ("practical", "clear")}
DISLIKE_REASONS = {"short": ("too long",), "long": ("too vague",), "steps": ("too vague",)}


# --------------------------------------------------------------------------- configuration and summary


@dataclass(frozen=True)
class ReactionRates:
    """How a user reacts. A fitting answer: like it (`like`), say thanks (`thanks`, else move on
    silently). A misfit: one of correct / rephrase / regenerate / clarify / dislike-and-move-on,
    drawn with these weights."""

    like: float = 0.5
    thanks: float = 0.8
    correct: float = 0.3
    rephrase: float = 0.25
    regenerate: float = 0.2
    clarify: float = 0.05
    dislike: float = 0.2
    # Also rate a misfit down when reacting in words (people do both, not always).
    dislike_too: float = 0.4
    # Follow-ups on one question before the user gives up and asks another.
    max_follow_ups: int = 2


@dataclass(frozen=True)
class SimulationConfig:
    url: str
    users: int = 4
    turns: int = 6  # answers per user (asks, follow-ups, regenerations); a closing thank-you may add one
    preference: Preference = field(default_factory=Preference)
    seed: int = 0
    admin_token: str = ""  # with `extract`: start the service's extraction job at the end
    extract: bool = False
    verbosities: tuple[int, ...] = (0, 1, 2, 3, 4)
    rates: ReactionRates = field(default_factory=ReactionRates)
    questions: tuple[Question, ...] = ()  # empty: the shipped list
    concurrency: int = 1  # users chatting at once
    max_new_tokens: int | None = None  # None: the service's default
    temperature: float | None = None
    timeout_s: float = 120.0
    extract_timeout_s: float = 300.0
    phrasing: str = "real"  # what users say: real people's words, or the round-1 templates (reactions.py)

    def __post_init__(self) -> None:
        if self.phrasing not in PHRASINGS:
            raise SimulationError(f"phrasing must be one of {', '.join(PHRASINGS)}; got {self.phrasing!r}")
        if self.users < 1 or self.turns < 1:
            raise SimulationError(f"need at least one user and one turn, got users={self.users} turns={self.turns}")
        if self.concurrency < 1:
            raise SimulationError(f"concurrency must be at least 1, got {self.concurrency}")
        if self.extract and not self.admin_token:
            raise SimulationError("starting extraction needs the admin token (--admin-token or server.admin_token)")


@dataclass
class SimulationSummary:
    users: int = 0
    turns: int = 0  # answers generated
    conversations: int = 0
    fitting: int = 0  # answers the users judged to fit their preference
    judged: int = 0
    reactions: Counter = field(default_factory=Counter)
    errors: Counter = field(default_factory=Counter)
    error_samples: list[str] = field(default_factory=list)
    extraction: dict | None = None
    seconds: float = 0.0

    def merge(self, other: "SimulationSummary") -> None:
        self.users += other.users
        self.turns += other.turns
        self.conversations += other.conversations
        self.fitting += other.fitting
        self.judged += other.judged
        self.reactions.update(other.reactions)
        self.errors.update(other.errors)
        self.error_samples += other.error_samples[: max(0, 10 - len(self.error_samples))]

    def as_dict(self) -> dict[str, Any]:
        return {"users": self.users, "turns": self.turns, "conversations": self.conversations,
                "fitting": self.fitting, "judged": self.judged, "reactions": dict(sorted(self.reactions.items())),
                "errors": dict(sorted(self.errors.items())), "error_samples": self.error_samples,
                "extraction": self.extraction, "seconds": round(self.seconds, 1)}


# --------------------------------------------------------------------------- talking to the service


class _ServiceError(Exception):
    """One request failed; `kind` is what the summary counts it under."""

    def __init__(self, kind: str, message: str) -> None:
        super().__init__(message)
        self.kind = kind


class _Api:
    """The few REST calls a user makes, with errors turned into `_ServiceError`."""

    def __init__(self, client: httpx.Client, config: SimulationConfig) -> None:
        self.client, self.config = client, config

    def _post(self, path: str, body: dict | None = None) -> dict:
        try:
            r = self.client.post(path, json=body)
        except httpx.TimeoutException as exc:
            raise _ServiceError("timeout", f"POST {path}: timed out ({exc})") from None
        except httpx.HTTPError as exc:
            raise _ServiceError("connection", f"POST {path}: {exc}") from None
        if r.status_code >= 400:
            try:
                err = r.json().get("error", {})
                message, code = err.get("message", r.text), err.get("code") or ""
            except ValueError:
                message, code = r.text[:200], ""
            raise _ServiceError(f"http_{r.status_code}" + (f"_{code}" if code else ""), f"POST {path}: {message}")
        return r.json()

    def _sampling(self, seed: int) -> dict:
        body: dict[str, Any] = {"seed": seed}
        if self.config.max_new_tokens is not None:
            body["max_new_tokens"] = self.config.max_new_tokens
        if self.config.temperature is not None:
            body["temperature"] = self.config.temperature
        return body

    def ask(self, text: str, attributes: dict, seed: int, conversation_id: str | None = None,
            parent_id: str | None = None) -> dict:
        body = {"content": text, "attributes": attributes, **self._sampling(seed)}
        if conversation_id:
            body["conversation_id"] = conversation_id
        if parent_id:
            body["parent_id"] = parent_id
        return self._post("/api/messages", body)["answer"]

    def regenerate(self, answer_id: str, attributes: dict, seed: int) -> dict:
        return self._post(f"/api/messages/{answer_id}/regenerate",
                          {"attributes": attributes, **self._sampling(seed)})["answer"]

    def choose(self, answer_id: str) -> None:
        self._post(f"/api/messages/{answer_id}/choose")

    def rate(self, answer_id: str, value: int, reasons: Sequence[str]) -> None:
        self._post(f"/api/messages/{answer_id}/rating", {"value": value, "reasons": list(reasons)})


# --------------------------------------------------------------------------- one user


class _User:
    def __init__(self, index: int, config: SimulationConfig, questions: Sequence[Question]) -> None:
        self.config, self.questions = config, questions
        self.pref = config.preference
        self.says = phrasebook(config.phrasing, config.preference.kind)
        self.rng = random.Random(f"{config.seed}:{index}")
        self.summary = SimulationSummary(users=1)
        self.turns_left = config.turns

    def _seed(self) -> int:
        return self.rng.randrange(2**31)

    def _generated(self, answer: dict) -> dict:
        self.turns_left -= 1
        self.summary.turns += 1
        return answer

    def _error(self, exc: _ServiceError) -> None:
        self.summary.errors[exc.kind] += 1
        if len(self.summary.error_samples) < 10:
            self.summary.error_samples.append(str(exc))

    def run(self, api: _Api) -> SimulationSummary:
        opener = None  # praise for the last answer, sent together with the next question
        conversation = None
        while self.turns_left > 0:
            question = self.rng.choice(self.questions)
            attributes = {"verbosity": self.rng.choice(self.config.verbosities)}
            try:
                if opener and conversation:
                    text = f"{opener} {self.says.next_question_prefix}{question.text}"
                    answer = self._generated(api.ask(text, attributes, self._seed(), conversation))
                else:
                    answer = self._generated(api.ask(question.text, attributes, self._seed()))
                    self.summary.conversations += 1
                conversation = answer["conversation_id"]
                opener = self._follow(api, question, attributes, answer)
                if opener and (self.turns_left <= 0 or self.rng.random() < 0.4):
                    # Leaving the conversation: the thanks goes out on its own. This may be one
                    # answer over the budget; losing the praise would bias the data instead.
                    self._generated(api.ask(opener, attributes, self._seed(), conversation))
                    opener = None
                if opener is None:
                    conversation = None
            except _ServiceError as exc:
                self._error(exc)
                self.turns_left -= 1  # a failed attempt spends the turn, so a dead service ends the run
                conversation, opener = None, None
        return self.summary

    def _follow(self, api: _Api, question: Question, attributes: dict, answer: dict) -> str | None:
        """React to `answer` (and to the answers the reaction brings) until the user is content,
        gives up, or runs out of turns. Returns the praise to open the next question with, if any."""
        rates, reactions = self.config.rates, self.summary.reactions
        follow_ups = 0
        while True:
            self.summary.judged += 1
            if self.pref.fits(answer["content"], attributes["verbosity"]):
                self.summary.fitting += 1
                if self.rng.random() < rates.like:
                    api.rate(answer["id"], 1, LIKE_REASONS[self.pref.kind])
                    reactions["like"] += 1
                if self.rng.random() < rates.thanks:
                    reactions["thanks"] += 1
                    return self.rng.choice(self.says.thanks)
                reactions["silent"] += 1
                return None
            if follow_ups >= rates.max_follow_ups or self.turns_left <= 0:
                api.rate(answer["id"], -1, DISLIKE_REASONS[self.pref.kind])
                reactions["dislike"] += 1
                return None
            follow_ups += 1
            kinds = ("correct", "rephrase", "regenerate", "clarify", "dislike")
            kind = self.rng.choices(kinds, weights=[getattr(rates, k) for k in kinds])[0]
            if kind == "dislike":
                api.rate(answer["id"], -1, DISLIKE_REASONS[self.pref.kind])
                reactions["dislike"] += 1
                return None
            if kind != "regenerate" and self.rng.random() < rates.dislike_too:
                api.rate(answer["id"], -1, DISLIKE_REASONS[self.pref.kind])
                reactions["dislike"] += 1
            reactions[kind] += 1
            if kind == "regenerate":
                answer = self._regenerate(api, attributes, answer)
                if not self.pref.fits(answer["content"], attributes["verbosity"]):
                    # The choice already said which is better; complaining about the kept one
                    # too would contradict it (and void the DPO pair), so the user moves on.
                    self.summary.judged += 1
                    reactions["moved_on"] += 1
                    return None
                continue
            text = self._say(kind, question)
            answer = self._generated(api.ask(text, attributes, self._seed(), answer["conversation_id"], answer["id"]))

    def _say(self, kind: str, question: Question) -> str:
        says = self.rng.choice
        if kind == "correct":
            return says(self.says.complaints)
        if kind == "clarify":
            return says(self.says.clarifications)
        # Asking again: the question in other words, or (real phrasing, one time in three) a
        # real re-ask that leans on the previous turn.
        if self.says.reasks and self.rng.random() < 1 / 3:
            return says(self.says.reasks)
        return self.says.rephrase_prefix + says(question.rephrases or (question.text,))

    def _regenerate(self, api: _Api, attributes: dict, answer: dict) -> dict:
        """Another answer to the same question; keep the better of the two ("1 / 2" arrows)."""
        other = self._generated(api.regenerate(answer["id"], attributes, self._seed()))
        kept = max((answer, other), key=lambda a: self.pref.score(a["content"]))
        api.choose(kept["id"])
        self.summary.reactions["choose"] += 1
        return kept


# --------------------------------------------------------------------------- the run


def _check_reachable(url: str, timeout: float) -> None:
    try:
        httpx.get(f"{url}/api/me", timeout=timeout).raise_for_status()
    except httpx.HTTPError as exc:
        raise SimulationError(
            f"cannot reach the advisor service at {url} ({exc}). Start it with `advisor serve`, "
            "or pass --url with the address of a running one."
        ) from None


def run_extraction_job(url: str, admin_token: str, timeout_s: float = 300.0) -> dict:
    """Start the service's extraction job and wait for its row to finish; returns the job row."""
    headers = {"Authorization": f"Bearer {admin_token}"}
    with httpx.Client(base_url=url, headers=headers, timeout=60) as client:
        r = client.post("/api/admin/jobs/extract/run")
        if r.status_code >= 400:
            raise SimulationError(f"the service refused to start extraction (HTTP {r.status_code}): {r.text[:300]}")
        job_id = r.json()["job_id"]
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            jobs = client.get("/api/admin/jobs", params={"limit": 50}).json()["jobs"]
            row = next((j for j in jobs if j.get("id") == job_id), None)
            if row is not None and row.get("status") not in ("running", "queued"):
                return row
            time.sleep(0.5)
    raise SimulationError(f"extraction job {job_id} did not finish within {timeout_s:.0f}s; see the operator screen")


def simulate(config: SimulationConfig, *, client_factory: Callable[[], httpx.Client] | None = None) -> SimulationSummary:
    """Run the simulated users against the service at `config.url`; see the module docstring.

    `client_factory` makes one HTTP client per user (default: a fresh `httpx.Client` on the URL,
    i.e. a fresh cookie jar and so a fresh anonymous user)."""
    url = config.url.rstrip("/")
    _check_reachable(url, min(config.timeout_s, 30.0))
    questions = list(config.questions) or load_questions()
    factory = client_factory or (lambda: httpx.Client(base_url=url, timeout=config.timeout_s))
    started = time.monotonic()

    def one(index: int) -> SimulationSummary:
        with factory() as client:
            return _User(index, config, questions).run(_Api(client, config))

    total = SimulationSummary()
    with ThreadPoolExecutor(max_workers=config.concurrency) as pool:
        for result in pool.map(one, range(config.users)):  # in user order: the summary is stable
            total.merge(result)
    if config.extract:
        total.extraction = run_extraction_job(url, config.admin_token, config.extract_timeout_s)
    total.seconds = time.monotonic() - started
    return total
