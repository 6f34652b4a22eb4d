"""The weights a gate answers with: bfloat16 where the CPU computes it natively ("auto"), float32
otherwise or when the operator says so, and the dtype named in every cache key so that a live
release cached in one dtype is never paired with a candidate measured in the other."""

from __future__ import annotations

from types import SimpleNamespace

import pytest

from deploy.release import measure
from deploy.settings import SettingsError, load_settings
from evaluator.streams import threads_per_batch


@pytest.mark.parametrize("native, dtype, expected", [
    (True, "auto", "bfloat16"), (False, "auto", "float32"),
    (True, "float32", "float32"), (False, "bfloat16", "bfloat16"),
])
def test_auto_is_bfloat16_only_where_the_cpu_computes_it(monkeypatch, native, dtype, expected):
    import evaluator.logprobs

    monkeypatch.setattr(evaluator.logprobs, "native_bf16", lambda: native)
    settings = load_settings(environ={}, overrides={"gate.dtype": dtype})
    assert measure.weights_dtype(settings) == expected
    # float32 keeps the key earlier gates cached under; bfloat16 misses it, once
    assert measure.weights_key(settings) == ("merged" if expected == "float32" else "merged-bfloat16")


def test_an_unknown_dtype_is_refused():
    with pytest.raises(SettingsError):
        load_settings(environ={}, overrides={"gate.dtype": "float16"})


class _KeyRecorder:
    def __init__(self) -> None:
        self.generations: list[dict] = []

    def wrap(self, answer, prompt_of, generation):
        self.generations.append(generation)
        return answer


def test_an_answer_is_cached_under_its_weights_batch_sampler_and_seed():
    settings = load_settings(environ={}, overrides={"gate.dtype": "bfloat16", "gate.batch_size": 24})
    cache, tokenizer = _KeyRecorder(), SimpleNamespace(pad_token_id=0, eos_token_id=0)
    measure._answer_fn(None, tokenizer, settings, cache=cache)
    measure._answer_fn(None, tokenizer, settings, cache=cache, seed=measure.DRAW_SEED + 1000)
    greedy, sampled = cache.generations
    assert greedy["weights"] == sampled["weights"] == "merged-bfloat16"
    assert greedy["batch"] == sampled["batch"] == 24
    assert greedy["threads"] == threads_per_batch(settings.gate.streams)  # threads move bfloat16 rounding
    # the same distribution, other draws than `transformers`' sampler: answers it drew are not
    # reused; and a draw under another seed, or from torch's one generator, is another answer
    assert greedy["decoding"] == "greedy" and sampled["decoding"]["sampler"] == "top50-nucleus"
    assert sampled["decoding"]["seed"] == measure.DRAW_SEED + 1000 and sampled["decoding"]["rng"] == "per-batch"
