"""The evaluation suite's trained parts, cached under `<data_dir>/models/`, in one place.

The moderator judges harmlessness in the gate and filters training sets (`deploy.loop.safety`);
the Plackett–Luce reward model scores helpfulness in the gate and in `advisor eval`. Each is
trained on first use from the shipped data and cached, so every caller must agree on where:
these functions are that agreement.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any


def moderator_dir(data_dir: str | Path) -> Path:
    return Path(data_dir) / "models" / "moderator"


def reward_model_dir(data_dir: str | Path) -> Path:
    return Path(data_dir) / "models" / "pl-reward"


def load_moderator(cache_dir: str | Path, examples: list | None = None) -> Any:
    """The offline moderator cached in `cache_dir`, trained there on first use (on the shipped
    safe/unsafe advice set unless `examples` are given)."""
    from evaluator.moderation import load_safety_examples, train_moderator

    return train_moderator(examples if examples is not None else load_safety_examples(), cache_dir=Path(cache_dir))


def load_reward_model(data_dir: str | Path, train_threads: list) -> Any:
    """The cached Plackett–Luce reward model, trained on `train_threads` (and cached) on first use."""
    from evaluator.helpfulness import EmbeddingRewardModel, PLConfig, train_embedding_reward_model

    path = reward_model_dir(data_dir)
    if (path / EmbeddingRewardModel.META).is_file():
        return EmbeddingRewardModel.load(path)
    model, _ = train_embedding_reward_model(train_threads, config=PLConfig(epochs=60, seed=0))
    model.save(path)
    return model
