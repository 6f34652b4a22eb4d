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


def moderator_on(data_dir: str | Path, data: str | Path | None = None) -> tuple[Any, list]:
    """(the moderator cached under `data_dir`, the labelled examples it was trained on): those of
    the JSON lines file `data` {text, label: safe|unsafe}, else the shipped set."""
    from evaluator.moderation import load_safety_examples

    examples = load_safety_examples(data) if data else load_safety_examples()
    return load_moderator(moderator_dir(data_dir), examples), examples


def load_reward_model(data_dir: str | Path, train_threads: list) -> Any:
    """The cached fallback Plackett–Luce reward model, trained on `train_threads` (and cached) on first use."""
    from evaluator.helpfulness import EmbeddingRewardModel, PLConfig, train_embedding_reward_model

    path = reward_model_dir(data_dir)
    if (path / EmbeddingRewardModel.META).is_file():
        return EmbeddingRewardModel.load(path)
    model, _ = train_embedding_reward_model(train_threads, config=PLConfig(epochs=60, seed=0))
    model.save(path)
    return model


def held_out_threads(data: str | Path | None = None, test_size: float = 0.2, seed: int = 0) -> tuple[list, list]:
    """(train threads, held-out threads) of the ranked-advice set: the shipped one unless `data`
    names JSON lines {question, answers: [{text, votes}]}. The defaults are the split the saved
    fallback reward model is trained on (`advisor eval helpfulness train`), so it fits."""
    from evaluator.helpfulness import load_threads, split_threads

    return split_threads(load_threads(data) if data else load_threads(), test_size, seed)


def train_reward_model(train: list, held_out: list, out: str | Path, *, epochs: int = 60,
                       list_size: int | None = None, seed: int = 0) -> tuple[Any, dict]:
    """Train the Plackett–Luce reward model on `train` and save it in `out`: (its ranking report
    on `held_out`, that report's figures with the training's)."""
    from evaluator.helpfulness import PLConfig, ranking_report, train_embedding_reward_model

    model, history = train_embedding_reward_model(train, config=PLConfig(epochs=epochs, list_size=list_size, seed=seed))
    report = ranking_report(model, held_out)
    model.save(Path(out))
    return report, {**report.as_dict(), "train_threads": len(train), "final_loss": history.losses[-1],
                    "saved": str(out)}


def saved_reward_model(path: str | Path) -> Any:
    """The reward model saved in `path` by `train_reward_model`."""
    from evaluator.helpfulness import EmbeddingRewardModel

    if not (Path(path) / EmbeddingRewardModel.META).is_file():
        raise FileNotFoundError(f"no reward model at {path}; run `advisor eval helpfulness train` first")
    return EmbeddingRewardModel.load(Path(path))


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
