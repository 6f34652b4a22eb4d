"""Where one KTO or DPO training step spends its time, part by part, on the served model.

    .venv/bin/python bench/train_profile.py [--model pretrained|builtin|DIR] [--method kto]
        [--set NAME=VALUE ...] [--repeat 3] [--out bench/results/X.json]

The trainer is built exactly as a run builds it (`trainer.run.make_trainer` on a run directory
of corpus rows, the CPU rule applied); one training batch is then timed in pieces, each the
median of `--repeat` calls:
- `step` (with `--parts step`): the trainer's own `training_step` (loss + backward);
- `policy_fwd_bwd`: the policy's forward with gradients and its backward; with `--parts bf16`
  the same under CPU bf16 autocast, then fp32 again (A, B, A: drift shows as A ≠ A);
- `policy_fwd` / `backbone_fwd`: no-grad forwards of the whole policy (fused vocabulary
  projection on completion tokens included) and of the transformer body alone; the difference
  is what the projection over the 49k-token vocabulary costs;
- `policy_kl_fwd` / `ref_fwd` (KTO): the no-grad forwards of the KL batch under the policy, and
  of the batch and the KL batch under the reference (the adapter disabled);
- `optimizer`: one AdamW step over the LoRA weights.
Each is wall and CPU seconds (all threads). It also prints the batch shape and its padding
share. Nothing here asserts.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.append(str(Path(__file__).resolve().parent))  # after the repo: bench/store.py must not shadow the store package
sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _machine import emit  # noqa: E402
from train import corpus_rows, machine, model_dir_for, parse_set  # noqa: E402

from feedback.datasets import write_rows  # noqa: E402
from trainer.config import config_for, effective_config  # noqa: E402
from trainer.run import make_trainer  # noqa: E402


def timed(fn, repeat: int) -> dict[str, float]:
    """Median wall and CPU seconds (all threads) of `repeat` calls: on a busy machine the CPU
    seconds are the figure to compare; the wall seconds mostly measure the other processes."""
    wall, cpu = [], []
    for _ in range(repeat):
        t0, c0 = time.perf_counter(), time.process_time()
        fn()
        wall.append(time.perf_counter() - t0)
        cpu.append(time.process_time() - c0)
    return {"wall_s": round(statistics.median(wall), 2), "cpu_s": round(statistics.median(cpu), 2)}


def shape_report(batch: dict) -> dict:
    out = {}
    for prefix in ("", "KL_", "chosen_", "rejected_"):
        ids, mask = batch.get(f"{prefix}input_ids"), batch.get(f"{prefix}attention_mask")
        if ids is None or mask is None:
            continue
        out[f"{prefix}shape"] = list(ids.shape)
        out[f"{prefix}padding_share"] = round(1 - mask.sum().item() / ids.numel(), 3)
    comp = batch.get("completion_mask")
    if comp is not None:
        out["completion_tokens"] = int(comp.sum().item())
    return out


def profile(trainer, batch: dict, method: str, repeat: int, parts_wanted: set[str]) -> dict:
    import torch

    model = trainer.model
    model.train()
    parts: dict[str, dict] = {}
    if "step" in parts_wanted:
        parts["step"] = timed(lambda: trainer.training_step(model, batch), repeat)
        model.zero_grad()
    ids, mask = batch["input_ids"], batch["attention_mask"]
    labels = ids.masked_fill(batch["completion_mask"] == 0, -100) if "completion_mask" in batch else ids

    def fwd_bwd():
        out = model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True, use_cache=False)
        out.log_probs.sum().backward()

    parts["policy_fwd_bwd"] = timed(fwd_bwd, repeat)
    if "bf16" in parts_wanted:
        with torch.autocast("cpu", dtype=torch.bfloat16):
            parts["policy_fwd_bwd_bf16_autocast"] = timed(fwd_bwd, repeat)
        with torch.no_grad():
            logps = [model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True,
                           use_cache=False).log_probs.sum(-1)]
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logps.append(model(input_ids=ids, attention_mask=mask, labels=labels, fused_lm_head=True,
                                   use_cache=False).log_probs.float().sum(-1))
        # How far bf16 moves a sequence's log-probability (nats): KTO and DPO take differences of these.
        parts["bf16_logp_abs_error"] = {"max": round((logps[0] - logps[1]).abs().max().item(), 3),
                                        "of_mean_abs_logp": round(logps[0].abs().mean().item(), 1)}
        parts["policy_fwd_bwd_again"] = timed(fwd_bwd, repeat)  # A, B, A: drift shows as A ≠ A
    with torch.no_grad():
        body = model.get_base_model().model
        parts["backbone_fwd"] = timed(lambda: body(input_ids=ids, attention_mask=mask, use_cache=False), repeat)
        parts["policy_fwd"] = timed(lambda: model(input_ids=ids, attention_mask=mask, labels=labels,
                                                  fused_lm_head=True, use_cache=False), repeat)
        if method == "kto" and "KL_input_ids" in batch:
            parts["policy_kl_fwd"] = timed(lambda: trainer._compute_kl_logps(model, batch), repeat)
            with model.disable_adapter():
                parts["ref_fwd"] = timed(lambda: (trainer._compute_kl_logps(model, batch),
                                                  model(input_ids=ids, attention_mask=mask, labels=labels,
                                                        fused_lm_head=True, use_cache=False)), repeat)
    trainer.create_optimizer()
    fwd_bwd()
    parts["optimizer"] = timed(lambda: trainer.optimizer.step(), 1)
    return parts


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=Path("data"))
    ap.add_argument("--model", default="pretrained")
    ap.add_argument("--method", default="kto", choices=("kto", "dpo"))
    ap.add_argument("--rows", type=int, default=16)
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--threads", type=int, help="torch threads (default: torch's own choice)")
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE")
    ap.add_argument("--parts", default="step,bf16", help="optional parts to time: step, bf16")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()

    import torch

    if args.threads:
        torch.set_num_threads(args.threads)
    model_dir = model_dir_for(args.model, args.data_dir)
    rows = corpus_rows(args.method, args.rows)
    cfg = config_for(args.method, base_model=str(model_dir), max_steps=4, **parse_set(args.set))
    eff = effective_config(cfg, cuda=torch.cuda.is_available(), n_train=len(rows))
    with tempfile.TemporaryDirectory(prefix="bench-train-profile-") as tmp:
        run_dir = Path(tmp)
        write_rows(rows, args.method, run_dir / "train.parquet")
        t0 = time.perf_counter()
        trainer, _, _ = make_trainer(eff, run_dir, rows, [], [])
        setup_s = round(time.perf_counter() - t0, 2)
        batch = trainer._prepare_inputs(next(iter(trainer.get_train_dataloader())))
        parts = profile(trainer, batch, args.method, args.repeat, set(args.parts.split(",")))
    report = {"machine": machine(), "method": args.method, "torch_threads": torch.get_num_threads(),
              "config": eff.config.to_dict(), "setup_s": setup_s, "batch": shape_report(batch), "seconds": parts}
    emit(report, args.out)


if __name__ == "__main__":
    main()
