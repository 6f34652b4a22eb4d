"""Features of the judges' training data, computed once and kept on disk (about an hour here).

    python -m evaluator.judges.cache --hh-dir ../shared/data/hh-rlhf --model-dir DIR --out FILE.npz
    python -m evaluator.judges.cache --safety --model-dir DIR --out SAFETY.npz
    python -m evaluator.judges.cache --mismatched --hh-dir DIR --model-dir DIR --out MISMATCHED.npz

The first writes, for every usable HH pair of every split, the chosen and the rejected answer's
features with the pair's axis, split, subset and row; re-running resumes (pairs already in the file
are kept). The second writes the labelled safety set's features: each answer read with its request,
and each request alone, and the requests labelled without an answer. The third writes, for a
seeded sample of helpful pairs per split, the features of another conversation's chosen answer
read under this pair's conversation: the answer that ignores the question, which a helpfulness
judge must rate below the one people chose.
Training (`evaluator.judges.train`) reads all three files.
"""

from __future__ import annotations

import argparse
import random
import time
from pathlib import Path

import numpy as np

from evaluator.judges.data import load_judge_pairs
from evaluator.judges.features import FeatureConfig, Featurizer, model_fingerprint


def _load(path: Path) -> dict[str, np.ndarray]:
    if not path.is_file():
        return {}
    with np.load(path, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


def build(hh_dir: Path, model_dir: Path, out: Path, *, chunk: int = 32, threads: int | None = None) -> Path:
    import torch

    if threads:
        torch.set_num_threads(threads)
    pairs, left_out = load_judge_pairs(hh_dir)
    have = _load(out)
    done = {(s, int(r)) for s, r in zip(have.get("subset", []), have.get("row", []))}
    # Test and dev first, then train in a seeded shuffle: training can start on whatever train
    # pairs are ready, and they are a random sample of all of them.
    todo = [jp for jp in pairs if (jp.pair.subset, jp.pair.row) not in done]
    random.Random(0).shuffle(todo)
    todo.sort(key=lambda jp: {"test": 0, "dev": 1, "train": 2}[jp.split])
    print(f"{len(pairs)} pairs ({len(done)} cached, {len(todo)} to go); left out: {left_out}", flush=True)
    feat = Featurizer(model_dir, FeatureConfig())
    cols = {k: list(v) for k, v in have.items() if k != "encoder"}
    t0 = time.time()
    for start in range(0, len(todo), chunk):
        part = todo[start: start + chunk]
        prompts = [jp.pair.prompt for jp in part]
        chosen = feat.encode(prompts, [jp.pair.chosen for jp in part])
        rejected = feat.encode(prompts, [jp.pair.rejected for jp in part])
        for name, values in (("chosen", chosen), ("rejected", rejected), ("axis", [jp.axis for jp in part]),
                             ("split", [jp.split for jp in part]), ("subset", [jp.pair.subset for jp in part]),
                             ("row", [jp.pair.row for jp in part])):
            cols.setdefault(name, []).extend(list(values))
        _save(out, cols, model_fingerprint(model_dir))
        n = start + len(part)
        print(f"{n}/{len(todo)} pairs, {n / (time.time() - t0):.2f} pairs/s", flush=True)
    return out


def _save(out: Path, cols: dict[str, list], fingerprint: str) -> None:
    tmp = out.with_suffix(".tmp.npz")
    arrays = {k: np.asarray(v) for k, v in cols.items() if k != "encoder"}
    arrays["chosen"] = np.stack(cols["chosen"]).astype(np.float32)
    arrays["rejected"] = np.stack(cols["rejected"]).astype(np.float32)
    np.savez(tmp, encoder=np.asarray(fingerprint), **arrays)
    tmp.replace(out)


def build_safety(model_dir: Path, out: Path, *, threads: int | None = None) -> Path:
    """Features of every labelled row; rows already in `out` with the same id and text are kept
    (the labels are always read afresh from the set)."""
    import hashlib

    import torch

    from evaluator.judges.safety import load_safety_set

    if threads:
        torch.set_num_threads(threads)
    items = load_safety_set()
    text_key = [hashlib.sha256(f"{it.request}\0{it.answer}".encode()).hexdigest()[:16] for it in items]
    have = _load(out)
    if have and str(have["encoder"]) != model_fingerprint(model_dir):
        have = {}  # another encoder's features: all again
    index = {(str(i), str(t)): n for n, (i, t) in enumerate(zip(have.get("id", []), have.get("text_key", [])))}
    rows = [index.get((it.id, key)) for it, key in zip(items, text_key)]
    todo = [n for n, row in enumerate(rows) if row is None]
    print(f"{len(items)} safety items, {len(items) - len(todo)} cached, {len(todo)} to encode", flush=True)
    feat = Featurizer(model_dir, FeatureConfig())
    answers, requests = np.zeros((len(items), feat.dim), np.float32), np.zeros((len(items), feat.dim), np.float32)
    for n, row in enumerate(rows):
        if row is not None:
            answers[n], requests[n] = have["answers"][row], have["requests"][row]
    for start in range(0, len(todo), 32):
        part = todo[start:start + 32]
        conversations = [[{"role": "user", "content": items[n].request}] for n in part]
        answers[part] = feat.encode(conversations, [items[n].answer for n in part])
        requests[part] = feat.encode(conversations, [""] * len(part))
        print(f"encoded {start + len(part)}/{len(todo)}", flush=True)
    extra = _extra_requests(feat, have)
    np.savez(out, encoder=np.asarray(model_fingerprint(model_dir)), answers=answers, requests=requests, **extra,
             id=np.asarray([it.id for it in items]), text_key=np.asarray(text_key),
             split=np.asarray([it.split for it in items]),
             request_key=np.asarray([f"{it.subset}:{it.row}" for it in items]),
             kind=np.asarray([it.kind for it in items]), model=np.asarray([it.model for it in items]),
             answer_unsafe=np.asarray([it.answer_unsafe for it in items]),
             request_harmful=np.asarray([it.request_harmful for it in items]))
    print(f"{len(items)} safety items -> {out}")
    return out


def _extra_requests(feat: Featurizer, have: dict) -> dict[str, np.ndarray]:
    """Features of the requests labelled without an answer (`evaluator.judges.safety.load_safety_requests`),
    each read alone as the request head reads a request; kept by (id, text) like the set's rows."""
    from evaluator.judges.safety import load_safety_requests

    items = load_safety_requests()
    index = {(str(i), str(t)): n for n, (i, t) in enumerate(zip(have.get("extra_id", []), have.get("extra_request", [])))}
    features = np.zeros((len(items), feat.dim), np.float32)
    todo = []
    for n, it in enumerate(items):
        row = index.get((it.id, it.request))
        if row is None:
            todo.append(n)
        else:
            features[n] = have["extra_requests"][row]
    for start in range(0, len(todo), 32):
        part = todo[start:start + 32]
        features[part] = feat.encode([[{"role": "user", "content": items[n].request}] for n in part], [""] * len(part))
        print(f"encoded {start + len(part)}/{len(todo)} requests without answers", flush=True)
    return {"extra_requests": features, "extra_id": np.asarray([it.id for it in items], dtype=str),
            "extra_request": np.asarray([it.request for it in items], dtype=str),
            "extra_request_harmful": np.asarray([it.request_harmful for it in items], dtype=bool),
            "extra_split": np.asarray([it.split for it in items], dtype=str)}


MISMATCH_SAMPLE = {"train": 450, "dev": 150, "test": 200}  # helpful pairs per split that get an off-topic answer


def build_mismatched(hh_dir: Path, model_dir: Path, out: Path, *, threads: int | None = None) -> Path:
    """Per sampled helpful pair: another pair's chosen answer (same split, seeded derangement) read
    under this pair's conversation; rows are keyed by this pair's (subset, row)."""
    import torch

    from evaluator.judges.validity import derangement

    if threads:
        torch.set_num_threads(threads)
    pairs, _ = load_judge_pairs(hh_dir)
    feat = Featurizer(model_dir, FeatureConfig())
    cols: dict[str, list] = {}
    for split, n in MISMATCH_SAMPLE.items():
        pool = [jp.pair for jp in pairs if jp.axis == "helpful" and jp.split == split]
        pool = [pool[i] for i in sorted(random.Random(f"mismatch:{split}").sample(range(len(pool)), min(n, len(pool))))]
        other = derangement(len(pool), seed=1)
        t0 = time.time()
        for start in range(0, len(pool), 32):
            part = range(start, min(start + 32, len(pool)))
            x = feat.encode([pool[i].prompt for i in part], [pool[int(other[i])].chosen for i in part])
            for name, values in (("features", list(x)), ("split", [split] * len(part)),
                                 ("subset", [pool[i].subset for i in part]), ("row", [pool[i].row for i in part]),
                                 ("other_row", [pool[int(other[i])].row for i in part])):
                cols.setdefault(name, []).extend(values)
            print(f"{split}: {part.stop}/{len(pool)}, {part.stop / (time.time() - t0):.2f} answers/s", flush=True)
    arrays = {k: np.asarray(v) for k, v in cols.items()}
    arrays["features"] = np.stack(cols["features"]).astype(np.float32)
    np.savez(out, encoder=np.asarray(model_fingerprint(model_dir)), **arrays)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hh-dir", type=Path, default=None)
    ap.add_argument("--safety", action="store_true", help="the labelled safety set instead of the HH pairs")
    ap.add_argument("--mismatched", action="store_true", help="off-topic answers under sampled helpful pairs")
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--threads", type=int, default=None)
    args = ap.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.safety:
        build_safety(args.model_dir, args.out, threads=args.threads)
    elif args.hh_dir is None:
        ap.error("--hh-dir is needed for the HH pairs (or pass --safety)")
    elif args.mismatched:
        build_mismatched(args.hh_dir, args.model_dir, args.out, threads=args.threads)
    else:
        build(args.hh_dir, args.model_dir, args.out, threads=args.threads)


if __name__ == "__main__":
    main()
