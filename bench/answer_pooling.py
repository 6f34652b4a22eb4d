"""Does the answer check gain from reading each answer token rather than their mean?

    python bench/answer_pooling.py --data-dir .cache/test [--out bench/results/answer-pooling.json]

Design choices:
- The labelled safety set's answers of the fitted part only (the held-out third is not read), read
  by the served base model as the judges read them (`evaluator.judges.features`: the same
  rendering, cut and bf16 autocast), keeping every answer token's last-layer state.
- Compared, each by 5-fold cross-validation with the folds by request the recipe uses:
  a logistic regression on the pooled features the judges ship (the recipe's C grid), against a
  per-token linear score pooled over the answer (mean, soft maximum, or attention weights), fitted
  by Adam with an L2 penalty. Labelled answers only, no HH pairs, for both.
- Reported: AUC on all answers, on the served model's answers, on its answers to harmful
  requests, and the share of its unsafe answers stopped at the guard's rule (the cut that flags at
  most 5 % of its safe answers to harmless requests, from the same cross-validation).
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

POOLS = ("mean", "lse", "attn")
L2 = (1e-3, 1e-2)
C_GRID = (0.0003, 0.001, 0.003)


def token_states(model_dir: Path, items) -> tuple[np.ndarray, list[np.ndarray]]:
    """Pooled features and per-token last-layer states (float16) of each item's answer."""
    import torch

    from evaluator.judges.features import Featurizer, _ids

    f = Featurizer(model_dir)
    convs = [[{"role": "user", "content": it.request}] for it in items]
    pooled = f.encode(convs, [it.answer for it in items])
    tokens = []
    with torch.inference_mode():
        for conv, it in zip(convs, items):
            p, a = _ids(f.tokenizer, f.config, conv, it.answer)
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=f.config.bf16):
                last = f.model.model(input_ids=torch.tensor([p + a])).last_hidden_state
            tokens.append(last[0, len(p):].float().numpy().astype(np.float16))
    return pooled, tokens


def pooled_logit(x, seg, n, w, b, v, pool):
    import torch

    s = x @ w + b
    count = torch.bincount(seg, minlength=n).float()
    if pool == "mean":
        return torch.zeros(n).index_add(0, seg, s) / count
    top = torch.zeros(n).index_reduce(0, seg, s if pool == "lse" else x @ v, "amax", include_self=False)
    if pool == "lse":  # log-mean-exp: a soft maximum over the answer's tokens
        return top + torch.log(torch.zeros(n).index_add(0, seg, torch.exp(s - top[seg])) / count)
    e = torch.exp(x @ v - top[seg])  # attention: a softmax over tokens of a second linear score
    return torch.zeros(n).index_add(0, seg, e * s) / torch.zeros(n).index_add(0, seg, e)


def fit_tokens(tokens, y, idx, pool, l2, epochs=300):
    import torch

    torch.manual_seed(0)
    flat = np.concatenate([tokens[i] for i in idx]).astype(np.float32)
    mu, sd = flat.mean(0), flat.std(0) + 1e-6
    x = torch.tensor((flat - mu) / sd)
    seg = torch.tensor(np.repeat(np.arange(len(idx)), [len(tokens[i]) for i in idx]))
    target = torch.tensor(y[idx].astype(np.float32))
    w, v = torch.zeros(x.shape[1], requires_grad=True), torch.zeros(x.shape[1], requires_grad=True)
    b = torch.zeros(1, requires_grad=True)
    opt = torch.optim.Adam([w, v, b], lr=0.01)
    for _ in range(epochs):
        opt.zero_grad()
        logit = pooled_logit(x, seg, len(idx), w, b, v, pool)
        loss = torch.nn.functional.binary_cross_entropy_with_logits(logit, target) + l2 * (w.square().sum() + v.square().sum())
        loss.backward()
        opt.step()

    def predict(rows):
        flat = (np.concatenate([tokens[i] for i in rows]).astype(np.float32) - mu) / sd
        seg = torch.tensor(np.repeat(np.arange(len(rows)), [len(tokens[i]) for i in rows]))
        with torch.no_grad():
            return pooled_logit(torch.tensor(flat), seg, len(rows), w, b, v, pool).numpy()
    return predict


def fit_pooled(pooled, y, idx, C):
    from sklearn.linear_model import LogisticRegression

    mu, sd = pooled[idx].mean(0), pooled[idx].std(0) + 1e-6
    clf = LogisticRegression(C=C, max_iter=3000).fit((pooled[idx] - mu) / sd, y[idx])
    return lambda rows: clf.decision_function((pooled[rows] - mu) / sd)


def cross_validated(fit, groups, n) -> np.ndarray:
    keys = np.array([int(hashlib.sha256(g.encode()).hexdigest()[:8], 16) % 5 for g in groups])
    out = np.zeros(n)
    for k in range(5):
        out[keys == k] = fit(np.where(keys != k)[0])(np.where(keys == k)[0])
    return out


def figures(score, y, served, harmful) -> dict:
    from sklearn.metrics import roc_auc_score

    negatives = np.sort(score[served & ~harmful & ~y])
    cut = negatives[len(negatives) - int(0.05 * len(negatives)) - 1] + 1e-9
    caught = score[served & y] >= cut
    return {"auc": round(roc_auc_score(y, score), 3), "auc_served": round(roc_auc_score(y[served], score[served]), 3),
            "auc_served_harmful_requests": round(roc_auc_score(y[served & harmful], score[served & harmful]), 3),
            "served_unsafe_stopped": [int(caught.sum()), int(len(caught))]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, default=REPO / ".cache" / "test")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "answer-pooling.json")
    args = ap.parse_args()
    import torch

    from evaluator.judges.safety import SERVED, load_safety_set

    torch.set_num_threads(2)
    items = [it for it in load_safety_set() if it.split == "train"]
    t0 = time.time()
    pooled, tokens = token_states(args.data_dir / "models" / "smollm2-135m-instruct", items)
    read_s = time.time() - t0
    y = np.array([it.answer_unsafe for it in items])
    served = np.array([it.model == SERVED for it in items])
    harmful = np.array([it.request_harmful for it in items])
    groups = [f"{it.subset}:{it.row}" for it in items]
    rows = {}
    for C in C_GRID:
        rows[f"pooled features, C={C}"] = cross_validated(lambda idx: fit_pooled(pooled, y, idx, C), groups, len(y))
    for pool in POOLS:
        for l2 in L2:
            rows[f"per token, {pool}, l2={l2}"] = cross_validated(lambda idx: fit_tokens(tokens, y, idx, pool, l2),
                                                                   groups, len(y))
    emit({"date": time.strftime("%Y-%m-%d"), "machine": cpu_model(), "torch_threads": 2,
          "answers": len(items), "unsafe": int(y.sum()), "served": int(served.sum()), "reading_s": round(read_s),
          "cross_validated": {k: figures(v, y, served, harmful) for k, v in rows.items()}}, args.out)


if __name__ == "__main__":
    main()
