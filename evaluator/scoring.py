"""Score (conversation, answer) pairs with a causal LM, a LoRA policy against its base, or a reward model.

Every scorer has one method, `score(prompts, answers) -> list[float]`, higher = better, so the
HH evaluation (and anything else that ranks answers) does not care which kind it was given.

The log-probability pass itself, and how it is made fast on a CPU, is `evaluator.logprobs`.

The implicit reward of a PEFT policy, β·(log π − log π_ref), uses the same weights with the
adapter disabled as π_ref (`model.disable_adapter()`), so no second copy of the model is held.
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import torch

from evaluator.logprobs import (
    BatchConfig,
    Message,
    ScoreStats,
    answer_logprobs,
    autocast,
    can_share,
    encode_rows,
    length_buckets,
    pad_token_id,
)


class Scorer(Protocol):
    """Anything that rates answers to conversations; higher is better."""

    def score(self, prompts: Sequence[Sequence[Message]], answers: Sequence[str]) -> list[float]: ...


# ---------------------------------------------------------------- scorers


def _adapter_disabled(model: Any) -> Callable[[], contextlib.AbstractContextManager]:
    if not hasattr(model, "disable_adapter"):
        raise TypeError(
            f"{type(model).__name__} has no adapter to disable: the implicit reward needs a PEFT model "
            "(peft.PeftModel) or an explicit `reference` model; use the log-likelihood scorer for a plain model"
        )
    return model.disable_adapter


@dataclass
class LogLikelihoodScorer:
    """Score = Σ log p(answer tokens | conversation) under `model` (mean per token if `mean`)."""

    model: Any
    tokenizer: Any
    batch: BatchConfig = field(default_factory=BatchConfig)
    mean: bool = False
    attributes: str | None = None  # SteerLM attribute line to condition on (see `render`)
    stats: ScoreStats = field(default_factory=ScoreStats)

    def score(self, prompts: Sequence[Sequence[Message]], answers: Sequence[str]) -> list[float]:
        rows, truncated = encode_rows(self.tokenizer, prompts, answers, self.batch,
                                      share=can_share(self.model, self.batch), attributes=self.attributes)
        self.stats.items += len(answers)
        self.stats.truncated += truncated
        return answer_logprobs(
            self.model, rows, len(answers), self.batch, pad_id=pad_token_id(self.tokenizer), stats=self.stats, mean=self.mean
        )


@dataclass
class ImplicitRewardScorer:
    """Score = β·(log π(answer|prompt) − log π_ref(answer|prompt)), the DPO implicit reward.

    π_ref is `reference` when given (it must share the tokenizer), else `model` with its PEFT
    adapter disabled. β scales every score alike, so it changes no accuracy; it is there so
    the scores read as the rewards DPO optimised.
    """

    model: Any
    tokenizer: Any
    beta: float = 0.1
    reference: Any = None
    batch: BatchConfig = field(default_factory=BatchConfig)
    attributes: str | None = None  # SteerLM attribute line to condition on (see `render`)
    stats: ScoreStats = field(default_factory=ScoreStats)

    def __post_init__(self) -> None:
        if self.beta <= 0:
            raise ValueError(f"beta must be > 0, got {self.beta}")
        if self.reference is None:
            _adapter_disabled(self.model)  # fail now, not after the policy pass

    def score(self, prompts: Sequence[Sequence[Message]], answers: Sequence[str]) -> list[float]:
        share = can_share(self.model, self.batch) and (
            self.reference is None or can_share(self.reference, self.batch)
        )
        rows, truncated = encode_rows(self.tokenizer, prompts, answers, self.batch, share=share,
                                      attributes=self.attributes)
        self.stats.items += len(answers)
        self.stats.truncated += truncated
        pad_id = pad_token_id(self.tokenizer)

        def logprobs(model: Any) -> list[float]:
            return answer_logprobs(model, rows, len(answers), self.batch, pad_id=pad_id, stats=self.stats)

        policy = logprobs(self.model)
        if self.reference is not None:
            ref = logprobs(self.reference)
        else:
            with _adapter_disabled(self.model)():
                ref = logprobs(self.model)
        return [self.beta * (p - r) for p, r in zip(policy, ref)]


@dataclass
class RewardModelScorer:
    """Score = a sequence classifier's output on the whole rendered conversation + answer.

    One label: its logit. Two labels: logit[1] − logit[0] (label 1 = preferred / good).
    Padding follows the tokenizer's side (absolute-position encoders such as BERT expect right).
    """

    model: Any
    tokenizer: Any
    batch: BatchConfig = field(default_factory=BatchConfig)
    stats: ScoreStats = field(default_factory=ScoreStats)

    def __post_init__(self) -> None:
        # Sequence classifiers find each row's last token through pad_token_id; batches need it.
        if getattr(self.model.config, "pad_token_id", None) is None:
            self.model.config.pad_token_id = pad_token_id(self.tokenizer)

    def score(self, prompts: Sequence[Sequence[Message]], answers: Sequence[str]) -> list[float]:
        rows, truncated = encode_rows(self.tokenizer, prompts, answers, self.batch, share=False)
        self.stats.items += len(answers)
        self.stats.truncated += truncated
        device = next(self.model.parameters()).device
        pad_id = int(self.model.config.pad_token_id)
        left = getattr(self.tokenizer, "padding_side", "right") == "left"
        out = [math.nan] * len(answers)
        self.model.eval()
        with torch.inference_mode():
            for batch_rows in length_buckets([r.length for r in rows], self.batch):
                seqs = [rows[i].prompt_ids + rows[i].answers[0] for i in batch_rows]
                width = max(len(s) for s in seqs)
                ids = torch.full((len(seqs), width), pad_id, dtype=torch.long)
                mask = torch.zeros((len(seqs), width), dtype=torch.long)
                for r, seq in enumerate(seqs):
                    span = slice(width - len(seq), width) if left else slice(0, len(seq))
                    ids[r, span] = torch.tensor(seq, dtype=torch.long)
                    mask[r, span] = 1
                with autocast(self.model, self.batch):
                    logits = self.model(input_ids=ids.to(device), attention_mask=mask.to(device)).logits
                logits = logits.float()
                values = logits[:, 0] if logits.shape[-1] == 1 else logits[:, 1] - logits[:, 0]
                for i, v in zip(batch_rows, values.tolist()):
                    out[rows[i].items[0]] = v
                self.stats.batches += 1
                self.stats.tokens += int(mask.sum())
                self.stats.padded_tokens += ids.numel()
        return out
