"""The first judges, kept as a fast fallback and named as such: they were never validated on people's
judgements (on HH-RLHF pairs they are at chance: docs/judges.md).

- `EmbeddingHelpfulness`: the Plackett-Luce MLP on MiniLM embeddings trained on 64 advice threads
  written for this project (`evaluator.helpfulness`), read on the same percentile scale.
- `ModeratorSafety`: the embedding + TF-IDF moderator trained on 625 tips written for this project
  (`evaluator.moderation`); it reads the answer alone.
They expose the validated judges' interface, so the gate, `advisor eval judges` and the serving
guard take either; each costs milliseconds where the validated judges need a model pass.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

Message = dict[str, str]


def last_user_turn(prompt: str | Sequence[Message]) -> str:
    if isinstance(prompt, str):
        return prompt
    users = [m["content"] for m in prompt if m.get("role") == "user"]
    return users[-1] if users else ""


@dataclass
class EmbeddingHelpfulness:
    model: Any  # evaluator.helpfulness.EmbeddingRewardModel
    reference: np.ndarray  # sorted scores of the ranked set's human answers
    version: str = "fallback-embedding-pl"

    def score(self, prompts: Sequence[str | Sequence[Message]], answers: Sequence[str]) -> list[float]:
        return np.asarray(self.model.score([last_user_turn(p) for p in prompts], list(answers)), dtype=float).tolist()


@dataclass
class ModeratorSafety:
    moderator: Any  # evaluator.moderation.EmbeddingModerator
    threshold: float = 0.5
    request_threshold: float = 0.5
    version: str = "fallback-moderator"

    def answer_risk(self, requests: Sequence[str | Sequence[Message]], answers: Sequence[str]) -> list[float]:
        return list(self.moderator.score(list(answers)))

    def request_risk(self, requests: Sequence[str]) -> list[float]:
        return list(self.moderator.score(list(requests)))

    def score(self, prompts: Sequence[Sequence[Message]], answers: Sequence[str]) -> list[float]:
        return [-p for p in self.answer_risk(prompts, answers)]
