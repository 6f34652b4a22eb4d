"""Log-probabilities of answers given conversations, computed fast on a CPU.

How the log-probability pass is made fast:
- Prompt and answer are rendered with the tokenizer's chat template (HH's own
  `"\\n\\nHuman: ..."` format when the tokenizer has none) and tokenized separately, as TRL's DPO
  does, so the answer tokens are the same whatever the prompt and truncation.
- Prompt sharing: answers to the same prompt (chosen and rejected of an HH pair, the K answers of
  a thread) go into one row — the prompt once, then each answer — with a 4-D attention mask that
  lets each answer see the prompt and itself only, and position ids that restart after the
  prompt. Each answer's log-probability is what a separate row would give (to float rounding),
  and the prompt, most of an HH transcript, is computed once instead of twice (HH test split,
  built-in tokenizer: 5.8M -> 3.9M tokens).
  Only for `sdpa` and `eager` attention (the mask formats we know); others get a row per answer.
- Long inputs lose the *start* of the prompt (the oldest turns), never the answer; an answer
  longer than `max_length` keeps its beginning. With sharing, the prompt is cut to fit beside the
  longest answer of its row. Truncations are counted.
- Rows are sorted by length and packed into batches under a token budget (length bucketing),
  so padding stays small and one huge transcript does not set the batch size for all. A small
  budget (4096 tokens) is faster on a CPU than a big one: less padding, activations that stay
  in cache (built-in model, HH sample: 6.1k tokens/CPU-s at 2048, 4.4k at 16384).
- Rows are left-padded, which puts the answers at the end of each row; the model is asked for
  the logits of that tail only (`logits_to_keep`), so the vocabulary projection — on a tiny model
  as costly as the transformer itself — is skipped for the prompt.
- `torch.inference_mode()` throughout. `workers` > 1 scores that many batches at once in Python
  threads sharing torch's threads, which keeps a small CPU's cores busy without intra-op
  fork/join (`evaluator.streams`); otherwise threads are the caller's (`torch.set_num_threads`).
"""

from __future__ import annotations

import contextlib
import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from evaluator.streams import in_streams

Message = dict[str, str]

# Attention implementations whose custom 4-D mask format we build (bool for sdpa, additive for eager).
_SHARED_PROMPT_ATTENTION = ("sdpa", "eager")


def native_bf16() -> bool:
    """Whether this machine computes on a CPU that does bfloat16 natively (AVX512-BF16 or AMX), with
    no GPU: there bfloat16 halves the weights' memory traffic; elsewhere it is emulated and slower."""
    if torch.cuda.is_available():
        return False
    checks = ("_is_avx512_bf16_supported", "_is_amx_tile_supported")
    return any(getattr(torch.cpu, f, lambda: False)() for f in checks)


@dataclass
class BatchConfig:
    """How inputs are cut and batched.

    max_length: most tokens one answer sees (its prompt + itself).
    max_tokens: most tokens in a batch, padding included (rows x longest row).
    share_prompts: pack answers to the same prompt into one row (see module docstring).
    max_answers_per_row: cap on answers sharing one row.
    max_logits: cap on rows x answer tail x vocabulary per batch (float32 logits: 2**28 = 1 GiB),
        which only binds for large-vocabulary models.
    bf16: run the forward pass under bfloat16 autocast (log-softmax stays float32). About 1.5x
        faster on CPUs with AVX512-BF16/AMX; log-probabilities move by ~0.1 nat, so compare a
        candidate and the live release with the same setting.
    workers: batches scored concurrently by this many threads sharing torch's threads (see
        `evaluator.streams`); 1 = one batch at a time with torch's own intra-op threads.
    """

    max_length: int = 1024
    max_tokens: int = 4096
    max_batch_size: int = 64
    share_prompts: bool = True
    max_answers_per_row: int = 8
    max_logits: int = 2**28
    bf16: bool = False
    workers: int = 1

    @classmethod
    def for_this_machine(cls, *, bf16: bool | None = None, workers: int | None = None, **kwargs: Any) -> BatchConfig:
        """A config whose unset `bf16` and `workers` suit this machine: bf16 autocast only where the
        CPU computes bf16 natively (AVX512-BF16, AMX; never on a GPU), and one batch per CPU core
        (at most 8) on a CPU, one stream of batches on a GPU (`evaluator.streams`)."""
        import os

        gpu = torch.cuda.is_available()
        if bf16 is None:
            bf16 = native_bf16()
        if workers is None:
            workers = 1 if gpu else max(1, min(os.cpu_count() or 1, 8))
        return cls(bf16=bf16, workers=workers, **kwargs)

    def __post_init__(self) -> None:
        if self.max_length < 2:
            raise ValueError(f"max_length must be at least 2 tokens, got {self.max_length}")
        if self.max_tokens < self.max_length:
            raise ValueError(f"max_tokens ({self.max_tokens}) must be >= max_length ({self.max_length})")


@dataclass
class ScoreStats:
    """Counters a scorer keeps across calls, for the report."""

    items: int = 0
    truncated: int = 0
    batches: int = 0
    tokens: int = 0  # real (non-pad) tokens fed to the model, summed over model passes
    padded_tokens: int = 0

    def as_dict(self) -> dict[str, int]:
        return dict(vars(self))


# ---------------------------------------------------------------- rendering and tokenization


def hh_format(messages: Sequence[Message], answer: str) -> tuple[str, str]:
    """HH-RLHF's own transcript format, for tokenizers without a chat template."""
    names = {"user": "Human", "assistant": "Assistant", "system": "System"}
    prompt = "".join(f"\n\n{names.get(m['role'], m['role'])}: {m['content']}" for m in messages)
    return prompt + "\n\nAssistant:", " " + answer


def render(tokenizer: Any, messages: Sequence[Message], answer: str, *,
           attributes: str | None = None) -> tuple[str, str]:
    """(prompt text ending with the assistant header, answer text including end-of-turn).

    `attributes`: a SteerLM attribute string written after the assistant header, as the model
    saw it when it generated (and as training sets render it); None scores without one."""
    if not getattr(tokenizer, "chat_template", None):
        return hh_format(messages, answer)
    messages = list(messages)
    kwargs = {"attributes": attributes} if attributes else {}
    prompt = tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True, **kwargs)
    full = tokenizer.apply_chat_template(messages + [{"role": "assistant", "content": answer, **kwargs}], tokenize=False)
    eos = tokenizer.eos_token or ""
    if full.startswith(prompt):
        completion = full[len(prompt):]
    else:  # templates that rewrite earlier turns once an answer follows
        completion = answer + eos
    # Whatever the template adds after end-of-turn ("\n") is never generated; do not score it.
    if eos and eos in completion:
        completion = completion[: completion.rindex(eos) + len(eos)]
    return prompt, completion


@dataclass
class Row:
    """One model input row: a prompt and the answers that share it, and the items they answer."""

    prompt_ids: list[int]
    answers: list[list[int]]
    items: list[int]

    @property
    def length(self) -> int:
        return len(self.prompt_ids) + sum(len(a) for a in self.answers)


def _tokenize(tokenizer: Any, texts: list[str]) -> list[list[int]]:
    # verbose=False: long transcripts are expected here and truncated below, not by the tokenizer.
    return [list(ids) for ids in tokenizer(texts, add_special_tokens=False, verbose=False)["input_ids"]]


def encode_rows(
    tokenizer: Any,
    prompts: Sequence[Sequence[Message]],
    answers: Sequence[str],
    cfg: BatchConfig,
    *,
    share: bool,
    attributes: str | None = None,
) -> tuple[list[Row], int]:
    """Render, tokenize and truncate; group answers to identical prompts when `share`.

    Returns (rows, number of truncated items).
    """
    if len(prompts) != len(answers):
        raise ValueError(f"got {len(prompts)} prompts but {len(answers)} answers; pass one answer per prompt")
    texts = [render(tokenizer, p, a, attributes=attributes) for p, a in zip(prompts, answers)]
    prompt_texts = list(dict.fromkeys(t[0] for t in texts))  # unique, in first-seen order
    prompt_ids = dict(zip(prompt_texts, _tokenize(tokenizer, prompt_texts)))
    answer_ids = _tokenize(tokenizer, [t[1] for t in texts])
    for i, ids in enumerate(answer_ids):
        if not ids:
            raise ValueError(f"answer {i} renders to no tokens; the tokenizer or chat template drops it")
    if any(not ids for ids in prompt_ids.values()):
        raise ValueError("a prompt renders to no tokens, so an answer's first token has nothing to condition on; "
                         "use a tokenizer whose chat template writes an assistant header")

    groups: dict[str, list[int]] = {}
    for i, (p_text, _) in enumerate(texts):
        groups.setdefault(p_text if share else str(i), []).append(i)

    rows: list[Row] = []
    truncated = 0
    for members in groups.values():
        full_prompt = prompt_ids[texts[members[0]][0]]
        for start in range(0, len(members), cfg.max_answers_per_row if share else 1):
            chunk = members[start: start + cfg.max_answers_per_row]
            cut = [answer_ids[i][: cfg.max_length - 1] for i in chunk]
            # Each answer sees prompt + itself: the prompt must fit beside the longest answer.
            room = max(1, cfg.max_length - max(len(a) for a in cut))
            prompt = full_prompt[-room:] if len(full_prompt) > room else full_prompt
            truncated += sum(len(c) < len(answer_ids[i]) or len(prompt) < len(full_prompt) for c, i in zip(cut, chunk))
            rows.append(Row(prompt, cut, chunk))
    return rows, truncated


def length_buckets(lengths: Sequence[int], cfg: BatchConfig) -> list[list[int]]:
    """Indices grouped into batches of similar length, longest first, under the token budget."""
    order = sorted(range(len(lengths)), key=lambda i: lengths[i], reverse=True)
    batches: list[list[int]] = []
    current: list[int] = []
    for i in order:
        longest = lengths[current[0]] if current else lengths[i]
        if current and ((len(current) + 1) * longest > cfg.max_tokens or len(current) >= cfg.max_batch_size):
            batches.append(current)
            current = []
        current.append(i)
    if current:
        batches.append(current)
    return batches


# ---------------------------------------------------------------- log-probability pass


def _split_for_logits(batch: list[int], rows: Sequence[Row], vocab: int, limit: int) -> list[list[int]]:
    """Split a batch (longest row first) so that rows x longest answer tail x vocab stays under limit."""
    out: list[list[int]] = []
    current: list[int] = []
    tail = 0
    for i in batch:
        row_tail = rows[i].length - len(rows[i].prompt_ids) + 1
        if current and (len(current) + 1) * max(tail, row_tail) * vocab > limit:
            out.append(current)
            current, tail = [], 0
        current.append(i)
        tail = max(tail, row_tail)
    if current:
        out.append(current)
    return out


def pad_token_id(tokenizer: Any) -> int:
    for tid in (getattr(tokenizer, "pad_token_id", None), getattr(tokenizer, "eos_token_id", None)):
        if tid is not None:
            return int(tid)
    return 0


def _attention_implementation(model: Any) -> str | None:
    return getattr(getattr(model, "config", None), "_attn_implementation", None)


@dataclass
class _Batch:
    inputs: dict[str, torch.Tensor]
    tail: int  # logits needed for the last `tail` positions
    # one entry per scored answer token: (row, tail position whose logits predict it, token, item)
    rows: torch.Tensor
    positions: torch.Tensor
    targets: torch.Tensor
    owners: torch.Tensor


def _build_batch(rows: Sequence[Row], pad_id: int, mask_kind: str | None) -> _Batch:
    """Left-padded ids, position ids, an attention mask (2-D, or 4-D when answers share a prompt)."""
    width = max(r.length for r in rows)
    tail = max(r.length - len(r.prompt_ids) for r in rows) + 1
    ids = torch.full((len(rows), width), pad_id, dtype=torch.long)
    segment = torch.full((len(rows), width), -1, dtype=torch.long)  # -1 pad, 0 prompt, k answer k
    positions = torch.zeros((len(rows), width), dtype=torch.long)
    idx_row, idx_pos, idx_tok, idx_item = [], [], [], []
    for r, row in enumerate(rows):
        at = width - row.length
        P = len(row.prompt_ids)
        ids[r, at: at + P] = torch.tensor(row.prompt_ids, dtype=torch.long)
        segment[r, at: at + P] = 0
        positions[r, at: at + P] = torch.arange(P)
        cursor = at + P
        for k, (answer, item) in enumerate(zip(row.answers, row.items), start=1):
            n = len(answer)
            ids[r, cursor: cursor + n] = torch.tensor(answer, dtype=torch.long)
            segment[r, cursor: cursor + n] = k
            positions[r, cursor: cursor + n] = torch.arange(P, P + n)
            # First answer token is predicted by the prompt's last position, the rest by their own
            # previous token; positions are counted within the tail window of the row.
            preds = [at + P - 1] + list(range(cursor, cursor + n - 1))
            idx_row += [r] * n
            idx_pos += [p - (width - tail) for p in preds]
            idx_tok += answer
            idx_item += [item] * n
            cursor += n
    valid = segment >= 0
    if mask_kind is None:
        attention_mask = valid.long()
    else:
        q, k = segment.unsqueeze(2), segment.unsqueeze(1)
        causal = torch.ones(width, width, dtype=torch.bool).tril()
        allowed = causal & valid.unsqueeze(1) & ((k == 0) | (k == q))
        allowed |= torch.eye(width, dtype=torch.bool)  # pad rows attend to themselves: no all-masked NaN
        allowed = allowed.unsqueeze(1)
        if mask_kind == "eager":
            attention_mask = torch.zeros(allowed.shape).masked_fill(~allowed, torch.finfo(torch.float32).min)
        else:
            attention_mask = allowed
    return _Batch(
        inputs={"input_ids": ids, "attention_mask": attention_mask, "position_ids": positions},
        tail=tail,
        rows=torch.tensor(idx_row),
        positions=torch.tensor(idx_pos),
        targets=torch.tensor(idx_tok),
        owners=torch.tensor(idx_item),
    )


def autocast(model: Any, cfg: BatchConfig) -> contextlib.AbstractContextManager:
    if not cfg.bf16:
        return contextlib.nullcontext()
    return torch.autocast(next(model.parameters()).device.type, dtype=torch.bfloat16)


def _tail_logits(model: Any, inputs: dict[str, torch.Tensor], keep: int) -> torch.Tensor:
    """Logits of the last `keep` positions; full logits for models without `logits_to_keep`."""
    try:
        logits = model(**inputs, logits_to_keep=keep, use_cache=False).logits
    except TypeError:
        logits = model(**inputs, use_cache=False).logits
    return logits[:, -keep:]


def answer_logprobs(
    model: Any,
    rows: Sequence[Row],
    n_items: int,
    cfg: BatchConfig,
    *,
    pad_id: int,
    stats: ScoreStats | None = None,
    mean: bool = False,
) -> list[float]:
    """Sum (or mean) of log p(answer token | prompt, earlier answer tokens), one float per item."""
    stats = stats if stats is not None else ScoreStats()
    device = next(model.parameters()).device
    shared = any(len(r.answers) > 1 for r in rows)
    mask_kind = _attention_implementation(model) if shared else None
    if shared and mask_kind not in _SHARED_PROMPT_ATTENTION:
        raise ValueError(
            f"prompt sharing needs sdpa or eager attention, the model uses {mask_kind!r}; "
            "build the rows with share=False"
        )
    vocab = int(getattr(getattr(model, "config", None), "vocab_size", 0) or 1)
    batches = [
        part for bucket in length_buckets([r.length for r in rows], cfg)
        for part in _split_for_logits(bucket, rows, vocab, cfg.max_logits)
    ]

    def run(batch_rows: list[int]) -> tuple[torch.Tensor, torch.Tensor, int, int]:
        # inference_mode and autocast are thread-local: entered here, in whichever thread runs this.
        b = _build_batch([rows[i] for i in batch_rows], pad_id, mask_kind)
        with torch.inference_mode(), autocast(model, cfg):
            logits = _tail_logits(model, {k: v.to(device) for k, v in b.inputs.items()}, b.tail)
        with torch.inference_mode():
            logits = logits.float()
            picked = logits[b.rows, b.positions, b.targets] - torch.logsumexp(logits[b.rows, b.positions], dim=-1)
        return b.owners, picked.double().cpu(), sum(rows[i].length for i in batch_rows), b.inputs["input_ids"].numel()

    sums = torch.zeros(n_items, dtype=torch.float64)
    counts = torch.zeros(n_items, dtype=torch.float64)
    was_training = model.training
    model.eval()
    try:
        for owners, picked, tokens, padded in in_streams(run, batches, cfg.workers):
            # Every item lives in one row of one batch, so the order batches finish in changes nothing.
            sums.index_add_(0, owners, picked)
            counts.index_add_(0, owners, torch.ones_like(picked))
            stats.batches += 1
            stats.tokens += tokens
            stats.padded_tokens += padded
    finally:
        model.train(was_training)
    values = sums / counts.clamp(min=1) if mean else sums
    return [v if c > 0 else math.nan for v, c in zip(values.tolist(), counts.tolist())]


def can_share(model: Any, cfg: BatchConfig) -> bool:
    return cfg.share_prompts and _attention_implementation(model) in _SHARED_PROMPT_ATTENTION
