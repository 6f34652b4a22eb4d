"""The models an evaluation scores, found and loaded one way for the gate and `advisor eval`.

    path = builtin_model(settings, say)                       # built on first use
    found = live_release_model(settings, say)                 # (base model, adapter) or None
    model, tokenizer = load_causal_lm(path, {"default": adapter})
    model, tokenizer = load_merged(path, adapter, "bfloat16")  # the adapter folded in, then cast
    scorer = hh_scorer("implicit", path, adapter, beta=0.1, batch=BatchConfig())

Design choices:
- Local Hugging Face directories only: a model or adapter that is not on this machine is an
  error that names the path, never a download from a hub.
- Adapters go on through PEFT under the names given, the first one active. To generate, the gate
  folds one adapter into a copy of the weights instead (`load_merged`): the same model, one matrix
  per layer, where PEFT adds a low-rank product at every targeted layer of every decoding step.
- The live release is read from the configured store (DuckDB file or PostgreSQL). When there is
  none, its files are gone, or a running service holds the DuckDB file, the caller is told why
  (`say`) and falls back to another model rather than failing.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

from deploy.release.registry import ReleaseError
from deploy.settings import Settings

Say = Callable[[str], None]
SCORERS = ("loglik", "implicit", "reward")


def use_threads(threads: int | None) -> None:
    """Set torch's CPU threads for this process; None leaves torch's default."""
    if threads:
        import torch

        torch.set_num_threads(threads)


def builtin_model(settings: Settings, say: Say) -> Path:
    """The built-in model of the data directory, built there first if it is not yet."""
    from chat.builtin.build import build_builtin_model, builtin_model_path, is_built

    if not is_built(builtin_model_path(settings.data_path)):
        say("Building the built-in model first (cached in the data directory; minutes on a CPU)…")
    return build_builtin_model(settings.data_path)


def live_release_model(settings: Settings, say: Say) -> tuple[Path, Path | None] | None:
    """(base model, adapter) of the live release, or None when there is none to use (no live
    release, its files are gone, or a running service holds the database)."""
    from store import Store, StoreError

    target = settings.store_target
    if isinstance(target, Path) and not target.exists():
        return None
    try:
        with Store(target, **settings.store_options) as store:
            live = store.releases.live()
    except StoreError as exc:
        say(f"Cannot read the live release ({exc}); using the built-in model. Pass --model/--adapter to choose.")
        return None
    if live is None or not Path(live.base_model).exists():
        return None
    if live.adapter_path and not (Path(live.adapter_path) / "adapter_config.json").is_file():
        say(f"The live release {live.id}'s adapter {live.adapter_path} is missing; using the built-in model.")
        return None
    say(f"Scoring the live release {live.id}.")
    return Path(live.base_model), Path(live.adapter_path) if live.adapter_path else None


def load_causal_lm(model_path: str | Path, adapters: Mapping[str, str | Path | None] | None = None) -> tuple[Any, Any]:
    """(model in eval mode, tokenizer) from a local directory, with each named PEFT adapter on top
    (the first one active); adapters given as None are skipped."""
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapters = {name: Path(path) for name, path in (adapters or {}).items() if path is not None}
    if not Path(model_path).exists():
        raise ReleaseError(f"no model at {model_path}; pass --model with a Hugging Face model directory")
    for path in adapters.values():
        if not (path / "adapter_config.json").is_file():
            raise ReleaseError(f"{path} is not a PEFT adapter directory (no adapter_config.json)")
    tokenizer = AutoTokenizer.from_pretrained(str(model_path))
    model = AutoModelForCausalLM.from_pretrained(str(model_path))
    for i, (name, path) in enumerate(adapters.items()):
        if i == 0:
            from peft import PeftModel

            model = PeftModel.from_pretrained(model, str(path), adapter_name=name, is_trainable=False)
        else:
            model.load_adapter(str(path), adapter_name=name, is_trainable=False)
    return model.eval(), tokenizer


def load_merged(model_path: str | Path, adapter: str | Path | None, dtype: str = "float32") -> tuple[Any, Any]:
    """(plain model in eval mode, tokenizer): the base model with `adapter` merged into its
    weights, or the bare base for None, its weights then cast to `dtype` ("float32", "bfloat16").
    It answers as the adapter on the base does, up to float rounding, in 0.75x the time on a
    2-core CPU (`bench/generation_batch.py`); in bfloat16, 0.64x that where the CPU has it natively."""
    import torch

    model, tokenizer = load_causal_lm(model_path, {"merged": adapter})
    if adapter is not None:
        model = model.merge_and_unload()  # merged in float32, rounded once after
    return model.to(getattr(torch, dtype)).eval(), tokenizer


def hh_scorer(kind: str, model_path: Path, adapter: Path | None, *, beta: float, batch: Any) -> Any:
    """The HH-RLHF scorer `kind` names (one of SCORERS) on the model at `model_path`: a reward
    model (sequence classifier), or a causal LM scored by log-likelihood or, with `adapter`, by
    the implicit reward of the adapter against its own base."""
    from evaluator.scoring import ImplicitRewardScorer, LogLikelihoodScorer, RewardModelScorer

    if kind == "reward":
        from transformers import AutoModelForSequenceClassification, AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(str(model_path))
        return RewardModelScorer(AutoModelForSequenceClassification.from_pretrained(str(model_path)), tokenizer, batch)
    lm, tokenizer = load_causal_lm(model_path, {"default": adapter})
    if kind == "implicit":
        return ImplicitRewardScorer(lm, tokenizer, beta=beta, batch=batch)
    return LogLikelihoodScorer(lm, tokenizer, batch)
