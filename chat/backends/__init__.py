"""Generation backends: one interface (`Backend`), three implementations.

- `TransformersBackend`: a local HF model directory (or cached id) on CPU/CUDA, optional PEFT
  LoRA adapter swappable while running. The built-in model is this backend on the project's
  own model directory (`kind="builtin"`).
- `OpenAICompatibleBackend`: any OpenAI-compatible server, vLLM in production.

The transformers backend lives in `chat.backends.transformers_backend`, imported only where it is
used, so `openai`-only deployments need not load torch.
"""

from chat.backends.base import (
    FINISH_REASONS,
    NO_ADAPTER,
    Backend,
    BackendError,
    BackendUnavailable,
    Generation,
    SamplingParams,
)
from chat.backends.openai_backend import OpenAICompatibleBackend

__all__ = [
    "FINISH_REASONS", "Backend", "BackendError", "BackendUnavailable", "Generation", "SamplingParams",
    "OpenAICompatibleBackend", "NO_ADAPTER",
]
