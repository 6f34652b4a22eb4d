"""A tiny random-weight model with the real tokenizer recipe and chat template, in seconds.

For unit tests of backends, trainer, evaluator and vLLM serving, which need a real HF model
directory of the built-in family but not its skills. Same tokenizer recipe (smaller vocab),
same template, same Llama family with head size 64, random weights from `seed`.
"""

from __future__ import annotations

from pathlib import Path

from chat.builtin.corpus import tokenizer_texts
from chat.builtin.model import TINY_SHAPE, new_model
from chat.builtin.tokenizer import train_tokenizer

TINY_VOCAB = 1024


def make_tiny_random_model(out_dir: Path, seed: int = 0) -> Path:
    """Write tokenizer + random tiny LlamaForCausalLM to `out_dir` (created); return it."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    tok = train_tokenizer(tokenizer_texts(), TINY_VOCAB)
    model = new_model(TINY_SHAPE, tok, seed)
    model.save_pretrained(out_dir)
    tok.save_pretrained(out_dir)
    return out_dir
