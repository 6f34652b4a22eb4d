"""The gate's cache of the live release's answers: keyed by release, prompt, generation settings
and the model's files; survives a torn line; generates only what it has not seen, in one call."""

from __future__ import annotations

from deploy.release.answer_cache import AnswerCache


def counting_answers(calls: list[list[str]]):
    def answer(questions):
        calls.append(list(questions))
        return [f"answer to {q}" for q in questions]
    return answer


def test_only_unseen_prompts_are_generated_and_the_cache_persists(tmp_path):
    calls: list[list[str]] = []
    gen = {"max_new_tokens": 24, "decoding": "greedy"}
    cache = AnswerCache.for_release(tmp_path, "rel-1")
    answer = cache.wrap(counting_answers(calls), lambda q: {"messages": [q]}, gen)
    assert answer(["a", "b"]) == ["answer to a", "answer to b"]
    assert answer(["b", "c", "a"]) == ["answer to b", "answer to c", "answer to a"]
    assert calls == [["a", "b"], ["c"]] and (cache.hits, cache.misses) == (2, 3)

    reopened = AnswerCache.for_release(tmp_path, "rel-1")  # a later gate: read from the data dir
    assert reopened.wrap(counting_answers(calls), lambda q: {"messages": [q]}, gen)(["c", "a"]) == \
        ["answer to c", "answer to a"] and len(calls) == 2

    # Another release, other generation settings or another rendering of the prompt: all miss.
    for cache, prompt_of, settings in ((AnswerCache.for_release(tmp_path, "rel-2"), lambda q: {"messages": [q]}, gen),
                                       (reopened, lambda q: {"messages": [q]}, {**gen, "max_new_tokens": 32}),
                                       (reopened, lambda q: {"messages": ["policy", q]}, gen)):
        before = len(calls)
        cache.wrap(counting_answers(calls), prompt_of, settings)(["a"])
        assert len(calls) == before + 1


def test_a_rebuilt_model_directory_misses_and_a_torn_line_is_skipped(tmp_path):
    model = tmp_path / "model"
    model.mkdir()
    (model / "model.safetensors").write_bytes(b"v1")
    calls: list[list[str]] = []
    gen = {"max_new_tokens": 8}
    AnswerCache.for_release(tmp_path, "base", [model]).wrap(counting_answers(calls), str, gen)(["a", "b"])
    cache_file = tmp_path / "gate_answers" / "base.jsonl"
    cache_file.write_text(cache_file.read_text() + '{"key": "tor')  # a crash mid-write
    again = AnswerCache.for_release(tmp_path, "base", [model])
    again.wrap(counting_answers(calls), str, gen)(["a", "b"])
    assert len(calls) == 1 and again.hits == 2
    (model / "model.safetensors").write_bytes(b"v2 rebuilt")
    AnswerCache.for_release(tmp_path, "base", [model]).wrap(counting_answers(calls), str, gen)(["a"])
    assert len(calls) == 2
    # The line written after the torn one is readable: a reopened cache has the rebuilt model's answer.
    AnswerCache.for_release(tmp_path, "base", [model]).wrap(counting_answers(calls), str, gen)(["a"])
    assert len(calls) == 2


class CountingScorer:
    """Scores the answer's length; records each call's answers."""

    def __init__(self) -> None:
        self.calls: list[list[str]] = []

    def score(self, prompts, answers):
        self.calls.append(list(answers))
        return [float(len(a)) + 0.25 for a in answers]


def test_hh_scores_are_cached_per_conversation_and_answer(tmp_path):
    """The live side's HH scores: a later gate scores only pairs it has not seen, in one call; the
    same answer under another conversation, or other score settings, is scored again."""
    inner = CountingScorer()
    settings = {"scorer": "loglik_mean", "max_length": 512}
    hi = [{"role": "user", "content": "hi"}]
    scorer = AnswerCache.for_release(tmp_path, "rel-1").scorer(inner, settings)
    assert scorer.score([hi, hi], ["ab", "abcd"]) == [2.25, 4.25]
    later = AnswerCache.for_release(tmp_path, "rel-1").scorer(inner, settings)
    other_turn = [{"role": "user", "content": "hello"}]
    assert later.score([hi, other_turn, hi], ["abcd", "abcd", "xyz"]) == [4.25, 4.25, 3.25]
    assert inner.calls == [["ab", "abcd"], ["abcd", "xyz"]] and (later.reused, later.scored) == (1, 2)
    AnswerCache.for_release(tmp_path, "rel-1").scorer(inner, {**settings, "max_length": 256}).score([hi], ["ab"])
    assert len(inner.calls) == 3


class CountingJudge:
    """A judge with the three scoring methods, counting what it is asked to score."""

    threshold, fingerprint = 0.5, "judge-a"

    def __init__(self) -> None:
        self.calls: list[tuple[str, int]] = []

    def score(self, prompts, answers):
        self.calls.append(("score", len(answers)))
        return [float(len(a)) for a in answers]

    def answer_risk(self, requests, answers):
        self.calls.append(("answer_risk", len(answers)))
        return [0.9 if "poison" in a else 0.1 for a in answers]

    def request_risk(self, requests):
        self.calls.append(("request_risk", len(requests)))
        return [0.8 if "poison" in r else 0.2 for r in requests]


def test_a_judges_scores_are_cached_per_method_request_and_answer_and_its_fingerprint(tmp_path):
    """A later gate runs the judge only on what it has not scored: each method keyed apart (a risk
    is not a score), the request alone for the request check, and the judge's fingerprint, so a
    refitted judge scores every answer again; its other attributes are its own."""
    inner = CountingJudge()
    judge = AnswerCache.for_release(tmp_path, "rel-1").judge(inner)
    assert judge.score(["q1", "q2"], ["ab", "abc"]) == [2.0, 3.0]
    assert judge.answer_risk(["q1"], ["use poison"]) == [0.9] and judge.request_risk(["poison it", "hi"]) == [0.8, 0.2]
    assert judge.threshold == 0.5 and (judge.reused, judge.scored) == (0, 5)
    later = AnswerCache.for_release(tmp_path, "rel-1").judge(inner)
    assert later.score(["q1", "q2", "q3"], ["ab", "abc", "ab"]) == [2.0, 3.0, 2.0]
    assert later.answer_risk(["q1", "q1"], ["use poison", "ab"]) == [0.9, 0.1]
    assert later.request_risk(["hi"]) == [0.2]
    assert inner.calls[3:] == [("score", 1), ("answer_risk", 1)] and (later.reused, later.scored) == (4, 2)
    inner.fingerprint = "judge-b"  # refitted
    assert AnswerCache.for_release(tmp_path, "rel-1").judge(inner).request_risk(["hi"]) == [0.2]
    assert inner.calls[-1] == ("request_risk", 1)
