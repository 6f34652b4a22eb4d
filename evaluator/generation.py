"""Turn a Hugging Face causal LM into the plain answer function the evaluator takes.

The evaluator's helpfulness and harmlessness scores only need `answer_fn(questions) -> answers`;
the service hands it one made from its chat backend. This helper is for the CLI and benchmarks,
where there is a model directory and no service: greedy decoding (deterministic, so a candidate
and the live release answer the same prompts comparably), batched with left padding, batches side
by side in `streams`, each question rendered as a one-turn chat with the tokenizer's template.
`template_kwargs` reach the template (the built-in model reads `attributes`, a SteerLM string).
`to_messages` builds the chat from a question when a caller must place extra text the way its
server does (the gate passes the chat's own steering renderer, so it measures the prompts users'
answers come from).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from evaluator.sampling import generate_kwargs
from evaluator.streams import in_streams


def hf_answer_fn(
    model: Any,
    tokenizer: Any,
    *,
    max_new_tokens: int = 128,
    batch_size: int = 8,
    template_kwargs: dict | None = None,
    to_messages: Callable[[str], list[dict]] | None = None,
    sampling: dict | None = None,
    seed: int | None = None,
    streams: int = 1,
):
    """`answer_fn(questions) -> answers` generating greedily with `model`, or sampling with
    `sampling`, e.g. `{"temperature": 0.7, "top_p": 0.9}`: the arguments of
    `evaluator.sampling.generate_kwargs`, so drawn as the CPU chat draws them. With a `seed`, each
    batch draws from its own generator, seeded from (`seed`, the batch's index): the same random
    numbers whatever runs beside it in `streams` (`evaluator.streams`). Several streams sample only
    with a seed (torch's one generator would make their draws a race)."""
    if sampling and seed is None and streams > 1:
        raise ValueError("sampling in several streams needs a seed: each batch draws from its own generator")
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def prompt_text(question: str) -> str:
        messages = to_messages(question) if to_messages else [{"role": "user", "content": question}]
        if getattr(tokenizer, "chat_template", None):
            return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                 **(template_kwargs or {}))
        return f"\n\nHuman: {question}\n\nAssistant:"

    def decoding(index: int) -> dict:
        if not sampling:
            return {"do_sample": False}
        device = next(model.parameters()).device
        return generate_kwargs(**sampling, generator=None if seed is None else batch_generator(seed, index, device))

    def generate(job: tuple[int, dict]) -> list[str]:
        index, enc = job
        with torch.inference_mode():
            ids = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=pad_id, **decoding(index))
        with _TOKENIZER:
            return [t.strip() for t in tokenizer.batch_decode(ids[:, enc["input_ids"].shape[1]:],
                                                              skip_special_tokens=True)]

    def answer(questions: Sequence[str]) -> list[str]:
        was_training = model.training
        if was_training:  # a model already in eval mode is not touched: callers may share it across threads
            model.eval()
        try:
            batches = list(enumerate(_encoded(tokenizer, [prompt_text(q) for q in questions], batch_size,
                                              next(model.parameters()).device)))
            return [a for out in in_streams(generate, batches, streams) for a in out]
        finally:
            if was_training:
                model.train()

    return answer


# A fast tokenizer is one Rust object that padding settings mutate: one thread at a time encodes
# or decodes with it (the gate's steering cells answer side by side with one tokenizer; rendering
# the chat template is Jinja only and stays outside).
_TOKENIZER = threading.Lock()


def _encoded(tokenizer: Any, texts: list[str], batch_size: int, device: Any) -> list[dict]:
    """`texts` tokenized in batches of `batch_size`, left-padded: generation continues from the
    right end of every row."""
    with _TOKENIZER:
        side = tokenizer.padding_side
        tokenizer.padding_side = "left"
        try:
            return [{k: v.to(device) for k, v in tokenizer(texts[i: i + batch_size], return_tensors="pt",
                                                            padding=True, add_special_tokens=False).items()}
                    for i in range(0, len(texts), batch_size)]
        finally:
            tokenizer.padding_side = side


def batch_generator(seed: int, index: int, device: Any = "cpu") -> torch.Generator:
    """The random generator of batch `index` of a draw seeded with `seed` (independent streams per
    pair, numpy's `SeedSequence`), on the model's device."""
    state = np.random.SeedSequence([seed, index]).generate_state(1, dtype=np.uint64)[0]
    return torch.Generator(device=device).manual_seed(int(state))
