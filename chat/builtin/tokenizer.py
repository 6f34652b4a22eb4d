"""Deterministic byte-level BPE tokenizer for the built-in model.

Byte-level (GPT-2 style) so any input, emoji and control characters included, round-trips
without an unknown token. Trained with `tokenizers` on a fixed, ordered list of texts; the
BPE trainer breaks count ties by pair order, so the same texts give the same vocab and
merges every time (a test checks this). No normaliser: what the user typed is what the
model sees. The special tokens come first so their ids are stable across vocab sizes.
"""

from __future__ import annotations

from collections.abc import Iterable

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
from transformers import PreTrainedTokenizerFast

from chat.builtin.template import CHAT_TEMPLATE, END, PAD, SPECIAL_TOKENS


def train_tokenizer(texts: Iterable[str], vocab_size: int, *, model_max_length: int = 1024) -> PreTrainedTokenizerFast:
    """Train a byte-level BPE on `texts` and wrap it with the special tokens and chat template."""
    bpe = Tokenizer(models.BPE())
    bpe.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    bpe.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=list(SPECIAL_TOKENS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    bpe.train_from_iterator(list(texts), trainer=trainer)
    tok = PreTrainedTokenizerFast(
        tokenizer_object=bpe,
        eos_token=END,
        pad_token=PAD,
        extra_special_tokens=[t for t in SPECIAL_TOKENS if t not in (END, PAD)],
        model_max_length=model_max_length,
        clean_up_tokenization_spaces=False,
    )
    tok.chat_template = CHAT_TEMPLATE
    return tok
