"""The fast sampler draws from the distribution `transformers`' own warpers define, and plugs
into `generate` as served: seeded draws repeat, temperature 0 stays greedy."""

from __future__ import annotations

import pytest
import torch
from transformers import LogitsProcessorList, TemperatureLogitsWarper, TopKLogitsWarper, TopPLogitsWarper

from evaluator.sampling import TOP_K, NucleusSampler, generate_kwargs


def library_probabilities(logits: torch.Tensor, temperature: float, top_p: float) -> torch.Tensor:
    """What `generate(do_sample=True, temperature=, top_p=)` draws from: its warpers, then softmax."""
    warpers = [TemperatureLogitsWarper(temperature), TopKLogitsWarper(TOP_K)]
    if top_p < 1.0:
        warpers.append(TopPLogitsWarper(top_p))
    ids = torch.zeros(logits.shape[0], 1, dtype=torch.long)
    return LogitsProcessorList(warpers)(ids, logits.clone()).softmax(dim=-1)


def lm_like_logits(rows: int, vocab: int = 4096, seed: int = 0) -> torch.Tensor:
    """Half the rows peaked on a few tokens (a confident model), half nearly flat."""
    g = torch.Generator().manual_seed(seed)
    logits = torch.randn(rows, vocab, generator=g) * 3
    logits[: rows // 2, :5] += 12
    return logits


@pytest.mark.parametrize("temperature,top_p", [(0.7, 0.95), (1.0, 1.0), (0.3, 0.5), (1.5, 0.99), (0.7, 0.01)])
def test_the_distribution_is_the_library_s(temperature, top_p):
    logits = lm_like_logits(8)
    ours = NucleusSampler(temperature, top_p).probabilities(logits)
    theirs = library_probabilities(logits, temperature, top_p)
    assert torch.equal(ours > 0, theirs > 0)  # the same tokens kept, row by row
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)


def test_tokens_tied_with_the_k_th_stay_as_the_library_keeps_them():
    # bfloat16 logits (the gate's weights) tie often; with no top-p every tie at the 50th shows
    logits = lm_like_logits(16, seed=1).to(torch.bfloat16).float()
    ours = NucleusSampler(1.0, 1.0).probabilities(logits)
    theirs = library_probabilities(logits, 1.0, 1.0)
    assert ((theirs > 0).sum(-1) > TOP_K).any()  # the case is there: a row keeps more than 50
    assert torch.equal(ours > 0, theirs > 0)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)


def test_at_the_top_p_edge_ties_may_fall_either_way():
    logits = lm_like_logits(16, seed=1).to(torch.bfloat16).float()
    ours = NucleusSampler(0.7, 0.95).probabilities(logits)
    theirs = library_probabilities(logits, 0.7, 0.95)
    assert torch.equal((ours > 0).sum(-1), (theirs > 0).sum(-1))  # as many tokens kept in every row
    # where tokens tie exactly at the top-p edge, which of them stay is each sort's choice: the
    # ranked probabilities are the same
    ranked = lambda p: p.sort(dim=-1, descending=True).values
    torch.testing.assert_close(ranked(ours), ranked(theirs), atol=1e-6, rtol=1e-5)


def test_draws_follow_the_distribution():
    logits = torch.tensor([[4.0, 3.5, 3.0, 1.0, 0.0, -2.0]]).repeat(20_000, 1)
    sampler = NucleusSampler(1.0, 0.9)
    expected = sampler.probabilities(logits[:1])[0]
    torch.manual_seed(0)
    scores = sampler(None, logits)
    tokens = scores.argmax(dim=-1)
    assert torch.isfinite(scores).sum(dim=-1).eq(1).all()  # greedy can pick only the drawn token
    observed = torch.bincount(tokens, minlength=6).float() / len(tokens)
    assert observed[expected == 0].sum() == 0  # nothing outside the nucleus is ever drawn
    assert (observed - expected).abs().max() < 0.015  # 20,000 draws: a standard error under 0.004


def test_bad_settings_are_refused_with_the_reason():
    with pytest.raises(ValueError, match="greedy"):
        NucleusSampler(0.0, 0.9)
    with pytest.raises(ValueError, match="top_p"):
        NucleusSampler(0.7, 1.5)


def test_generate_samples_reproducibly_and_stays_greedy_at_temperature_0(tiny_model_dir):
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(tiny_model_dir).eval()
    ids = torch.tensor([[1, 5, 9, 13], [2, 6, 10, 14]])

    def run(seed: int, temperature: float) -> torch.Tensor:
        torch.manual_seed(seed)
        with torch.inference_mode():
            return model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=12,
                                  pad_token_id=0, **generate_kwargs(temperature, 0.95))

    assert torch.equal(run(1, 1.0), run(1, 1.0))
    assert not torch.equal(run(1, 1.0), run(2, 1.0))  # a random model's flat logits: other draws
    with torch.inference_mode():
        greedy = model.generate(input_ids=ids, attention_mask=torch.ones_like(ids), max_new_tokens=12,
                                pad_token_id=0, do_sample=False)
    assert torch.equal(run(3, 0.0), greedy)
