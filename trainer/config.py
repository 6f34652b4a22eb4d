"""Run configurations: one dataclass per method over a shared base, and the CPU scaling rule.

Defaults are AdvisorQA's (Kim et al. 2024) Table 9: 2 epochs, learning rate 5e-6, batch 32,
512 tokens, LoRA r 64 / α 16 / dropout 0.1, β 0.1, sigmoid loss for DPO. Those numbers are for
7B models on GPUs. `effective_config` turns the requested config into the one that runs on the
device at hand and records what it changed, so `metadata.json` always shows what really ran.

CPU rule (applied only when `cpu_scaling` is on, the default), and why:
- batch ≤ 8 (gradient accumulation 1): 32 sequences a step on two cores means a handful of
  updates in a few minutes; 8 gives enough updates to learn something while a person waits.
  KTO needs ≥ 2 per device (its KL estimate pairs each prompt with another example's answer).
- max length ≤ 384 tokens: the built-in model's answers fit (its longest corpus answer is ~200
  tokens with the question); attention cost is quadratic, and padding to the batch maximum
  makes a rare long example expensive for the whole batch.
- at most `cpu_max_steps` (300) optimizer steps: a CPU run ends in minutes, whatever the data.
- learning rate ≥ `cpu_min_learning_rate` (2e-4): 5e-6 is tuned for adapting a 7B model over
  thousands of steps; a tiny model with a LoRA of scale α/r = 0.25, run for a few hundred steps,
  does not move at 5e-6. Measured on the built-in model (KTO, 307 rows from the corpus, short
  answers desirable and long ones undesirable, 120 steps of batch 8, greedy answers to 24
  held-out questions): at 5e-6 the mean answer stayed at 21 words (reward margin 0.01); at 2e-4
  it fell to 10 words, the longest from 81 to 21 (margin 4.4); 5e-4 did the same. 120 steps
  took about a minute on 16 cores.
- no gradient checkpointing: it trades compute for memory, and on a CPU memory is not short.
Speed on a CPU (fields below; measured on SmolLM2-135M, docs/results.md "Training speed on
SmolLM2"): KTO and DPO score the set under the reference model once before training instead of
in every step; torch uses one thread per CPU; the run lowers its own priority (and its
session's) so the service keeps answering; bf16 autocast is an option, off by default.
On CUDA, QLoRA: the base model is loaded in 4-bit NF4 (bitsandbytes, double quantisation, bf16
compute) and prepared with `prepare_model_for_kbit_training`; the Table 9 values stand.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, ClassVar

from store.attributes import SteeringMode

METHODS = ("sft", "kto", "dpo")

CPU_MAX_BATCH = 8
CPU_MAX_LENGTH = 384


class ConfigError(ValueError):
    """A run configuration value is missing or out of range; the message names it."""


@dataclass
class RunConfig:
    method: ClassVar[str] = ""

    base_model: str = ""  # a local Hugging Face model directory (or id, where downloads are allowed)
    start_adapter: str | None = None  # PEFT adapter to continue from (the live release's); None: base model
    epochs: float = 2.0
    learning_rate: float = 5e-6
    batch_size: int = 32  # effective batch: per-device batch × gradient accumulation
    per_device_batch_size: int | None = None  # None: the whole batch on one device
    max_length: int = 512
    lora_r: int = 64
    lora_alpha: int = 16
    lora_dropout: float = 0.1
    lora_target_modules: str | list[str] = "all-linear"
    max_steps: int = -1  # > 0 overrides epochs
    warmup_ratio: float = 0.1
    lr_scheduler: str = "linear"
    save_steps: int = 50
    logging_steps: int = 1
    seed: int = 42
    device: str = "auto"  # auto | cpu | cuda
    quantize: str = "auto"  # auto (4-bit on CUDA, none on CPU) | 4bit | none
    cpu_scaling: bool = True
    cpu_max_steps: int = 300
    cpu_min_learning_rate: float = 2e-4
    # Sharing the machine: the service must answer while a run trains on the same cores.
    # `nice` is the training process's niceness, set before torch starts its threads, and written
    # to its scheduler autogroup too (the run has its own session, so the kernel's per-session
    # autogroups would otherwise give it as much CPU as the whole service; plain nice only ranks
    # it against its own threads). 0 leaves the priority alone.
    nice: int = 19
    # Intra-op threads of the training process; 0: one per CPU the process may run on.
    torch_threads: int = 0
    # On a CPU, run the matrix products in bfloat16 under autocast (weights and optimizer stay
    # float32). Off: on this project's 2-core EPYC (AVX512-BF16) a KTO forward + backward was not
    # faster in bf16 (52 against 35-49 CPU s at batch 4, under load), and a sequence's
    # log-probability moved by up to 0.5 nats. Try it on CPUs with AMX.
    cpu_bf16: bool = False
    # How the base model was shown the attributes when it answered, so a training prompt reads as
    # that prompt did: "steerlm" (the SteerLM string as the chat template's `attributes` kwarg;
    # models trained with it) or "instruct" (plain instructions after the last user message, for a
    # general chat model whose template ignores the kwarg; store.attributes.with_instructions).
    steering: SteeringMode = SteeringMode.STEERLM

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        positive = ("epochs", "learning_rate", "batch_size", "max_length", "lora_r", "lora_alpha",
                    "save_steps", "logging_steps", "cpu_max_steps")
        for name in positive:
            if not getattr(self, name) > 0:
                raise ConfigError(f"{self.method} config: {name} must be > 0, got {getattr(self, name)!r}")
        if not 0.0 <= self.lora_dropout < 1.0:
            raise ConfigError(f"{self.method} config: lora_dropout must be in [0, 1), got {self.lora_dropout}")
        if self.device not in ("auto", "cpu", "cuda"):
            raise ConfigError(f"{self.method} config: device must be auto, cpu or cuda, got {self.device!r}")
        try:
            self.steering = SteeringMode(self.steering)  # a run.json read back holds the plain name
        except ValueError:
            raise ConfigError(f"{self.method} config: steering must be steerlm or instruct, got {self.steering!r}") from None
        if not 0 <= self.nice <= 19:
            raise ConfigError(f"{self.method} config: nice must be in 0..19 (19 yields most), got {self.nice}")
        if self.torch_threads < 0:
            raise ConfigError(f"{self.method} config: torch_threads must be ≥ 0 (0: all CPUs), got {self.torch_threads}")
        if self.quantize not in ("auto", "4bit", "none"):
            raise ConfigError(f"{self.method} config: quantize must be auto, 4bit or none, got {self.quantize!r}")

    def to_dict(self) -> dict[str, Any]:
        return {"method": self.method, **asdict(self)}

    def per_device(self) -> tuple[int, int]:
        """(per-device batch, gradient accumulation steps) that make up `batch_size`."""
        per_device = min(self.per_device_batch_size or self.batch_size, self.batch_size)
        return per_device, math.ceil(self.batch_size / per_device)


@dataclass
class SFTRunConfig(RunConfig):
    """Attribute-conditioned SFT: loss on the answer only (the attribute line is in the prompt)."""

    method: ClassVar[str] = "sft"


@dataclass
class PreferenceRunConfig(RunConfig):
    """What KTO and DPO share: β and the reference model's log-probabilities."""

    beta: float = 0.1
    # Score every training row under the reference model once, before the first step (TRL's
    # `precompute_ref_log_probs`), instead of the reference forwards inside every step. Same loss;
    # the reference cost is paid once for the set instead of once per epoch, and a step holds only
    # the policy's work. It costs more than it saves when a run stops (`max_steps`) well before one
    # pass over a large set, and a resume pays it again.
    precompute_ref_log_probs: bool = True


@dataclass
class KTORunConfig(PreferenceRunConfig):
    method: ClassVar[str] = "kto"
    # None: from the training split's class balance (feedback.datasets.kto_class_weights).
    desirable_weight: float | None = None
    undesirable_weight: float | None = None


@dataclass
class DPORunConfig(PreferenceRunConfig):
    method: ClassVar[str] = "dpo"
    loss_type: str = "sigmoid"
    # Weight of a negative log-likelihood term on the chosen answers (per token) beside the DPO
    # loss, as RPO adds it: it keeps the chosen answers likely where plain DPO may push both down.
    # 0 = plain DPO.
    sft_weight: float = 0.0

    def __post_init__(self) -> None:
        super().__post_init__()
        if not self.sft_weight >= 0:
            raise ConfigError(f"dpo config: sft_weight must be ≥ 0 (0: plain DPO), got {self.sft_weight!r}")


@dataclass(frozen=True)
class TrainingKnobs:
    """The training options an operator may set for one run — the one declaration behind the CLI's
    flags (`advisor train`, `advisor cycle`), the job API's `overrides` and the operator screen's
    inputs. None keeps the method's default (and, on a CPU, the scaling rule above)."""

    max_steps: int | None = field(default=None, metadata={
        "help": "Stop after N optimizer steps (default: the method's epochs; on a CPU at most 300)."})
    epochs: float | None = field(default=None, metadata={"help": "Passes over the training set (default 2)."})
    learning_rate: float | None = field(default=None, metadata={
        "help": "Learning rate (default 5e-6; on a CPU at least 2e-4).", "aliases": ("--lr",)})
    batch_size: int | None = field(default=None, metadata={"help": "Effective batch size (default 32; on a CPU at most 8)."})
    lora_alpha: int | None = field(default=None, metadata={
        "help": "LoRA alpha (default 16 with r 64; alpha = r scales the update by 1)."})

    def as_overrides(self) -> dict[str, Any]:
        """The values that were set, as `config_for` keyword arguments."""
        return {f.name: getattr(self, f.name) for f in fields(self) if getattr(self, f.name) is not None}

    @classmethod
    def from_mapping(cls, values: dict[str, Any] | None) -> "TrainingKnobs":
        """Knobs from untrusted input (a job's params): unknown names and wrong types are a
        `ConfigError` that names them; values are then checked by the run config itself."""
        values = dict(values or {})
        known = {f.name: f for f in fields(cls)}
        unknown = sorted(set(values) - set(known))
        if unknown:
            raise ConfigError(f"unknown training option(s) {unknown}; known: {sorted(known)}")
        out = {}
        for name, value in values.items():
            kind = float if "float" in str(known[name].type) else int
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, (int, float)) or (kind is int and value != int(value)):
                raise ConfigError(f"training option {name} must be a number ({kind.__name__}), got {value!r}")
            out[name] = kind(value)
        return cls(**out)


CONFIG_CLASSES: dict[str, type[RunConfig]] = {"sft": SFTRunConfig, "kto": KTORunConfig, "dpo": DPORunConfig}


def config_for(method: str, **values: Any) -> RunConfig:
    """A config of `method` with the given values over the defaults; unknown names are an error."""
    if method not in CONFIG_CLASSES:
        raise ConfigError(f"unknown training method {method!r}; choose one of {', '.join(METHODS)}")
    cls = CONFIG_CLASSES[method]
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(values) - known)
    if unknown:
        raise ConfigError(f"unknown {method} config option(s) {unknown}; known: {sorted(known)}")
    return cls(**values)


def config_from_dict(data: dict[str, Any]) -> RunConfig:
    data = dict(data)
    method = data.pop("method", None)
    if method is None:
        raise ConfigError("config has no 'method' (sft, kto or dpo)")
    return config_for(method, **data)


@dataclass
class Effective:
    """The config that runs, the device, and what the scaling rule changed (for metadata)."""

    config: RunConfig
    device: str
    quantize: bool
    total_steps: int
    changes: dict[str, tuple[Any, Any]] = field(default_factory=dict)


def effective_config(config: RunConfig, *, cuda: bool, n_train: int) -> Effective:
    """Resolve device and quantisation, apply the CPU rule, fix the number of steps."""
    device = ("cuda" if cuda else "cpu") if config.device == "auto" else config.device
    if device == "cuda" and not cuda:
        raise ConfigError("config asks for device 'cuda' but no CUDA device is available; use device 'auto' or 'cpu'")
    quantize = config.quantize == "4bit" or (config.quantize == "auto" and device == "cuda")
    if quantize and device != "cuda":
        raise ConfigError("4-bit QLoRA needs a CUDA device; use quantize 'none' on a CPU")
    changes: dict[str, tuple[Any, Any]] = {}
    eff = config
    if device == "cpu" and config.cpu_scaling:
        scaled = {
            "batch_size": min(config.batch_size, CPU_MAX_BATCH),
            "per_device_batch_size": None,
            "max_length": min(config.max_length, CPU_MAX_LENGTH),
            "learning_rate": max(config.learning_rate, config.cpu_min_learning_rate),
        }
        changes = {k: (getattr(config, k), v) for k, v in scaled.items() if getattr(config, k) != v}
        eff = replace(config, **scaled)
    if eff.method == "kto" and eff.per_device()[0] < 2:
        raise ConfigError("KTO needs a per-device batch of at least 2 (its KL estimate pairs examples)")
    per_device, accum = eff.per_device()
    steps_per_epoch = max(1, math.ceil(n_train / (per_device * accum)))
    total = eff.max_steps if eff.max_steps > 0 else math.ceil(eff.epochs * steps_per_epoch)
    if device == "cpu" and eff.cpu_scaling and total > eff.cpu_max_steps:
        changes["max_steps"] = (eff.max_steps, eff.cpu_max_steps)
        eff = replace(eff, max_steps=eff.cpu_max_steps)
        total = eff.cpu_max_steps
    return Effective(eff, device, quantize, total, changes)
