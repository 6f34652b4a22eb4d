"""`python -m trainer.run RUN_DIR`: one training run (SFT, KTO or DPO with LoRA / QLoRA).

Reads only its run directory (config.json + Parquet snapshot) and writes only into it; it never
opens the database. Order of work, cheapest first, so bad input fails in about a second:
config → data check (pyarrow only) → torch/TRL import → model → trainer → train → adapter.

- Resume: when `checkpoints/` holds a complete checkpoint, training continues from it (after a
  SIGKILL, an OOM kill or a reboot: start the same run directory again).
- Cancel: SIGTERM stops after the current optimizer step; the run is recorded `cancelled` and
  keeps its checkpoints. Before training starts, SIGTERM stops at once.
- Start point: `start_adapter` loads a PEFT adapter (the live release's) as the trainable
  adapter; TRL then keeps a frozen copy of it as the reference ("ref" adapter), so KTO/DPO
  measure improvement over the live release, not over the bare base model.
- Exit codes: 0 succeeded, 1 failed, 2 bad/empty data or config, 143 cancelled.
- Priority: the process lowers its own priority (`RunConfig.nice`) before torch starts its
  threads, so a run on the service's machine takes the CPU the service leaves idle.
"""

from __future__ import annotations

import json
import logging
import os
import random
import resource
import signal
import sys
import time
import traceback
from pathlib import Path
from typing import Any

from trainer.config import ConfigError, Effective, config_from_dict, effective_config
from trainer.data import DataError, load_snapshot
from trainer.rundir import (
    ADAPTER,
    CHECKPOINTS,
    CONFIG,
    EXIT_BAD_DATA,
    EXIT_CANCELLED,
    EXIT_FAILED,
    EXIT_OK,
    append_progress,
    code_version,
    last_checkpoint,
    now_iso,
    read_json,
    read_metadata,
    update_metadata,
)

log = logging.getLogger("advisor.trainer")


class Cancelled(BaseException):
    """SIGTERM before training. A BaseException, like KeyboardInterrupt: raised from the signal
    handler at any line, it must not be swallowed by the `except Exception` of whatever runs then
    (reading the data, for one, which would report the file as unreadable)."""


class _Stop:
    """SIGTERM flag: raise while preparing (nothing to save), stop at the next step while training."""

    def __init__(self) -> None:
        self.requested = False
        self.training = False

    def __call__(self, signum: int, frame: Any) -> None:
        self.requested = True
        log.warning("SIGTERM received: %s", "stopping after this step" if self.training else "stopping now")
        if not self.training:
            raise Cancelled()


# --------------------------------------------------------------------------- progress


def make_progress_callback(run_dir: Path, stop: _Stop):
    from transformers import TrainerCallback

    keys = ("loss", "learning_rate", "grad_norm", "rewards/chosen", "rewards/rejected", "rewards/margins",
            "rewards/accuracies", "kl", "num_tokens", "eval_loss", "eval_rewards/margins")

    class ProgressCallback(TrainerCallback):
        """Appends one JSON line per log to progress.jsonl, with an ETA from this attempt's pace."""

        def on_train_begin(self, args, state, control, **kw):
            self.t0, self.cpu0, self.step0 = time.monotonic(), time.process_time(), state.global_step
            stop.training = True
            append_progress(run_dir, {"event": "resume" if state.global_step else "start", "step": state.global_step,
                                      "max_steps": state.max_steps, "time": now_iso()})

        def on_log(self, args, state, control, logs=None, **kw):
            # cpu_s: CPU seconds of all this process's threads since training began; unlike the
            # wall time, other processes on a busy machine barely change it.
            logs = logs or {}
            if not any(k in logs for k in keys):
                return  # the end-of-training summary goes to metadata instead
            done = state.global_step - self.step0
            elapsed = time.monotonic() - self.t0
            eta = elapsed / done * (state.max_steps - state.global_step) if done > 0 else None
            record = {"event": "log", "step": state.global_step, "max_steps": state.max_steps,
                      "epoch": round(state.epoch or 0.0, 4), "elapsed_s": round(elapsed, 2),
                      "cpu_s": round(time.process_time() - self.cpu0, 2),
                      "eta_s": round(eta, 1) if eta is not None else None, "time": now_iso()}
            record.update({k: logs[k] for k in keys if k in logs})
            append_progress(run_dir, record)

        def on_save(self, args, state, control, **kw):
            append_progress(run_dir, {"event": "checkpoint", "step": state.global_step,
                                      "max_steps": state.max_steps, "time": now_iso()})

        def on_step_end(self, args, state, control, **kw):
            if stop.requested:
                control.should_training_stop = True

    return ProgressCallback()


# --------------------------------------------------------------------------- priority and threads


AUTOGROUP = Path("/proc/self/autogroup")


def lower_priority(nice: int) -> dict[str, Any]:
    """Set this process's niceness, and its autogroup's when it leads its own session, to `nice`;
    what took effect, for metadata.

    Call it before torch starts threads: Linux keeps a niceness per thread and new threads inherit
    the creator's. The autogroup matters more: the kernel (CONFIG_SCHED_AUTOGROUP, on in most
    distributions) first shares the CPU between sessions, and `start_run` gives the run a session
    of its own, so at niceness 19 alone it still gets as much CPU as the whole service's session
    (bench/train_priority.py measures it). Run from a shell (no session of its own), it leaves the
    autogroup alone: that would slow the shell's whole session.
    """
    if nice <= 0:
        return {}
    out: dict[str, Any] = {}
    try:
        os.setpriority(os.PRIO_PROCESS, 0, max(nice, os.getpriority(os.PRIO_PROCESS, 0)))
        out["nice"] = os.getpriority(os.PRIO_PROCESS, 0)
    except OSError as exc:
        log.warning("could not lower the training priority: %s", exc)
    if os.getsid(0) != os.getpid():
        out["autogroup"] = "unchanged (not a session leader)"
        return out
    try:
        AUTOGROUP.write_text(f"{nice}\n")
        out["autogroup"] = AUTOGROUP.read_text().strip()
    except OSError as exc:  # no autogroup support (or not allowed): the niceness above still counts
        out["autogroup"] = f"unchanged ({exc.strerror or exc})"
    return out


def set_threads(threads: int) -> int:
    import torch

    n = threads or len(os.sched_getaffinity(0))
    torch.set_num_threads(n)
    return n


# --------------------------------------------------------------------------- model and trainer


def load_model(eff: Effective):
    import torch
    from peft import LoraConfig, PeftModel, prepare_model_for_kbit_training
    from transformers import AutoModelForCausalLM, AutoTokenizer

    cfg = eff.config
    tokenizer = AutoTokenizer.from_pretrained(cfg.base_model)
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    if eff.quantize:
        from transformers import BitsAndBytesConfig

        bnb = BitsAndBytesConfig(load_in_4bit=True, bnb_4bit_quant_type="nf4", bnb_4bit_use_double_quant=True,
                                 bnb_4bit_compute_dtype=torch.bfloat16)
        model = AutoModelForCausalLM.from_pretrained(cfg.base_model, quantization_config=bnb,
                                                     dtype=torch.bfloat16, device_map={"": 0})
        model = prepare_model_for_kbit_training(model, use_gradient_checkpointing=True)
    else:
        dtype = torch.bfloat16 if eff.device == "cuda" else torch.float32
        model = AutoModelForCausalLM.from_pretrained(cfg.base_model, dtype=dtype)
        if eff.device == "cuda":
            model = model.to("cuda")
    peft_config = None
    if cfg.start_adapter:
        model = PeftModel.from_pretrained(model, cfg.start_adapter, is_trainable=True)
    else:
        peft_config = LoraConfig(r=cfg.lora_r, lora_alpha=cfg.lora_alpha, lora_dropout=cfg.lora_dropout,
                                 target_modules=cfg.lora_target_modules, bias="none", task_type="CAUSAL_LM")
    return model, tokenizer, peft_config


def trl_args(eff: Effective, run_dir: Path, n_train: int, class_weights: dict[str, float]):
    cfg = eff.config
    per_device, accum = cfg.per_device()
    on_cuda = eff.device == "cuda"
    common = dict(
        output_dir=str(run_dir / CHECKPOINTS), num_train_epochs=cfg.epochs, max_steps=cfg.max_steps,
        learning_rate=cfg.learning_rate, per_device_train_batch_size=per_device, per_device_eval_batch_size=per_device,
        gradient_accumulation_steps=accum, lr_scheduler_type=cfg.lr_scheduler,
        warmup_steps=int(cfg.warmup_ratio * eff.total_steps), logging_steps=cfg.logging_steps,
        save_strategy="steps", save_steps=cfg.save_steps, save_total_limit=2, eval_strategy="no",
        report_to="none", seed=cfg.seed, use_cpu=not on_cuda, bf16=on_cuda or cfg.cpu_bf16, fp16=False,
        gradient_checkpointing=on_cuda, disable_tqdm=True, dataloader_num_workers=0, max_length=cfg.max_length,
    )
    if cfg.method == "sft":
        from trl import SFTConfig

        return SFTConfig(**common, completion_only_loss=True, packing=False)
    if cfg.method == "kto":
        from trl import KTOConfig

        return KTOConfig(**common, beta=cfg.beta, precompute_ref_log_probs=cfg.precompute_ref_log_probs,
                         desirable_weight=cfg.desirable_weight or class_weights["desirable_weight"],
                         undesirable_weight=cfg.undesirable_weight or class_weights["undesirable_weight"])
    from trl import DPOConfig

    losses = {cfg.loss_type: 1.0, **({"sft": cfg.sft_weight} if cfg.sft_weight > 0 else {})}
    return DPOConfig(**common, beta=cfg.beta, loss_type=list(losses), loss_weights=list(losses.values()),
                     precompute_ref_log_probs=cfg.precompute_ref_log_probs)


def make_trainer(eff: Effective, run_dir: Path, train_rows: list[dict], eval_rows: list[dict], callbacks: list):
    from datasets import Dataset

    from feedback.datasets import kto_class_weights

    cfg = eff.config
    n_d = sum(1 for r in train_rows if r.get("label"))
    weights = kto_class_weights(n_d, len(train_rows) - n_d) if cfg.method == "kto" else {}
    args = trl_args(eff, run_dir, len(train_rows), weights)
    model, tokenizer, peft_config = load_model(eff)
    kwargs = dict(model=model, args=args, train_dataset=Dataset.from_list(train_rows),
                  eval_dataset=Dataset.from_list(eval_rows) if eval_rows else None,
                  processing_class=tokenizer, peft_config=peft_config, callbacks=callbacks)
    if cfg.method == "sft":
        from trl import SFTTrainer as Trainer
    elif cfg.method == "kto":
        from trl import KTOTrainer as Trainer
    else:
        from trl import DPOTrainer as Trainer
    trainer = Trainer(**kwargs)
    used = {}
    if cfg.method == "kto":
        used = {"desirable_weight": args.desirable_weight, "undesirable_weight": args.undesirable_weight}
    return trainer, tokenizer, used


def tokens_per_epoch(dataset) -> int:
    """Tokens in one pass over the prepared training set (DPO counts the prompt twice: it is
    forwarded with both answers)."""
    cols = set(dataset.column_names)

    def total(col: str) -> int:
        return sum(len(x) for x in dataset[col]) if col in cols else 0

    if "input_ids" in cols:
        return total("input_ids")
    if "chosen_ids" in cols:
        return 2 * total("prompt_ids") + total("chosen_ids") + total("rejected_ids")
    return total("prompt_ids") + total("completion_ids")


def save_adapter(trainer, tokenizer, run_dir: Path) -> Path:
    """The trained adapter only (not TRL's frozen "ref" copy), written atomically."""
    import shutil

    final, tmp = run_dir / ADAPTER, run_dir / f".{ADAPTER}.tmp"
    shutil.rmtree(tmp, ignore_errors=True)
    model = trainer.accelerator.unwrap_model(trainer.model)
    model.save_pretrained(str(tmp), selected_adapters=["default"])
    tokenizer.save_pretrained(str(tmp))
    shutil.rmtree(final, ignore_errors=True)
    tmp.rename(final)
    return final


def _peak_memory(device: str) -> dict[str, float]:
    out = {"peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)}
    if device == "cuda":
        import torch

        out["peak_cuda_mb"] = round(torch.cuda.max_memory_allocated() / 2**20, 1)
    return out


# --------------------------------------------------------------------------- the run


def train(run_dir: Path, stop: _Stop) -> int:
    config = config_from_dict(read_json(run_dir / CONFIG))
    priority = lower_priority(config.nice)
    train_rows, eval_rows, data_hash = load_snapshot(run_dir, config.method, config.steering)

    # KTO samples sequentially (its KL term pairs neighbours in a batch), so an ordered snapshot
    # would give one-label batches; a seeded shuffle mixes them and is the same on every resume.
    random.Random(config.seed).shuffle(train_rows)

    import torch

    eff = effective_config(config, cuda=torch.cuda.is_available(), n_train=len(train_rows))
    threads = set_threads(config.torch_threads)
    update_metadata(run_dir, priority=priority, torch_threads=threads)
    update_metadata(run_dir, method=config.method, base_model=config.base_model, start_adapter=config.start_adapter,
                    data_hash=data_hash, n_train=len(train_rows), n_eval=len(eval_rows), device=eff.device,
                    quantized=eff.quantize, config=eff.config.to_dict(),
                    scaled={k: {"requested": a, "used": b} for k, (a, b) in eff.changes.items()},
                    total_steps=eff.total_steps)
    log.info("%s run on %s: %d train / %d eval rows, %d steps, changes %s", config.method, eff.device,
             len(train_rows), len(eval_rows), eff.total_steps, eff.changes)

    trainer, tokenizer, weights = make_trainer(eff, run_dir, train_rows, eval_rows,
                                               [make_progress_callback(run_dir, stop)])
    if weights:
        update_metadata(run_dir, class_weights=weights)
    tokens = tokens_per_epoch(trainer.train_dataset)
    resume = last_checkpoint(run_dir)
    if resume:
        log.info("resuming from %s", resume)
        update_metadata(run_dir, resumed_from=str(resume))
    epoch0 = json.loads((resume / "trainer_state.json").read_text()).get("epoch", 0.0) if resume else 0.0
    result = trainer.train(resume_from_checkpoint=str(resume) if resume else None)
    stop.training = False
    if stop.requested:
        raise Cancelled()

    metrics: dict[str, Any] = {k: v for k, v in result.metrics.items() if isinstance(v, (int, float))}
    runtime = metrics.get("train_runtime") or 0.0
    epochs_done = (trainer.state.epoch or 0.0) - epoch0
    if runtime > 0:
        metrics["tokens_per_s"] = round(tokens * epochs_done / runtime, 1)
    metrics.update(tokens_per_epoch=tokens, global_step=trainer.state.global_step, **_peak_memory(eff.device))
    if eval_rows:
        metrics.update({k: v for k, v in trainer.evaluate().items() if isinstance(v, (int, float))})
    adapter = save_adapter(trainer, tokenizer, run_dir)
    update_metadata(run_dir, status="succeeded", finished_at=now_iso(), metrics=metrics, adapter=str(adapter),
                    error=None)
    append_progress(run_dir, {"event": "end", "step": trainer.state.global_step, "max_steps": trainer.state.max_steps,
                              "time": now_iso()})
    return EXIT_OK


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if len(argv) != 1:
        print("usage: python -m trainer.run RUN_DIR", file=sys.stderr)
        return EXIT_BAD_DATA
    run_dir = Path(argv[0]).resolve()
    logging.basicConfig(level=logging.INFO, stream=sys.stdout, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    stop = _Stop()
    signal.signal(signal.SIGTERM, stop)
    meta = read_metadata(run_dir)
    update_metadata(run_dir, run_id=meta.get("run_id", run_dir.name), status="running", pid=os.getpid(),
                    started_at=meta.get("started_at") or now_iso(), attempt=int(meta.get("attempt", 0)) + 1,
                    code_version=code_version(), error=None)
    try:
        return train(run_dir, stop)
    except (DataError, ConfigError) as exc:
        message = f"cannot train: {exc}"
        log.error(message)
        update_metadata(run_dir, status="failed", finished_at=now_iso(), error=message)
        return EXIT_BAD_DATA
    except Cancelled:
        update_metadata(run_dir, status="cancelled", finished_at=now_iso(), error="cancelled (SIGTERM)")
        append_progress(run_dir, {"event": "cancelled", "time": now_iso()})
        return EXIT_CANCELLED
    except Exception as exc:  # noqa: BLE001 - record any failure for the operator, with the traceback in the log
        traceback.print_exc()
        update_metadata(run_dir, status="failed", finished_at=now_iso(),
                        error=f"{type(exc).__name__}: {exc} (traceback in train.log)")
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
