"""Training throughput and peak memory for SFT, KTO and DPO on the built-in or the served model.

    .venv/bin/python bench/train.py [--data-dir DIR] [--model builtin|pretrained|DIR] [--steps 30]
        [--rows 96] [--methods sft,kto,dpo] [--set NAME=VALUE ...] [--out bench/results/X.json]

`--model pretrained` trains the served SmolLM2-135M-Instruct (built into DATA_DIR if missing);
`--set` overrides a run config field (`trainer.config`), e.g. `--set lora_r=8`. The first step
is a warm-up: the median step time is over the steps after it (`--steps 5`: 4 timed steps).

Each method runs as the real thing (`trainer.start_run`: a subprocess on a run directory, LoRA,
the CPU scaling rule) on rows made from the shipped advice corpus, so the figures are what an
operator gets. Reported per method:
- tokens/s: dataset tokens processed per second of training (prompt + answer; DPO counts the
  prompt twice, once per answer), over the whole run, and from the median step time;
- peak RSS of the training process (its own maximum resident set, from getrusage), and peak
  CUDA memory when on a GPU;
- median seconds per optimizer step (wall, and CPU seconds of all the run's threads: on a busy
  machine the wall time mostly measures the other processes), and the run's wall time from start to adapter (which
  includes what a run does before its first step, e.g. precomputing reference log-probs);
- the settings that ran (the effective run config, what the CPU rule changed).
The first lines print the machine. Nothing here is a pass/fail assertion.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from _machine import cpu_model, emit  # noqa: E402

from feedback.datasets import write_rows  # noqa: E402
from store.attributes import Attributes  # noqa: E402
from trainer.config import config_for  # noqa: E402
from trainer.process import start_run  # noqa: E402
from trainer.rundir import read_metadata, read_progress  # noqa: E402


def machine() -> dict:
    import psutil
    import torch

    cpu = cpu_model()
    info = {"cpu": cpu, "cores": os.cpu_count(), "torch_threads": torch.get_num_threads(),
            "ram_gb": round(psutil.virtual_memory().total / 2**30, 1), "python": platform.python_version(),
            "torch": torch.__version__, "load_avg_1m": round(os.getloadavg()[0], 2)}
    if torch.cuda.is_available():
        info["cuda"] = torch.cuda.get_device_name(0)
    return info


def _msg(role: str, content: str, attributes: str | None = None) -> dict:
    return {"role": role, "content": content, "attributes": attributes}


def corpus_rows(method: str, n: int, seed: int = 0) -> list[dict]:
    """Rows of `method` from the shipped corpus: answers to the same question at different
    verbosity make the KTO labels (short desirable) and DPO pairs (short chosen)."""
    from chat.builtin.corpus import load_corpus

    by_question: dict[str, list] = {}
    for ex in load_corpus():
        by_question.setdefault(ex.question, []).append(ex)
    groups = [sorted(g, key=lambda e: e.attributes["verbosity"]) for g in by_question.values() if len(g) > 1]
    random.Random(seed).shuffle(groups)
    rows = []
    for i in range(n):
        group = groups[i % len(groups)]
        short, long = group[0], group[-1]
        attrs = Attributes.from_dict(short.attributes).steerlm()
        base = {"prompt": [_msg("user", short.question)], "chat_template_kwargs": {"attributes": attrs},
                "conversation_id": f"bench-{i}", "source": "bench", "categories": []}
        if method == "dpo":
            rows.append(base | {"chosen": [_msg("assistant", short.answer, attrs)],
                                "rejected": [_msg("assistant", long.answer, attrs)]})
        else:
            desirable = method == "sft" or i % 2 == 0
            answer = short.answer if desirable else long.answer
            rows.append(base | {"completion": [_msg("assistant", answer, attrs)], "label": desirable,
                                "message_id": f"m{i}"})
    return rows


def bench_method(method: str, model_dir: Path, work: Path, rows: int, steps: int, device: str = "auto",
                 overrides: dict | None = None) -> dict:
    run_dir = work / method
    run_dir.mkdir(parents=True)
    write_rows(corpus_rows(method, rows), method, run_dir / "train.parquet")
    cfg = config_for(method, base_model=str(model_dir), max_steps=steps, save_steps=10_000, device=device,
                     **(overrides or {}))
    t0 = time.monotonic()
    code = start_run(run_dir, cfg).wait()
    wall = time.monotonic() - t0
    meta = read_metadata(run_dir)
    if code != 0:
        raise SystemExit(f"{method} run failed ({meta.get('error')}); see {run_dir / 'train.log'}")
    logs = [r for r in read_progress(run_dir) if r.get("event") == "log" and r.get("loss") is not None]
    step_s = [b["elapsed_s"] - a["elapsed_s"] for a, b in zip(logs, logs[1:])]
    step_cpu = [b["cpu_s"] - a["cpu_s"] for a, b in zip(logs, logs[1:]) if "cpu_s" in a]
    m = meta["metrics"]
    per_step_tokens = m["tokens_per_epoch"] / max(1, -(-meta["n_train"] // meta["config"]["batch_size"]))
    median = statistics.median(step_s) if step_s else float("nan")
    return {
        "method": method, "steps": m["global_step"], "batch": meta["config"]["batch_size"],
        "tokens_per_s": m.get("tokens_per_s"), "tokens_per_s_median_step": round(per_step_tokens / median, 1),
        "median_step_s": round(median, 3), "step_s": [round(x, 2) for x in step_s],
        "median_step_cpu_s": round(statistics.median(step_cpu), 2) if step_cpu else None,
        "torch_threads": meta.get("torch_threads"), "priority": meta.get("priority"), "peak_rss_mb": m["peak_rss_mb"], "peak_cuda_mb": m.get("peak_cuda_mb"),
        "train_runtime_s": m["train_runtime"], "run_wall_s": round(wall, 1), "device": meta["device"],
        "final_loss": logs[-1]["loss"] if logs else None, "losses": [r["loss"] for r in logs],
        "config": meta["config"], "scaled": meta.get("scaled", {}),
    }


def parse_set(items: list[str]) -> dict:
    """`NAME=VALUE` pairs as run config overrides; VALUE is read as JSON when it parses, else text."""
    out = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"--set takes NAME=VALUE, got {item!r}")
        try:
            out[name] = json.loads(value)
        except ValueError:
            out[name] = value
    return out


def model_dir_for(choice: str, data_dir: Path) -> Path:
    if choice == "pretrained":
        from chat.pretrained import build_pretrained_model

        return build_pretrained_model(data_dir)
    if choice == "builtin":
        try:
            from chat.builtin import build_builtin_model
        except ImportError:
            from chat.builtin.build import build_builtin_model
        return build_builtin_model(data_dir)
    return Path(choice)


def report(info: dict, model_dir: Path, overrides: dict, args, results: list[dict]) -> dict:
    machine_now = info | {"load_avg_1m_end": round(os.getloadavg()[0], 2)}
    return {"machine": machine_now, "model": str(model_dir), "overrides": overrides, "rows": args.rows,
            "steps": args.steps, "results": results}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--data-dir", type=Path, default=Path("data"), help="where the built-in model is cached")
    ap.add_argument("--steps", type=int, default=30)
    ap.add_argument("--rows", type=int, default=96)
    ap.add_argument("--methods", default="sft,kto,dpo")
    ap.add_argument("--model", default="builtin",
                    help="builtin (default), pretrained (the served SmolLM2) or a model directory")
    ap.add_argument("--device", default="auto", choices=("auto", "cpu", "cuda"))
    ap.add_argument("--set", action="append", default=[], metavar="NAME=VALUE",
                    help="a run config field over the method's default (repeatable)")
    ap.add_argument("--json", action="store_true")
    ap.add_argument("--out", type=Path, help="also write the JSON report here")
    args = ap.parse_args()

    model_dir = model_dir_for(args.model, args.data_dir)
    overrides = parse_set(args.set)
    if args.model != "builtin":  # trained as the service trains it: a chat model is steered by instructions
        overrides.setdefault("steering", "instruct")
    info = machine()
    print("machine: " + ", ".join(f"{k} {v}" for k, v in info.items()))
    print(f"model: {model_dir}; overrides: {overrides or 'none'}")
    results = []
    with tempfile.TemporaryDirectory(prefix="bench-train-") as tmp:
        for method in args.methods.split(","):
            results.append(bench_method(method.strip(), model_dir, Path(tmp), args.rows, args.steps, args.device,
                                        overrides))
            r = results[-1]
            print(f"{r['method']:>4}: {r['tokens_per_s']:>8} tok/s (median step {r['tokens_per_s_median_step']} tok/s, "
                  f"{r['median_step_s']} s/step, {r['median_step_cpu_s']} CPU s/step, batch {r['batch']}, {r['steps']} steps) · "
                  f"peak RSS {r['peak_rss_mb']} MB" + (f" · peak CUDA {r['peak_cuda_mb']} MB" if r["peak_cuda_mb"] else ""),
                  flush=True)
            if args.out:  # what has finished so far, in case a long bench is stopped
                args.out.write_text(json.dumps(report(info, model_dir, overrides, args, results), indent=1) + "\n")
    if args.json or args.out:
        emit(report(info, model_dir, overrides, args, results), args.out)


if __name__ == "__main__":
    main()
