"""Batches side by side (`evaluator.streams`): the streams share torch's threads (a lone batch
too), a sampled batch draws from its own seeded generator, the same answers and features come out
at the same threads per batch, and the gate's answer cache keeps every answer two streams add."""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path

import pytest
import torch

from evaluator.generation import hf_answer_fn
from evaluator.steerability import answer_grid
from evaluator.streams import current, in_streams, side_by_side, threads_per_batch

QUESTIONS = ["My roommate never cleans.", "How do I ask for a raise?", "I forgot a friend's birthday.",
             "Should I move cities for a job?", "My sister borrows money and never pays back.",
             "How do I say no to extra work?", "I feel lonely after moving."]


@pytest.fixture(scope="module")
def lm(tiny_model_dir):
    from transformers import AutoModelForCausalLM, AutoTokenizer

    return AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval(), AutoTokenizer.from_pretrained(tiny_model_dir)


@pytest.mark.parametrize("threads, each", [(2, 1), (4, 2), (1, 1)])
def test_results_keep_the_items_order_and_the_streams_share_the_threads(threads, each):
    before = torch.get_num_threads()
    torch.set_num_threads(threads)
    seen: list[int] = []

    def slow_first(i: int) -> int:
        seen.append(torch.get_num_threads())
        if i == 0:
            threading.Event().wait(0.2)  # the first item finishes last
        return i * i

    try:
        assert list(in_streams(slow_first, range(6), 2)) == [i * i for i in range(6)]
        assert seen and set(seen) == {each}  # two streams, half the threads each
        assert torch.get_num_threads() == threads
        assert threads_per_batch(2) == each and threads_per_batch(1) == threads
        seen.clear()
        assert list(in_streams(slow_first, [3], 2)) == [9] and seen == [each]  # a lone batch rounds as in a pair
        assert list(in_streams(lambda i: threading.get_ident(), range(3), 1)) == [threading.get_ident()] * 3
    finally:
        torch.set_num_threads(before)


@pytest.mark.usefixtures("one_torch_thread")  # one thread a batch either way: the same rounding
def test_greedy_answers_are_the_same_in_one_stream_or_two(lm):
    model, tok = lm
    side = tok.padding_side
    one = hf_answer_fn(model, tok, max_new_tokens=8, batch_size=2)(QUESTIONS)
    two = hf_answer_fn(model, tok, max_new_tokens=8, batch_size=2, streams=2)(QUESTIONS)
    assert one == two and len(one) == len(QUESTIONS)
    assert tok.padding_side == side  # left only while the batches were tokenized


@pytest.mark.usefixtures("one_torch_thread")
def test_a_seeded_draw_gives_each_batch_its_own_generator(lm):
    model, tok = lm

    def draw(seed: int, streams: int, questions=QUESTIONS) -> list[str]:
        return hf_answer_fn(model, tok, max_new_tokens=8, batch_size=2, sampling={"temperature": 1.0, "top_p": 0.95},
                            seed=seed, streams=streams)(questions)

    first = draw(5, 1)
    torch.manual_seed(123)  # torch's global generator plays no part
    assert draw(5, 2) == first
    assert draw(5, 1, QUESTIONS[:2]) == first[:2]  # a batch draws the same whatever follows it
    assert draw(6, 1) != first  # a random model's flat logits: another seed, other answers
    with pytest.raises(ValueError, match="seed"):  # torch's one generator across streams: a race
        hf_answer_fn(model, tok, sampling={"temperature": 1.0, "top_p": 0.95}, streams=2)


def test_the_steering_grid_is_the_same_with_cells_side_by_side():
    def answer(questions, attribute, value):
        return [f"{q}|{attribute}={value}" for q in questions]

    one = answer_grid(answer, ["a", "b"], [0, 4], ["verbosity", "complexity"])
    assert answer_grid(answer, ["a", "b"], [0, 4], ["verbosity", "complexity"], streams=2) == one
    assert [(r.attribute, r.value, r.prompt) for r in one][:3] == [("verbosity", 0, 0), ("verbosity", 0, 1),
                                                                        ("verbosity", 4, 0)]


def test_the_answer_cache_keeps_every_answer_the_steering_cells_add_side_by_side(tmp_path):
    from deploy.release.answer_cache import AnswerCache

    cache = AnswerCache(tmp_path / "live.jsonl", "live-1")

    def cell(value: int) -> list[str]:
        wrapped = cache.wrap(lambda qs: [f"{q}@{value}" for q in qs], lambda q: q, {"cell": value})
        return wrapped([f"q{i}" for i in range(50)])

    assert list(in_streams(cell, range(8), 2)) == [[f"q{i}@{v}" for i in range(50)] for v in range(8)]
    assert cache.misses == 400 and cache.hits == 0
    again = AnswerCache(tmp_path / "live.jsonl", "live-1")  # every line written whole
    assert len(again.answers) == 400


def test_the_judges_features_are_the_same_read_in_two_streams(tiny_model_dir):
    import numpy as np

    from evaluator.judges.features import FeatureConfig, Featurizer

    # several batches for the streams to share; float32, where one thread rounds as two do
    featurizer = Featurizer(tiny_model_dir, FeatureConfig(max_batch_tokens=64, bf16=False))
    prompts = [[{"role": "user", "content": q}] for q in QUESTIONS]
    answers = [f"Try talking to them about it, step {i}." for i in range(len(QUESTIONS))]
    one = featurizer.encode(prompts, answers)
    seen: list[int] = []
    run = featurizer._run
    featurizer._run = lambda *a: (seen.append(threading.get_ident()), run(*a))
    with side_by_side(2):
        assert current() == 2
        two = featurizer.encode(prompts, answers)
    assert current() == 1 and threading.get_ident() not in seen  # read in the streams, then back to one
    np.testing.assert_allclose(two, one, rtol=1e-5, atol=1e-5)


def nice_of(tid: int | None = None) -> int:
    return os.getpriority(os.PRIO_PROCESS, tid or threading.get_native_id())


LINUX = sys.platform.startswith("linux")
lowerable = pytest.mark.skipif(not LINUX or nice_of() > 14, reason="a nice value per thread is Linux's, with room for +5")


@lowerable
@pytest.mark.parametrize("streams", [1, 2])
def test_maps_under_a_niceness_run_in_lowered_workers_and_leave_the_caller_as_it_was(streams):
    def nice_of_this_thread(i: int) -> tuple[int, int, int]:
        return i, threading.get_ident(), nice_of()

    caller = nice_of()
    threads = torch.get_num_threads()
    with side_by_side(streams, niceness=5):
        rows = in_streams(nice_of_this_thread, range(6), current())
    assert [i for i, _, _ in rows] == list(range(6))
    assert {nice for _, _, nice in rows} == {caller + 5}
    assert threading.get_ident() not in {ident for _, ident, _ in rows}  # one stream too: a worker, not the caller
    assert nice_of() == caller
    assert torch.get_num_threads() == threads
    with side_by_side(streams):  # no niceness: one stream runs in the caller's thread, as before
        rows = in_streams(nice_of_this_thread, range(2), current())
    assert {nice for _, _, nice in rows} == {caller}
    assert (streams == 1) == ({ident for _, ident, _ in rows} == {threading.get_ident()})


@lowerable
def test_the_threads_torch_starts_for_a_lowered_batch_are_lowered_with_it():
    def helpers_nice(_: int) -> list[int]:
        torch.set_num_threads(2)
        a = torch.randn(512, 512)
        for _ in range(20):  # parallel work, so OpenMP's pool for this thread exists and runs
            a = torch.tanh(a @ a)
        return sorted(nice_of(int(t.name)) for t in Path("/proc/self/task").iterdir() if t.name.isdigit())

    caller, threads = nice_of(), torch.get_num_threads()
    try:
        with side_by_side(1, niceness=5):
            nices = in_streams(helpers_nice, [0], 1)[0]
    finally:
        torch.set_num_threads(threads)
    assert nices.count(caller + 5) >= 2  # the worker and at least one thread of its pool
