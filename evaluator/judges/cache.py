"""Features of the judges' training data, computed once and kept on disk (about an hour here).

    python -m evaluator.judges.cache --hh-dir ../shared/data/hh-rlhf --model-dir DIR --out FILE.npz
    python -m evaluator.judges.cache --safety --model-dir DIR --out SAFETY.npz
    python -m evaluator.judges.cache --mismatched --hh-dir DIR --model-dir DIR --out MISMATCHED.npz
    python -m evaluator.judges.cache --requests --model-dir DIR --out REQUESTS.npz
    python -m evaluator.judges.cache --alone --hh-dir DIR --model-dir DIR --out ALONE.npz

The first writes, for every usable HH pair of every split, the chosen and the rejected answer's
features with the pair's axis, split, subset and row; re-running resumes (pairs already in the file
are kept). The second writes the labelled safety set's features: each answer read with its request.
The third writes, for a seeded sample of helpful pairs per split, the features of another
conversation's chosen answer read under this pair's conversation: the answer that ignores the
question, which a helpfulness judge must rate below the one people chose. The fourth writes every
labelled request's state at each depth the request head may read (`build_request_states`). The
fifth writes every helpful pair's answers read after an empty user turn (`Featurizer.alone`), the
baseline of the helpfulness head's "pmi" block; the off-topic file holds its own.
Training (`evaluator.judges.train`) reads all five files.
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


def build(hh_dir: Path, model_dir: Path, out: Path, *, chunk: int = 32, threads: int | None = None,
          axes: tuple[str, ...] = ("helpful", "harmless")) -> Path:
    """`axes` limits the pairs encoded (the harmless head alone needs a third of the hour); a later
    run with both axes adds the rest to the same file."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    pairs, left_out = load_judge_pairs(hh_dir)
    have = _load(out)
    done = {(s, int(r)) for s, r in zip(have.get("subset", []), have.get("row", []))}
    # Test and dev first, then train in a seeded shuffle: training can start on whatever train
    # pairs are ready, and they are a random sample of all of them.
    todo = [jp for jp in pairs if (jp.pair.subset, jp.pair.row) not in done and jp.axis in axes]
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
    answers = np.zeros((len(items), feat.dim), np.float32)
    for n, row in enumerate(rows):
        if row is not None:
            answers[n] = have["answers"][row]
    for start in range(0, len(todo), 32):
        part = todo[start:start + 32]
        answers[part] = feat.encode([[{"role": "user", "content": items[n].request}] for n in part],
                                    [items[n].answer for n in part])
        print(f"encoded {start + len(part)}/{len(todo)}", flush=True)
    np.savez(out, encoder=np.asarray(model_fingerprint(model_dir)), answers=answers,
             id=np.asarray([it.id for it in items]), text_key=np.asarray(text_key),
             split=np.asarray([it.split for it in items]),
             request_key=np.asarray([f"{it.subset}:{it.row}" for it in items]),
             kind=np.asarray([it.kind for it in items]), model=np.asarray([it.model for it in items]),
             answer_unsafe=np.asarray([it.answer_unsafe for it in items]),
             request_harmful=np.asarray([it.request_harmful for it in items]))
    print(f"{len(items)} safety items -> {out}")
    return out


REQUEST_DEPTHS = (2, 4, 6, 8, 10, 12, 15, 20, 25, 30)  # layers the request head may read after (SmolLM2 has 30)


def build_request_states(model_dir: Path, out: Path, *, threads: int | None = None) -> Path:
    """Every labelled request once (the safety set's, by source row, then those labelled without an
    answer), with its label, split and group, and its `RequestEncoder` state at each depth of
    `REQUEST_DEPTHS`: the request head's recipe chooses the depth from these. A few minutes here."""
    import torch

    from evaluator.judges.features import RequestEncoder
    from evaluator.judges.safety import load_safety_requests, load_safety_set

    if threads:
        torch.set_num_threads(threads)
    first: dict[str, object] = {}
    for it in load_safety_set():
        first.setdefault(f"{it.subset}:{it.row}", it)
    extra = load_safety_requests()
    # A request labelled without an answer and later answered in the set is read once, with its
    # first label (the set's answers to it were drawn for the answer head).
    answered_later = {f"{it.subset}:{it.row}" for it in extra if it.subset is not None}
    rows = [(key, it.request, it.request_harmful, it.split) for key, it in sorted(first.items()) if key not in answered_later]
    rows += [(f"extra:{it.id}", it.request, it.request_harmful, it.split) for it in extra]
    encoder = RequestEncoder(model_dir, max(REQUEST_DEPTHS))
    t0 = time.time()
    states = encoder.states([r[1] for r in rows], REQUEST_DEPTHS)
    np.savez(out, encoder=np.asarray(model_fingerprint(model_dir)), depths=np.asarray(REQUEST_DEPTHS), states=states,
             group=np.asarray([r[0] for r in rows]), request=np.asarray([r[1] for r in rows]),
             harmful=np.asarray([r[2] for r in rows], dtype=bool), split=np.asarray([r[3] for r in rows]))
    print(f"{len(rows)} requests x {len(REQUEST_DEPTHS)} depths in {time.time() - t0:.0f} s -> {out}")
    return out


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
            answers = [pool[int(other[i])].chosen for i in part]
            x = feat.encode([pool[i].prompt for i in part], answers)
            for name, values in (("features", list(x)), ("alone", list(feat.alone(answers))), ("split", [split] * len(part)),
                                 ("subset", [pool[i].subset for i in part]), ("row", [pool[i].row for i in part]),
                                 ("other_row", [pool[int(other[i])].row for i in part])):
                cols.setdefault(name, []).extend(values)
            print(f"{split}: {part.stop}/{len(pool)}, {part.stop / (time.time() - t0):.2f} answers/s", flush=True)
    arrays = {k: np.asarray(v) for k, v in cols.items()}
    arrays["features"] = np.stack(cols["features"]).astype(np.float32)
    arrays["alone"] = np.stack(cols["alone"]).astype(np.float32)
    np.savez(out, encoder=np.asarray(model_fingerprint(model_dir)), **arrays)
    return out


def build_alone(hh_dir: Path, model_dir: Path, out: Path, *, threads: int | None = None) -> Path:
    """Every helpful pair's chosen and rejected answer read after an empty user turn, keyed by the
    pair's (subset, row): `train` turns them into the "pmi" block of the pairs' features."""
    import torch

    if threads:
        torch.set_num_threads(threads)
    pairs = [jp.pair for jp in load_judge_pairs(hh_dir)[0] if jp.axis == "helpful"]
    feat = Featurizer(model_dir, FeatureConfig())
    cols: dict[str, list] = {}
    t0 = time.time()
    for start in range(0, len(pairs), 64):
        part = pairs[start: start + 64]
        for name, values in (("chosen_alone", list(feat.alone([p.chosen for p in part]))),
                             ("rejected_alone", list(feat.alone([p.rejected for p in part]))),
                             ("subset", [p.subset for p in part]), ("row", [p.row for p in part])):
            cols.setdefault(name, []).extend(values)
        n = start + len(part)
        print(f"{n}/{len(pairs)} pairs, {n / (time.time() - t0):.2f} pairs/s", flush=True)
    arrays = {k: np.asarray(v) for k, v in cols.items()}
    for k in ("chosen_alone", "rejected_alone"):
        arrays[k] = np.stack(cols[k]).astype(np.float32)
    np.savez(out, encoder=np.asarray(model_fingerprint(model_dir)), **arrays)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--hh-dir", type=Path, default=None)
    ap.add_argument("--safety", action="store_true", help="the labelled safety set instead of the HH pairs")
    ap.add_argument("--mismatched", action="store_true", help="off-topic answers under sampled helpful pairs")
    ap.add_argument("--requests", action="store_true", help="the labelled requests' states for the request head")
    ap.add_argument("--alone", action="store_true", help="helpful pairs' answers after an empty user turn (the pmi block)")
    ap.add_argument("--model-dir", type=Path, required=True)
    ap.add_argument("--out", type=Path, required=True)
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--axes", default="helpful,harmless", help="HH pairs: the axes to encode (resumable)")
    args = ap.parse_args()
    args.out.parent.mkdir(parents=True, exist_ok=True)
    if args.safety:
        build_safety(args.model_dir, args.out, threads=args.threads)
    elif args.requests:
        build_request_states(args.model_dir, args.out, threads=args.threads)
    elif args.hh_dir is None:
        ap.error("--hh-dir is needed for the HH pairs (or pass --safety)")
    elif args.mismatched:
        build_mismatched(args.hh_dir, args.model_dir, args.out, threads=args.threads)
    elif args.alone:
        build_alone(args.hh_dir, args.model_dir, args.out, threads=args.threads)
    else:
        build(args.hh_dir, args.model_dir, args.out, threads=args.threads, axes=tuple(args.axes.split(",")))


if __name__ == "__main__":
    main()
