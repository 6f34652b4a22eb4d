"""Sampling a token the way `transformers` samples it, without sorting the vocabulary.

`model.generate(do_sample=True, temperature=T, top_p=P)` applies three warpers to each step's
logits: temperature, top-k (50, the library's default when nobody sets it) and top-p; then
softmax and `torch.multinomial` over the whole vocabulary. Top-p sorts every row, and on
SmolLM2's 49,152 tokens that sort and the draw took nearly two-fifths of each decoding step at 32
rows on a 2-core CPU: 72 ms a draw against 6 ms here, whole answers in 0.66x the time
(`bench/sampling.py`).

Design choices:
- The same distribution: top-k first (with the tokens tied with the k-th, as the library keeps
  them), so the nucleus is found among about k tokens sorted by `torch.topk`, with `transformers`'
  rule (keep a token while the mass before it is under `top_p`; the most likely token always
  stays) and its softmax. `probabilities` returns that distribution over the whole vocabulary, and
  a test holds it equal to the library's warpers. Where tokens tie exactly at the top-p edge, which
  of them stay is the sort's choice, in the library as here; the count and the mass are the same.
- Not the same draws: the random numbers fall on k tokens instead of the vocabulary, so one seed
  gives other answers than the library's sampler, equally likely ones. Whoever caches sampled
  answers keys them by `NAME`.
- A logits processor under greedy decoding: `generate_kwargs` turns sampling off, and the
  processor, run last, draws the token and leaves it the only one greedy can pick. Streaming,
  stopping criteria and padding of finished rows stay `generate`'s own. Draws use the
  `generator` given, else torch's global one (`torch.manual_seed` makes them reproducible); a
  batch with its own generator draws the same whatever runs beside it (`evaluator.streams`). A
  row's draw also depends on how many tokens the widest tie in its batch keeps, so on its batch.
- Limits: one answer per prompt (`generate` refuses `num_return_sequences` > 1 without
  sampling), and only temperature, top-p and the fixed top-k.
"""

from __future__ import annotations

import torch
from transformers import LogitsProcessor, LogitsProcessorList

TOP_K = 50  # `transformers`' default top-k, which its sampling always applied here
NAME = f"top{TOP_K}-nucleus"  # what a cache of sampled answers records as the sampler


class NucleusSampler(LogitsProcessor):
    """Temperature, top-k, then top-p, as `transformers` warps; draws one token per row and returns
    scores in which that token is the only finite one."""

    def __init__(self, temperature: float, top_p: float, top_k: int = TOP_K,
                 generator: torch.Generator | None = None) -> None:
        if not temperature > 0:
            raise ValueError(f"temperature must be positive to sample, got {temperature!r}; use greedy decoding")
        if not 0.0 < top_p <= 1.0:
            raise ValueError(f"top_p must be in (0, 1], got {top_p!r}")
        if top_k < 1:
            raise ValueError(f"top_k must be at least 1, got {top_k!r}")
        self.temperature, self.top_p, self.top_k = float(temperature), float(top_p), int(top_k)
        self.generator = generator

    def kept(self, scores: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """(log-weights of the top-k tokens, -inf where top-p drops one; their vocabulary ids).
        Like the library's top-k, every token tied with the k-th stays: bfloat16 logits tie often."""
        scaled = scores.float() / self.temperature
        kth = scaled.topk(min(self.top_k, scaled.shape[-1]), dim=-1).values[:, -1:]
        values, ids = scaled.topk(int((scaled >= kth).sum(dim=-1).max()), dim=-1)
        values = values.masked_fill(values < kth, float("-inf"))  # a shorter tie in another row
        probs = values.softmax(dim=-1)
        if self.top_p >= 1.0:  # the library skips top-p then; a float cumsum can reach 1 early
            return values, ids
        before = probs.cumsum(dim=-1) - probs  # the mass of the tokens ranked above each one
        return values.masked_fill(before >= self.top_p, float("-inf")), ids

    def probabilities(self, scores: torch.Tensor) -> torch.Tensor:
        """The distribution each row's token is drawn from, over the whole vocabulary."""
        values, ids = self.kept(scores)
        return torch.zeros_like(scores, dtype=torch.float32).scatter_(-1, ids, values.softmax(dim=-1))

    def __call__(self, input_ids: torch.LongTensor, scores: torch.FloatTensor) -> torch.FloatTensor:
        values, ids = self.kept(scores)
        token = ids.gather(-1, torch.multinomial(values.softmax(dim=-1), 1, generator=self.generator))
        return torch.full_like(scores, float("-inf")).scatter_(-1, token, 0.0)


def generate_kwargs(temperature: float, top_p: float, generator: torch.Generator | None = None) -> dict:
    """`model.generate` keyword arguments that sample at `temperature` and `top_p` (top-k 50)
    through `NucleusSampler`, drawing from `generator` (None: torch's global one); greedy
    decoding at temperature 0."""
    if temperature <= 0:
        return {"do_sample": False, "temperature": None, "top_p": None, "top_k": None}
    return {"do_sample": False, "temperature": None, "top_p": None, "top_k": None,
            "logits_processor": LogitsProcessorList([NucleusSampler(temperature, top_p, generator=generator)])}
