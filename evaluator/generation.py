"""Turn a Hugging Face causal LM into the plain answer function the evaluator takes.

The evaluator's helpfulness and harmlessness scores only need `answer_fn(questions) -> answers`;
the service hands it one made from its chat backend. This helper is for the CLI and benchmarks,
where there is a model directory and no service: greedy decoding (deterministic, so a candidate
and the live release answer the same prompts comparably), batched with left padding, each
question rendered as a one-turn chat with the tokenizer's template. `template_kwargs` reach the
template (the built-in model reads `attributes`, a SteerLM string). `to_messages` builds the
chat from a question when a caller must place extra text the way its server does (the gate
passes the chat's own steering renderer, so it measures the prompts users' answers come from).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import torch

from evaluator.sampling import generate_kwargs


def hf_answer_fn(
    model: Any,
    tokenizer: Any,
    *,
    max_new_tokens: int = 128,
    batch_size: int = 8,
    template_kwargs: dict | None = None,
    to_messages: Callable[[str], list[dict]] | None = None,
    sampling: dict | None = None,
):
    """`answer_fn(questions) -> answers` generating greedily with `model`, or sampling with
    `sampling`, e.g. `{"temperature": 0.7, "top_p": 0.9}`: the arguments of
    `evaluator.sampling.generate_kwargs`, so drawn as the CPU chat draws them."""
    decoding = generate_kwargs(**sampling) if sampling else {"do_sample": False}
    pad_id = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id

    def prompt_text(question: str) -> str:
        messages = to_messages(question) if to_messages else [{"role": "user", "content": question}]
        if getattr(tokenizer, "chat_template", None):
            return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                 **(template_kwargs or {}))
        return f"\n\nHuman: {question}\n\nAssistant:"

    def answer(questions: Sequence[str]) -> list[str]:
        out: list[str] = []
        was_training = model.training
        model.eval()
        side = tokenizer.padding_side
        tokenizer.padding_side = "left"  # generation continues from the right end of every row
        try:
            for i in range(0, len(questions), batch_size):
                batch = [prompt_text(q) for q in questions[i: i + batch_size]]
                enc = tokenizer(batch, return_tensors="pt", padding=True, add_special_tokens=False)
                enc = {k: v.to(next(model.parameters()).device) for k, v in enc.items()}
                with torch.inference_mode():
                    ids = model.generate(**enc, max_new_tokens=max_new_tokens, pad_token_id=pad_id, **decoding)
                new = ids[:, enc["input_ids"].shape[1]:]
                out += [t.strip() for t in tokenizer.batch_decode(new, skip_special_tokens=True)]
        finally:
            tokenizer.padding_side = side
            model.train(was_training)
        return out

    return answer
