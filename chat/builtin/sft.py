"""Attribute-conditioned SFT (SteerLM) of the built-in model: data and a plain torch loop.

Why a hand-written loop rather than TRL's SFTTrainer: the whole build must fit in a few CPU
minutes, and a 40-line loop has no start-up cost, trains exactly the tokens we choose, and is
deterministic (fixed seeds, an explicit permutation per epoch). Loss is on assistant tokens
only (the answer and its `<|end|>`); the prompt, including the attribute line, is context.

Each training conversation is rendered with the same template the model is served with. For
robustness (see `Augmenter`) questions are reworded per epoch, and some conversations carry a
system message, a previous turn, or no attribute line at all (the model then answers in its
default style). Every choice is seeded, so the data never changes between runs.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable
from dataclasses import dataclass

import torch
from transformers import LlamaForCausalLM, PreTrainedTokenizerFast

from chat.builtin.corpus import Example
from chat.builtin.template import END, render

# Questions that name no topic: under these the model must keep to whatever answer it started,
# which is exactly what it has to do after a question it has never seen.
GENERIC_QUESTIONS = (
    "What should I do?", "Any advice?", "Can you help me with something?", "I need some advice.",
    "What do you suggest?", "Give me a tip.", "What would you recommend?", "Help me out here.",
)

SYSTEM_PROMPTS = (
    "You are a friendly advisor who gives practical advice on everyday problems.",
    "You are a helpful assistant.",
    "Give sensible, kind and practical advice.",
)

Progress = Callable[[int, int, float], None]


@dataclass(frozen=True)
class TrainConfig:
    epochs: int = 20
    batch_size: int = 8
    lr: float = 2e-3
    min_lr_ratio: float = 0.1
    warmup_steps: int = 20
    weight_decay: float = 0.01
    max_len: int = 512
    seed: int = 0
    # The first words of an answer decide which advice it gives (the rest is recall), and that
    # choice is what a small model learns last; weighting those tokens teaches it sooner.
    head_tokens: int = 6
    head_weight: float = 3.0


@dataclass(frozen=True)
class Encoded:
    input_ids: list[int]
    labels: list[int]  # -100 where no loss
    weights: list[float]  # per-token loss weight (0 where no loss)


class Augmenter:
    """Deterministic, per-epoch variations of the training conversations.

    A 2-minute model cannot learn what questions mean; it learns which words point to which
    answers. So each epoch shows every answer under a different question: its own wording, a
    rephrasing of the same question, the wording with some words dropped, another question on
    the same topic, or a question naming no topic at all. Held-out questions then tend to land
    on an answer of the right topic, and the model learns to continue an answer from its own
    first words (every answer starts with its key point) rather than from the exact question. All choices come from `random.Random` seeded with a string (stable across
    runs and Python hash seeds), so the data, like the rest of the build, never changes.
    """

    def __init__(self, examples: list[Example], seed: int) -> None:
        self.examples = examples
        self.seed = seed
        self.phrasings: dict[str, list[str]] = {}
        self.topic_questions: dict[str, list[str]] = {}
        for ex in examples:
            if ex.question not in self.phrasings.setdefault(ex.group, []):
                self.phrasings[ex.group].append(ex.question)
            if ex.question not in self.topic_questions.setdefault(ex.topic, []):
                self.topic_questions[ex.topic].append(ex.question)

    def question(self, ex: Example, rng: random.Random) -> str:
        r = rng.random()
        if r < 0.40:
            return ex.question
        if r < 0.68:
            return rng.choice(self.phrasings[ex.group])
        if r < 0.84:
            words = ex.question.split()
            kept = [w for w in words if rng.random() > 0.3]
            return " ".join(kept if len(kept) >= 3 else words)
        if r < 0.92:
            return rng.choice(self.topic_questions[ex.topic])
        return rng.choice(GENERIC_QUESTIONS)

    def epoch(self, epoch: int) -> list[list[dict]]:
        out = []
        n = len(self.examples)
        for i, ex in enumerate(self.examples):
            rng = random.Random(f"{self.seed}/{epoch}/{i}")
            msgs: list[dict] = []
            if rng.random() < 0.2:
                msgs.append({"role": "system", "content": rng.choice(SYSTEM_PROMPTS)})
            if rng.random() < 0.2:
                prev = self.examples[rng.randrange(n)]
                msgs += [{"role": "user", "content": self.question(prev, rng)},
                         {"role": "assistant", "content": prev.answer, "attributes": prev.steerlm()}]
            attrs = None if rng.random() < 0.1 else ex.steerlm()
            msgs += [{"role": "user", "content": self.question(ex, rng)},
                     {"role": "assistant", "content": ex.answer, "attributes": attrs}]
            out.append(msgs)
        return out


def encode(msgs: list[dict], tok: PreTrainedTokenizerFast, max_len: int, head: tuple[int, float] = (0, 1.0)) -> Encoded:
    """Token ids and labels; every assistant answer (with its `<|end|>`) is trained on.

    Each piece of the template is tokenised on its own: the template puts a special token or
    a newline (its own pre-token) at every boundary, so this equals tokenising the rendered
    text (a test checks it), and it is what the model sees when serving: the rendered prompt,
    then the answer it generates.
    """
    ids: list[int] = []
    labels: list[int] = []
    weights: list[float] = []
    head_tokens, head_weight = head

    def add(text: str, trained: bool) -> None:
        piece = tok(text, add_special_tokens=False)["input_ids"]
        ids.extend(piece)
        labels.extend(piece if trained else [-100] * len(piece))
        if trained:
            weights.extend(head_weight if j < head_tokens else 1.0 for j in range(len(piece)))
        else:
            weights.extend([0.0] * len(piece))

    for m in msgs:
        if m["role"] == "assistant":
            add(render([], add_generation_prompt=True, attributes=m.get("attributes")), False)
            add(m["content"] + END, True)
            add("\n", False)
        else:
            add(render([m]), False)
    return Encoded(ids[:max_len], labels[:max_len], weights[:max_len])


def _batches(data: list[Encoded], cfg: TrainConfig, epoch: int, pad_id: int) -> list[tuple[torch.Tensor, ...]]:
    """One epoch of padded batches: a seeded shuffle, then length-sorted within groups of 8
    batches so padding stays small without making the order length-biased."""
    g = torch.Generator().manual_seed(cfg.seed * 1000 + epoch)
    order = torch.randperm(len(data), generator=g).tolist()
    group = cfg.batch_size * 8
    batches = []
    for start in range(0, len(order), group):
        chunk = sorted(order[start:start + group], key=lambda j: len(data[j].input_ids))
        for b in range(0, len(chunk), cfg.batch_size):
            items = [data[j] for j in chunk[b:b + cfg.batch_size]]
            width = max(len(e.input_ids) for e in items)
            ids = torch.full((len(items), width), pad_id)
            lab = torch.full((len(items), width), -100)
            wts = torch.zeros((len(items), width))
            att = torch.zeros((len(items), width), dtype=torch.long)
            for r, e in enumerate(items):
                ids[r, :len(e.input_ids)] = torch.tensor(e.input_ids)
                lab[r, :len(e.labels)] = torch.tensor(e.labels)
                wts[r, :len(e.weights)] = torch.tensor(e.weights)
                att[r, :len(e.input_ids)] = 1
            batches.append((ids, att, lab, wts))
    # Shuffle the batch order too, so one epoch does not run short-to-long within each group.
    perm = torch.randperm(len(batches), generator=g).tolist()
    return [batches[p] for p in perm]


def _weighted_loss(logits: torch.Tensor, labels: torch.Tensor, weights: torch.Tensor) -> tuple[torch.Tensor, float]:
    """Next-token cross-entropy weighted per token; also the plain (unweighted) mean, to report."""
    logits, labels, weights = logits[:, :-1], labels[:, 1:], weights[:, 1:]
    ce = torch.nn.functional.cross_entropy(logits.reshape(-1, logits.size(-1)), labels.reshape(-1),
                                           ignore_index=-100, reduction="none").view_as(weights)
    trained = labels != -100
    plain = (ce[trained].mean()).item()
    return (ce * weights).sum() / weights.sum(), plain


def steps_for(n_examples: int, cfg: TrainConfig) -> int:
    return cfg.epochs * math.ceil(n_examples / cfg.batch_size)


def train(model: LlamaForCausalLM, epoch_data: Callable[[int], list[Encoded]], n_examples: int,
          cfg: TrainConfig, pad_id: int, progress: Progress | None = None) -> dict:
    """Train in place on `epoch_data(e)` for each epoch e; return loss, steps, seconds, tokens."""
    torch.manual_seed(cfg.seed)
    total = steps_for(n_examples, cfg)
    decay = [p for n, p in model.named_parameters() if p.dim() >= 2]
    no_decay = [p for n, p in model.named_parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": cfg.weight_decay},
                             {"params": no_decay, "weight_decay": 0.0}], lr=cfg.lr, betas=(0.9, 0.95))

    def lr_at(step: int) -> float:  # linear warm-up, cosine down to min_lr_ratio
        if step < cfg.warmup_steps:
            return cfg.lr * (step + 1) / cfg.warmup_steps
        t = (step - cfg.warmup_steps) / max(1, total - cfg.warmup_steps)
        return cfg.lr * (cfg.min_lr_ratio + (1 - cfg.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * t)))

    model.train()
    step, ema, tokens, t0 = 0, None, 0, time.monotonic()
    for epoch in range(cfg.epochs):
        for ids, att, lab, wts in _batches(epoch_data(epoch), cfg, epoch, pad_id):
            for group in opt.param_groups:
                group["lr"] = lr_at(step)
            loss, plain = _weighted_loss(model(input_ids=ids, attention_mask=att).logits, lab, wts)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            opt.zero_grad(set_to_none=True)
            step += 1
            tokens += int(att.sum())
            ema = plain if ema is None else 0.9 * ema + 0.1 * plain
            if progress is not None:
                progress(step, total, ema)
    model.eval()
    return {"final_loss": round(float(ema), 4), "steps": step, "seconds": round(time.monotonic() - t0, 1), "tokens": tokens}
