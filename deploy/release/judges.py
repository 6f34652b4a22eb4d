"""The judges the gate, the training-set filter and the serving guard use, loaded from the settings.

`load_judges(settings)` returns (helpfulness judge, harmlessness judge) of the kind
`judges.kind` names (`deploy.settings.JudgeSettings`): the validated heads shipped in
`evaluator/judges/weights` on the served base model's features, the first embedding judges as a
fast fallback, or an LLM behind an OpenAI-compatible endpoint. Every caller agrees on where the
fallback judges are cached (`<data_dir>/models/`): these functions are that agreement. One
process loads the trained judges once (`load_judges` is cached per model directory).
"""

from __future__ import annotations

import functools
from pathlib import Path
from typing import Any


def moderator_dir(data_dir: str | Path) -> Path:
    return Path(data_dir) / "models" / "moderator"


def reward_model_dir(data_dir: str | Path) -> Path:
    return Path(data_dir) / "models" / "pl-reward"


def load_moderator(cache_dir: str | Path, examples: list | None = None) -> Any:
    """The fallback moderator cached in `cache_dir`, trained there on first use (on the shipped
    safe/unsafe advice set unless `examples` are given)."""
    from evaluator.moderation import load_safety_examples, train_moderator

    return train_moderator(examples if examples is not None else load_safety_examples(), cache_dir=Path(cache_dir))


def load_reward_model(data_dir: str | Path, train_threads: list) -> Any:
    """The cached fallback Plackett–Luce reward model, trained on `train_threads` (and cached) on first use."""
    from evaluator.helpfulness import EmbeddingRewardModel, PLConfig, train_embedding_reward_model

    path = reward_model_dir(data_dir)
    if (path / EmbeddingRewardModel.META).is_file():
        return EmbeddingRewardModel.load(path)
    model, _ = train_embedding_reward_model(train_threads, config=PLConfig(epochs=60, seed=0))
    model.save(path)
    return model


def held_out_threads() -> tuple[list, list]:
    """(train threads, held-out threads) of the shipped ranked-advice set, with the split
    `advisor eval helpfulness train` uses by default, so the saved fallback reward model fits."""
    from evaluator.helpfulness import load_threads, split_threads

    return split_threads(load_threads(), 0.2, 0)


def judge_model_dir(settings: Any) -> Path:
    """The model the trained judges read: `judges.model_dir`, or the pretrained SmolLM2 of the data dir."""
    from chat.pretrained import pretrained_model_path

    given = settings.judges.model_dir
    path = Path(given).expanduser() if given else pretrained_model_path(settings.data_path)
    if not (path / "config.json").is_file():
        raise FileNotFoundError(
            f"the trained judges read SmolLM2-135M-Instruct's features, and there is no model at {path}: "
            "run `advisor model build --model pretrained`, set judges.model_dir, or set judges.kind = \"fallback\"")
    return path


@functools.lru_cache(maxsize=2)
def _trained(model_dir: Path) -> Any:
    from evaluator.judges.judge import load_judges as load

    return load(model_dir)


def _fallback(data_dir: Path) -> tuple[Any, Any]:
    import numpy as np

    from evaluator.judges.fallback import EmbeddingHelpfulness, ModeratorSafety

    train, held_out = held_out_threads()
    reward = load_reward_model(data_dir, train)
    threads = train + held_out
    reference = np.sort(reward.score([t.question for t in threads for _ in t.answers],
                                     [a for t in threads for a in t.texts]))
    return EmbeddingHelpfulness(reward, reference), ModeratorSafety(load_moderator(moderator_dir(data_dir)))


def harmlessness_thresholds(settings: Any) -> tuple[float, float]:
    """(request, answer) thresholds of the harmlessness judge `judges.kind` names, without loading
    it: the trained judge's ship in its weights' recipe; the others use 0.5."""
    if settings.judges.kind != "trained":
        return 0.5, 0.5
    from evaluator.judges.judge import shipped_thresholds

    return shipped_thresholds()


def judge_threshold() -> float:
    """The shipped harmlessness judge's own unsafe cut (the gate's model-alone axis and the
    training-set filter use it; the guard uses `harmlessness_thresholds`)."""
    from evaluator.judges.judge import shipped_threshold

    return shipped_threshold("harmless")


def load_judges(settings: Any) -> tuple[Any, Any]:
    """(helpfulness judge, harmlessness judge) as `settings.judges` says."""
    js = settings.judges
    if js.kind == "trained":
        judges = _trained(judge_model_dir(settings))
        return judges.helpfulness, judges.harmlessness
    if js.kind == "fallback":
        return _fallback(settings.data_path)
    from evaluator.judges.llm import LLMJudge

    if not (js.llm_url and js.llm_model):
        raise ValueError("judges.kind = \"llm\" needs judges.llm_url and judges.llm_model (an OpenAI-compatible server)")
    return LLMJudge(js.llm_url, js.llm_model, "helpful"), LLMJudge(js.llm_url, js.llm_model, "harmless")


def guard_over(settings: Any, judge: Any) -> Any:
    """The serving guard (`chat.guard.Guard`) `guard.*` describes, over `judge`; None when it is
    switched off. A threshold left unset takes the judge's own (chosen on its dev data, shipped with it)."""
    from chat.guard import Guard

    g = settings.guard
    if not g.enabled:
        return None
    request_cut, answer_cut = harmlessness_thresholds(settings)
    return Guard(judge, request_threshold=request_cut if g.request_threshold is None else g.request_threshold,
                 answer_threshold=answer_cut if g.answer_threshold is None else g.answer_threshold,
                 refusal=g.refusal.strip(), crisis=g.crisis_reply.strip())
