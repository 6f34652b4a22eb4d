"""What the judges read of a (conversation, answer): the served model's hidden states, and counts.

A judge is a small trained head over features computed once per answer, so training, the gate
and the serving guard all call this one function and see the same numbers.

Design choices:
- The encoder is the served base model, SmolLM2-135M-Instruct, without any adapter: it already
  reads chat transcripts, its forward pass is what a 2-core CPU can afford per gate answer
  (about 0.1-0.4 s), and it is built from PyPI like the chat (no model hub).
- The conversation and the answer are rendered with the model's chat template, as the chat
  renders them. Long inputs lose the oldest part of the conversation, never the answer's start:
  the last `max_prompt_tokens` of the prompt and the first `max_answer_tokens` of the answer.
- Features per answer: the last layer's hidden state averaged over the answer's tokens, the same
  at the middle layer, the hidden state at the answer's last token, and four scalars - mean and
  summed log-likelihood of the answer tokens, log(1 + words), log(1 + answer tokens kept).
  Which of these a judge uses is its own recipe's choice (chosen on a dev split).
- Relevance, optionally (the "pmi" block): how much more likely the answer is after this
  conversation than after an empty user turn (pointwise mutual information, per token and summed).
  An answer to another question is fluent but no likelier here, which hidden states averaged over
  the answer do not show a linear head; it costs a second, answer-only pass (`Featurizer.alone`),
  so only a head that reads the block pays for it (`with_pmi`).
- The forward pass runs under bfloat16 autocast (3x faster than float32 on this CPU, which has
  AVX512-BF16; hidden states move by about 1 %): the judges are trained and used with the same
  setting, which is part of their recipe.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch

from evaluator.streams import current, in_streams
from evaluator.text import words

Message = dict[str, str]

# Feature blocks, in the order `Featurizer.encode` lays them out.
BLOCKS = ("mean_last", "mean_mid", "final", "scalars")
SCALARS = ("loglik_mean", "loglik_sum", "log_words", "log_tokens")
PMI = ("pmi_mean", "pmi_sum")  # the "pmi" block, after the scalars: loglik_mean / _sum minus the same alone
ALONE_KEPT = 4096  # answers whose `alone` row a featurizer keeps (two floats each)


@dataclass(frozen=True)
class FeatureConfig:
    """How an input is cut and batched. Part of a judge's recipe: change it and retrain."""

    max_prompt_tokens: int = 320
    max_answer_tokens: int = 192
    max_batch_tokens: int = 4096
    bf16: bool = True


class Featurizer:
    """Features of (conversation, answer) items from a causal LM directory (the served base model)."""

    def __init__(self, model_dir: str | Path, config: FeatureConfig = FeatureConfig()) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer

        self.model_dir = Path(model_dir)
        if not (self.model_dir / "config.json").is_file():
            raise FileNotFoundError(
                f"no model at {self.model_dir}: the judges read the served base model; "
                "build it with `advisor model build --model pretrained`")
        self.config = config
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        self.model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32)
        self.model.eval()
        self.layers = int(self.model.config.num_hidden_layers)
        self.hidden = int(self.model.config.hidden_size)
        self._alone: dict[str, np.ndarray] = {}  # answer -> `alone` row, oldest first
        self._alone_lock = threading.Lock()

    @property
    def dim(self) -> int:
        return 3 * self.hidden + len(SCALARS)

    def _ids(self, messages: Sequence[Message], answer: str) -> tuple[list[int], list[int]]:
        return _ids(self.tokenizer, self.config, messages, answer)

    def alone(self, answers: Sequence[str]) -> np.ndarray:
        """Float32 array (answers, 2): mean and summed log-likelihood of each answer after an empty
        user turn, cut as `encode` cuts it: the baseline of the "pmi" block. It does not depend on
        the conversation, so an answer read alone before (the gate's relevance check reads its
        answers again under other prompts) is not read again (the last `ALONE_KEPT`)."""
        with self._alone_lock:
            known = {a: self._alone[a] for a in answers if a in self._alone}
        todo = [a for a in dict.fromkeys(answers) if a not in known]
        if todo:
            rows = _loglik(self.encode([[{"role": "user", "content": ""}]] * len(todo), todo)).copy()
            fresh = dict(zip(todo, rows))
            known.update(fresh)
            with self._alone_lock:
                self._alone.update(fresh)
                while len(self._alone) > ALONE_KEPT:
                    self._alone.pop(next(iter(self._alone)))
        return np.array([known[a] for a in answers], dtype=np.float32).reshape(len(answers), 2)

    def encode(self, prompts: Sequence[Sequence[Message]], answers: Sequence[str]) -> np.ndarray:
        """Float32 array (items, dim): the blocks of `BLOCKS`, concatenated."""
        if len(prompts) != len(answers):
            raise ValueError(f"{len(prompts)} conversations but {len(answers)} answers")
        items = [self._ids(p, a) for p, a in zip(prompts, answers)]
        out = np.zeros((len(items), self.dim), dtype=np.float32)
        order = sorted(range(len(items)), key=lambda i: len(items[i][0]) + len(items[i][1]))
        batches: list[list[int]] = [[]]
        for i in order:
            longest = max([len(items[j][0]) + len(items[j][1]) for j in batches[-1] + [i]])
            if batches[-1] and longest * (len(batches[-1]) + 1) > self.config.max_batch_tokens:
                batches.append([])
            batches[-1].append(i)
        # Each batch fills its own rows of `out`; batches side by side where the caller asked for it
        # (the gate: `evaluator.streams.side_by_side`), the same features (bench/gate_streams.py).
        in_streams(lambda batch: self._run(batch, items, out), [b for b in batches if b], current())
        for row, answer in enumerate(answers):
            out[row, -2] = math.log1p(words(answer))
        return out

    @torch.inference_mode()
    def _run(self, batch: list[int], items: list[tuple[list[int], list[int]]], out: np.ndarray) -> None:
        pad = self.tokenizer.pad_token_id if self.tokenizer.pad_token_id is not None else self.tokenizer.eos_token_id
        width = max(len(p) + len(a) for p, a in (items[i] for i in batch))
        ids = torch.full((len(batch), width), pad, dtype=torch.long)
        mask = torch.zeros((len(batch), width), dtype=torch.long)
        for r, i in enumerate(batch):
            seq = items[i][0] + items[i][1]
            ids[r, : len(seq)] = torch.tensor(seq)
            mask[r, : len(seq)] = 1
        # The vocabulary projection only where an answer token is predicted: on a 49k vocabulary
        # it would otherwise cost as much as the transformer.
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.config.bf16):
            res = self.model.model(input_ids=ids, attention_mask=mask, output_hidden_states=True)
        last, mid = res.hidden_states[-1].float(), res.hidden_states[self.layers // 2].float()
        h = self.hidden
        for r, i in enumerate(batch):
            p, a = items[i]
            span = slice(len(p), len(p) + len(a))
            targets = torch.tensor(a)
            logits = self.model.lm_head(last[r, len(p) - 1: len(p) + len(a) - 1]).float()
            token_logp = torch.log_softmax(logits, dim=-1).gather(1, targets[:, None]).squeeze(1)
            out[i, :h] = last[r, span].mean(0).numpy()
            out[i, h: 2 * h] = mid[r, span].mean(0).numpy()
            out[i, 2 * h: 3 * h] = last[r, len(p) + len(a) - 1].numpy()
            out[i, 3 * h:] = [float(token_logp.mean()), float(token_logp.sum()), 0.0, math.log1p(len(a))]


def _ids(tokenizer: Any, config: FeatureConfig, messages: Sequence[Message], answer: str) -> tuple[list[int], list[int]]:
    """(prompt ids, answer ids) as the chat renders them, cut as `config` says."""
    from evaluator.logprobs import render

    prompt, completion = render(tokenizer, list(messages), answer)
    p = tokenizer(prompt, add_special_tokens=False, verbose=False)["input_ids"][-config.max_prompt_tokens:]
    a = tokenizer(completion, add_special_tokens=False, verbose=False)["input_ids"][: config.max_answer_tokens]
    return list(p), list(a) or [tokenizer.eos_token_id]


class RequestEncoder:
    """What the request head reads: one vector per request, the served base model's hidden state
    after its first `depth` layers (the final norm applied) at the end-of-turn token that closes
    the request rendered alone, the assistant's turn opened.

    Only those layers run, and only over the request's own tokens: the rendering's constant head
    (the template's system turn, the user's turn opened) is read once and its attention cache
    reused. The guard judges a request while the model prefills the prompt, and on a 2-core CPU
    the two share the cores, so every layer and token skipped is time to first token; the recipe
    picks the shallowest depth that judges as well as the whole model in cross-validation.
    Requests are read one at a time, in training as in serving, so both take the same path.
    `states(requests, depths)` reads several depths in one pass (depths <= `depth`), for training."""

    def __init__(self, model_dir: str | Path, depth: int, config: FeatureConfig = FeatureConfig()) -> None:
        from transformers import AutoModelForCausalLM, AutoTokenizer
        from transformers.utils import logging as hf_logging

        self.model_dir, self.depth, self.config = Path(model_dir), depth, config
        if not (self.model_dir / "config.json").is_file():
            raise FileNotFoundError(f"no model at {self.model_dir}: build it with `advisor model build --model pretrained`")
        self.tokenizer = AutoTokenizer.from_pretrained(self.model_dir)
        # The first `depth` layers only: the rest are never loaded or run (transformers would list
        # each of their weights as unexpected; that is the point, so its report is not shown).
        verbosity = hf_logging.get_verbosity()
        hf_logging.set_verbosity_error()
        try:
            self.model = AutoModelForCausalLM.from_pretrained(self.model_dir, dtype=torch.float32,
                                                              num_hidden_layers=depth).model.eval()
        finally:
            hf_logging.set_verbosity(verbosity)
        self.hidden = int(self.model.config.hidden_size)
        self.head_ids, self.head_cache = self._head()

    def _ids(self, request: str) -> list[int]:
        return sum(_ids(self.tokenizer, self.config, [{"role": "user", "content": request}], ""), [])

    @torch.inference_mode()
    def _head(self) -> tuple[list[int], Any]:
        """The ids every rendering starts with, up to the request's text, and their attention cache
        (none when renderings share no head)."""
        a, b = self._ids("a"), self._ids("zz")
        n = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
        if n == 0:  # a rendering without a constant head: every request is read whole
            return [], None
        with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.config.bf16):
            cache = self.model(input_ids=torch.tensor([a[:n]]), use_cache=True).cache
        return a[:n], cache

    def encode(self, requests: Sequence[str]) -> np.ndarray:
        """Float32 array (requests, hidden): the state at `depth`."""
        return self.states(requests, (self.depth,))[:, 0]

    @torch.inference_mode()
    def states(self, requests: Sequence[str], depths: Sequence[int]) -> np.ndarray:
        """Float32 array (requests, len(depths), hidden)."""
        import copy

        if any(not 0 < d <= self.depth for d in depths):
            raise ValueError(f"depths {list(depths)} outside 1..{self.depth}")
        out = np.zeros((len(requests), len(depths), self.hidden), dtype=np.float32)
        n = len(self.head_ids)
        inner = any(d < self.depth for d in depths)  # the guard reads the last layer alone: no per-layer copies
        for i, request in enumerate(requests):
            ids = self._ids(request)
            # A request long enough to lose the template's head to the token cut is read whole.
            reuse = self.head_cache is not None and ids[:n] == self.head_ids and len(ids) > n
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.config.bf16):
                res = self.model(input_ids=torch.tensor([ids[n:] if reuse else ids]), output_hidden_states=inner,
                                 cache=copy.deepcopy(self.head_cache) if reuse else None, use_cache=reuse)
            for k, d in enumerate(depths):
                h = res.last_hidden_state if d == self.depth else self.model.norm(res.hidden_states[d])
                out[i, k] = h[0, -1].float().numpy()
        return out


def block_slices(hidden: int) -> dict[str, slice]:
    """Where each block of `BLOCKS` lies in a feature row ("state": a `RequestEncoder` row, whole;
    "pmi": the columns `with_pmi` appends)."""
    end = 3 * hidden + len(SCALARS)
    return {"mean_last": slice(0, hidden), "mean_mid": slice(hidden, 2 * hidden),
            "final": slice(2 * hidden, 3 * hidden), "scalars": slice(3 * hidden, end),
            "pmi": slice(end, end + len(PMI)), "state": slice(0, hidden)}


def with_pmi(features: np.ndarray, alone: np.ndarray) -> np.ndarray:
    """`features` (rows of `Featurizer.encode`) with the "pmi" block appended, from the same answers'
    `Featurizer.alone` rows."""
    if len(features) != len(alone):
        raise ValueError(f"{len(features)} feature rows but {len(alone)} answers read alone")
    return np.hstack([features, _loglik(features) - alone]).astype(np.float32)


def _loglik(features: np.ndarray) -> np.ndarray:
    """The loglik_mean and loglik_sum columns of `Featurizer.encode` rows (the scalars come last)."""
    start = features.shape[1] - len(SCALARS) + SCALARS.index("loglik_mean")
    return features[:, start: start + 2]


def select(features: np.ndarray, hidden: int, blocks: Sequence[str], scalars: Sequence[str] = SCALARS) -> np.ndarray:
    """The columns of the named blocks (and, within "scalars", the named scalars)."""
    where = block_slices(hidden)
    parts = []
    for b in blocks:
        if b == "scalars":
            base = where["scalars"].start
            parts.append(features[:, [base + SCALARS.index(s) for s in scalars]])
        else:
            if where[b].stop > features.shape[1]:
                raise ValueError(f"these features have no {b!r} block: add it with `with_pmi`")
            parts.append(features[:, where[b]])
    return np.concatenate(parts, axis=1) if parts else np.zeros((len(features), 0), dtype=np.float32)


def model_fingerprint(model_dir: str | Path) -> str:
    """The served model's recipe identity, so a judge refuses features from another encoder."""
    import json

    info = Path(model_dir) / "model_info.json"
    if info.is_file():
        meta = json.loads(info.read_text())
        return f"{meta.get('package', '?')}=={meta.get('version', '?')}:{str(meta.get('gguf_sha256', ''))[:12]}"
    return Path(model_dir).name


def device_threads(n: int | None) -> Any:
    if n:
        torch.set_num_threads(n)
    return torch.get_num_threads()
