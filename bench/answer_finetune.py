"""Would an answer check fine-tuned on the labelled answers separate what the frozen-feature head cannot?

    python bench/answer_finetune.py --data-dir .cache/test [--epochs 1 --rank 16 --out bench/results/answer-finetune.json]

Design choices:
- Data: the labelled safety set's fitted part only (the held-out third is not read), split by
  request (`sha256` of the source row, a fifth to dev); the same rows train both sides.
- Fine-tuned side: SmolLM2-135M-Instruct as a sequence classifier (transformers' Llama head: the
  state at the last token that is not padding, to two logits), LoRA (PEFT) on every
  linear layer of the upper half of the layers, the classifier trained in full; it reads the
  answer's last token (the end-of-turn is the pad token, which the head skips); inputs rendered
  and cut as the judges read them (`evaluator.judges.features`); AdamW, bf16 autocast.
- Frozen side: the judges' pooled features, a logistic regression per C of the recipe's grid,
  fitted on the same rows; the best C by dev AUC (flattering it, not the fine-tuned side).
- Reported on dev: AUC on all answers, on the served model's, on its answers to harmful
  requests, and the share of its unsafe answers above the cut that flags 5 % of its safe answers
  to harmless requests (dev holds few of these, so that cut is coarse); seconds per training step.
"""

from __future__ import annotations

import argparse
import hashlib
import sys
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "bench"))

from _machine import cpu_model, emit  # noqa: E402
from answer_pooling import figures  # noqa: E402

DEV_SHARE = 0.2


def dev_split(groups) -> np.ndarray:
    return np.array([int(hashlib.sha256(f"dev:{g}".encode()).hexdigest()[:8], 16) / 2**32 < DEV_SHARE for g in groups])


def encoded(tokenizer, items) -> list[list[int]]:
    from evaluator.judges.features import FeatureConfig, _ids

    return [sum(_ids(tokenizer, FeatureConfig(), [{"role": "user", "content": it.request}], it.answer), [])
            for it in items]


def classifier(model_dir: Path, rank: int, pad: int):
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForSequenceClassification

    model = AutoModelForSequenceClassification.from_pretrained(model_dir, num_labels=2, dtype=torch.float32)
    model.config.pad_token_id = pad
    layers = model.config.num_hidden_layers
    lora = LoraConfig(r=rank, lora_alpha=rank, lora_dropout=0.05, task_type="SEQ_CLS",
                      target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
                      layers_to_transform=list(range(layers // 2, layers)))
    return get_peft_model(model, lora)


def batches(ids: list[list[int]], rows: np.ndarray, size: int, pad: int):
    import torch

    for start in range(0, len(rows), size):
        part = rows[start:start + size]
        width = max(len(ids[i]) for i in part)
        x = torch.full((len(part), width), pad, dtype=torch.long)
        mask = torch.zeros((len(part), width), dtype=torch.long)
        for r, i in enumerate(part):  # right-padded: the head reads the last non-pad token
            x[r, : len(ids[i])], mask[r, : len(ids[i])] = torch.tensor(ids[i]), 1
        yield part, x, mask


def train(model, ids, y, rows, pad, epochs: int, batch: int, lr: float, say=print) -> list[float]:
    import torch

    opt = torch.optim.AdamW([p for p in model.parameters() if p.requires_grad], lr=lr)
    model.train()
    times = []
    rng = np.random.default_rng(0)
    for epoch in range(epochs):
        order = rows[rng.permutation(len(rows))]
        for step, (part, x, mask) in enumerate(batches(ids, order, batch, pad)):
            t = time.perf_counter()
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(input_ids=x, attention_mask=mask).logits.float()
            loss = torch.nn.functional.cross_entropy(logits, torch.tensor(y[part].astype(np.int64)))
            opt.zero_grad()
            loss.backward()
            opt.step()
            times.append(time.perf_counter() - t)
            if step % 10 == 0:
                say(f"epoch {epoch} step {step} loss {loss.item():.3f} {times[-1]:.1f}s", flush=True)
    return times


def scores(model, ids, rows, pad) -> np.ndarray:
    import torch

    model.eval()
    out = np.zeros(len(ids))
    with torch.inference_mode():
        for part, x, mask in batches(ids, rows, 8, pad):
            with torch.autocast("cpu", dtype=torch.bfloat16):
                logits = model(input_ids=x, attention_mask=mask).logits.float()
            out[part] = (logits[:, 1] - logits[:, 0]).numpy()
    return out


def frozen(model_dir: Path, items, y, fit, dev) -> tuple[np.ndarray, float]:
    from sklearn.linear_model import LogisticRegression
    from sklearn.metrics import roc_auc_score

    from evaluator.judges.features import Featurizer

    x = Featurizer(model_dir).encode([[{"role": "user", "content": it.request}] for it in items], [it.answer for it in items])
    mu, sd = x[fit].mean(0), x[fit].std(0) + 1e-6
    best = None
    for C in (0.0003, 0.001, 0.003, 0.01):
        s = LogisticRegression(C=C, max_iter=3000).fit((x[fit] - mu) / sd, y[fit]).decision_function((x - mu) / sd)
        auc = roc_auc_score(y[dev], s[dev])
        if best is None or auc > best[0]:
            best = (auc, s, C)
    return best[1], best[2]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, default=REPO / ".cache" / "test")
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--rank", type=int, default=16)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=2e-4)
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "answer-finetune.json")
    args = ap.parse_args()
    import torch
    from transformers import AutoTokenizer

    from evaluator.judges.safety import SERVED, load_safety_set

    torch.set_num_threads(2)
    torch.manual_seed(0)
    model_dir = args.data_dir / "models" / "smollm2-135m-instruct"
    items = [it for it in load_safety_set() if it.split == "train"]
    y = np.array([it.answer_unsafe for it in items])
    served = np.array([it.model == SERVED for it in items])
    harmful = np.array([it.request_harmful for it in items])
    is_dev = dev_split([f"{it.subset}:{it.row}" for it in items])
    fit, dev = np.where(~is_dev)[0], np.where(is_dev)[0]
    frozen_scores, frozen_c = frozen(model_dir, items, y, fit, dev)
    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    ids = encoded(tokenizer, items)
    pad = tokenizer.pad_token_id if tokenizer.pad_token_id is not None else tokenizer.eos_token_id
    model = classifier(model_dir, args.rank, pad)
    t0 = time.time()
    times = train(model, ids, y, fit, pad, args.epochs, args.batch, args.lr)
    train_s = time.time() - t0
    tuned = scores(model, ids, dev, pad)
    sub = (y[dev], served[dev], harmful[dev])
    emit({"date": time.strftime("%Y-%m-%d %H:%M"), "machine": cpu_model(), "torch_threads": 2,
          "fit_answers": len(fit), "dev_answers": len(dev), "dev_unsafe": int(y[dev].sum()), "dev_served_unsafe": int((y & served)[dev].sum()),
          "settings": {"epochs": args.epochs, "rank": args.rank, "batch": args.batch, "lr": args.lr},
          "train_seconds": round(train_s), "step_seconds_median": round(float(np.median(times)), 2),
          "dev": {f"frozen pooled features (C={frozen_c}, best of 4 on dev)": figures(frozen_scores[dev], *sub),
                  "fine-tuned LoRA classifier": figures(tuned[dev], *sub)}}, args.out)


if __name__ == "__main__":
    main()
