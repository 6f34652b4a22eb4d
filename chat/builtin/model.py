"""Model shapes for the built-in Llama and the tiny random one used by unit tests.

Attention head size is pinned to 64 because vLLM's CPU attention rejects smaller heads and
vLLM must be able to serve this model. Embeddings are tied (the vocabulary is a large share
of so small a model). Weights are saved float32, with a generation_config whose EOS is
`<|end|>`, so `generate` stops at the end of the assistant turn without extra arguments.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from transformers import GenerationConfig, LlamaConfig, LlamaForCausalLM, PreTrainedTokenizerFast

from chat.builtin.template import END, PAD

HEAD_DIM = 64


@dataclass(frozen=True)
class ModelShape:
    hidden_size: int = 128
    num_layers: int = 4
    num_heads: int = 2
    intermediate_size: int = 384
    max_position_embeddings: int = 1024

    def __post_init__(self) -> None:
        if self.hidden_size != self.num_heads * HEAD_DIM:
            raise ValueError(
                f"hidden_size {self.hidden_size} must equal num_heads*{HEAD_DIM} "
                f"(vLLM's CPU attention needs head size 64); got {self.num_heads} heads"
            )


TINY_SHAPE = ModelShape(hidden_size=128, num_layers=2, num_heads=2, intermediate_size=256, max_position_embeddings=1024)


def llama_config(shape: ModelShape, tok: PreTrainedTokenizerFast) -> LlamaConfig:
    end_id, pad_id = tok.convert_tokens_to_ids(END), tok.convert_tokens_to_ids(PAD)
    return LlamaConfig(
        vocab_size=len(tok),
        hidden_size=shape.hidden_size,
        intermediate_size=shape.intermediate_size,
        num_hidden_layers=shape.num_layers,
        num_attention_heads=shape.num_heads,
        num_key_value_heads=shape.num_heads,
        head_dim=HEAD_DIM,
        max_position_embeddings=shape.max_position_embeddings,
        rms_norm_eps=1e-5,
        tie_word_embeddings=True,
        bos_token_id=None,
        eos_token_id=end_id,
        pad_token_id=pad_id,
        dtype="float32",
    )


def new_model(shape: ModelShape, tok: PreTrainedTokenizerFast, seed: int) -> LlamaForCausalLM:
    """A freshly initialised Llama; the seed makes its weights reproducible."""
    torch.manual_seed(seed)
    model = LlamaForCausalLM(llama_config(shape, tok))
    model.generation_config = GenerationConfig(
        eos_token_id=model.config.eos_token_id,
        pad_token_id=model.config.pad_token_id,
        max_new_tokens=256,
    )
    return model.to(torch.float32)
