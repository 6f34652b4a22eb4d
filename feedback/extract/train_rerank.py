"""Fine-tune the fast extractor's cross-encoder tier (`rerank.py`) on the real gold set.

    python -m feedback.extract.train_rerank DIR                 # train + dev + templated dev: ~25 min, 2 cores
    python -m feedback.extract.train_rerank DIR --holdout-dev   # dev left out, to choose the mix on it
    python -m feedback.extract.train_rerank --ship              # rebuild the shipped tier (packed, feedback/data/reranker)
    advisor extract build-reranker                              # the first, into <data_dir>/models/feedback-reranker

The recipe and why: `rerank.py`'s docstring. The sentences are the sentence classifier's training
examples (`train_classifier.training_data`), so both tiers read the same turns the same way; the
test split is never read. Deterministic given the seed and the CPU (one process, fixed order).
The shipped tier is this build packed at `rerank.PACKED_RANK` (the rank `bench/rerank_pack.py`
chose), with a digest of its recipe (settings, classes, rank, every training pair and label) that
a test recomputes, so the recipe cannot move without the weights.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import random
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, fields
from datetime import date
from pathlib import Path

import numpy as np

from feedback.extract.rerank import CONFIG_NAME, PACKAGED, PACKED_RANK, RerankSettings, encode, pack, pair
from feedback.extract.train_classifier import CLASSES, training_data


def _fine_tune(model, tokenizer, pairs: list, labels: list[int], settings: RerankSettings, log) -> int:
    """The training loop (module docstring); returns the steps taken."""
    import torch

    order_rng = random.Random(settings.seed)
    y = torch.tensor(labels)
    counts = np.bincount(labels, minlength=model.config.num_labels)
    class_weight = torch.tensor((counts.sum() / np.maximum(counts, 1) / len(counts)) ** 0.5, dtype=torch.float)
    steps = max(1, int(math.ceil(len(pairs) / settings.batch_size) * settings.epochs))
    opt = torch.optim.AdamW(model.parameters(), lr=settings.learning_rate, weight_decay=0.01)
    warm = max(1.0, 0.1 * steps)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda s: min(1.0, s / warm) * max(0.0, (steps - s) / (steps - warm + 1e-9)))
    loss_fn = torch.nn.CrossEntropyLoss(weight=class_weight)
    model.train()
    step, start = 0, time.time()
    while step < steps:
        order = list(range(len(pairs)))
        order_rng.shuffle(order)
        for k in range(0, len(order), settings.batch_size):
            if step >= steps:
                break
            idx = order[k:k + settings.batch_size]
            loss = loss_fn(model(**encode(tokenizer, [pairs[i] for i in idx], settings.max_length)).logits, y[idx])
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
            opt.step()
            sched.step()
            opt.zero_grad()
            step += 1
            if step % 50 == 0 or step == steps:
                log(f"step {step}/{steps} loss {loss.item():.3f} ({time.time() - start:.0f} s)")
    model.eval()
    return steps


def train(out: Path, examples: Sequence, settings: RerankSettings | None = None, *, trained_on: dict | None = None,
          log=print) -> dict:
    """Fine-tune the cross-encoder on `examples` (`train_classifier.Example`s) and write it to `out`."""
    import torch
    from transformers import AutoModelForSequenceClassification, AutoTokenizer

    from feedback.extract.embed import minilm_path

    settings = settings or RerankSettings()
    torch.manual_seed(settings.seed)  # before the model: it draws the new classification head
    base = minilm_path()
    tokenizer = AutoTokenizer.from_pretrained(base, local_files_only=True)
    model = AutoModelForSequenceClassification.from_pretrained(base, num_labels=len(CLASSES), local_files_only=True)
    start = time.time()
    steps = _fine_tune(model, tokenizer, [pair(e.window, e.sentence) for e in examples],
                       [CLASSES.index(e.label) for e in examples], settings, log)
    out = Path(out)
    out.mkdir(parents=True, exist_ok=True)
    model.save_pretrained(out)
    tokenizer.save_pretrained(out)
    meta = {"version": f"ce-{date.today().isoformat()}", "base": "sentence-transformers/all-MiniLM-L6-v2",
            "classes": list(CLASSES), "settings": asdict(settings), "steps": steps,
            "train_seconds": round(time.time() - start, 1), "sentences": len(examples),
            "trained_on": trained_on or {}}
    (out / CONFIG_NAME).write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def build(out: Path, *, holdout_dev: bool = False, settings: RerankSettings | None = None, log=print) -> dict:
    """Train on the real gold set's train split, its dev split (unless `holdout_dev`) and the
    templated set's dev split; the test split is never read."""
    dev, extra, data = training_data()
    chosen = ([] if holdout_dev else data.dev) + data.train + data.templated
    log(f"{len(chosen)} sentences ({'dev held out' if holdout_dev else 'with dev'}); training...")
    trained_on = {"dev": 0 if holdout_dev else len(dev), "train": len(extra), "templated_sentences": len(data.templated)}
    return train(out, chosen, settings, trained_on=trained_on, log=log)


def recipe_digest(settings: RerankSettings | None = None, rank: int = PACKED_RANK) -> str:
    """A digest of what the shipped tier is built from: its settings, the classes, the packing
    rank, and every training sentence's pair and label, in order."""
    _, _, data = training_data()
    h = hashlib.sha256(json.dumps([asdict(settings or RerankSettings()), list(CLASSES), rank]).encode())
    for e in data.dev + data.train + data.templated:
        h.update(json.dumps([*pair(e.window, e.sentence), e.label]).encode())
    return h.hexdigest()[:16]


def ship(full: Path | None = None, out: Path = PACKAGED, log=print) -> dict:
    """Build the tier on train + dev (or take the build `full`), pack it at `PACKED_RANK` into
    `out` and record its recipe digest there."""
    with tempfile.TemporaryDirectory(prefix="reranker-") as tmp:
        if full is None:
            build(Path(tmp), log=log)
        meta = pack(full or Path(tmp), out, PACKED_RANK)
    meta["recipe"] = recipe_digest()
    (out / CONFIG_NAME).write_text(json.dumps(meta, indent=1) + "\n")
    return meta


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("out", type=Path, nargs="?", help="where to write the full build (not with --ship)")
    parser.add_argument("--ship", action="store_true", help=f"rebuild the shipped, packed tier in {PACKAGED}")
    parser.add_argument("--from-build", type=Path, default=None, help="with --ship: pack this full build instead of training")
    parser.add_argument("--holdout-dev", action="store_true", help="leave the dev split out (to choose the mix on it)")
    for f in fields(RerankSettings):
        parser.add_argument(f"--{f.name.replace('_', '-')}", type=type(f.default), default=f.default)
    args = parser.parse_args(argv)
    settings = RerankSettings(**{f.name: getattr(args, f.name) for f in fields(RerankSettings)})
    if args.ship:
        print(json.dumps(ship(args.from_build), indent=1))
    elif args.out is None:
        parser.error("give the directory to write the build to, or --ship")
    else:
        print(json.dumps(build(args.out, holdout_dev=args.holdout_dev, settings=settings), indent=1))


if __name__ == "__main__":
    main()
