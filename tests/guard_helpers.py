"""Deterministic stand-ins for the safety guard's tests: a judge whose verdicts follow marker words,
and a backend that streams a fixed answer word by word (and stops when cancelled)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

from chat.backends.base import Generation

RISKY_WORDS = ("bomb", "poison", "hurt myself")
UNSAFE_WORD = "UNSAFE"  # an answer containing it is judged unsafe
UNSAFE_REQUEST = "unsafe answer please"  # any answer to a request containing it is judged unsafe


class FakeJudge:
    """Request risk 0.9 when the request names a risky word, else 0.1; answer risk 0.95 when the answer
    holds `UNSAFE_WORD` (or answers `UNSAFE_REQUEST`), else 0.05. Remembers every call."""

    version = "fake-judge-v1"

    def __init__(self) -> None:
        self.requests: list[str] = []
        self.answers: list[str] = []

    def request_risk(self, requests: Sequence[str]) -> list[float]:
        self.requests += list(requests)
        return [0.9 if any(w in r.lower() for w in RISKY_WORDS) else 0.1 for r in requests]

    def answer_risk(self, requests: Sequence[str], answers: Sequence[str]) -> list[float]:
        self.answers += list(answers)
        return [0.95 if UNSAFE_WORD in a or (UNSAFE_REQUEST in r and a.strip()) else 0.05
                for r, a in zip(requests, answers)]


class BrokenJudge:
    version = "broken"

    def request_risk(self, requests):
        raise RuntimeError("judge crashed")

    def answer_risk(self, requests, answers):
        raise RuntimeError("judge crashed")


class _Scripted(Generation):
    def __init__(self, words: list[str]) -> None:
        super().__init__(model="scripted", adapter=None)
        self.words, self.yielded = words, 0
        self.prompt_tokens = 10

    def _deltas(self) -> Iterator[str]:
        for word in self.words:
            if self.cancelled:
                return
            self.yielded += 1
            yield word + " "
        self.completion_tokens = self.yielded


class ScriptedBackend:
    """Streams `answer` word by word; keeps the messages of every generation it starts."""

    kind = "builtin"
    model = "scripted"
    active_adapter = None

    def __init__(self, answer: str) -> None:
        self.answer = answer
        self.started: list[tuple[list[dict], _Scripted]] = []

    def stream(self, messages, *, attributes, steering, params, adapter=None) -> Generation:
        from chat.steering import render

        sent, _ = render(messages, attributes, steering)
        gen = _Scripted(self.answer.split(" "))
        self.started.append((sent, gen))
        return gen
