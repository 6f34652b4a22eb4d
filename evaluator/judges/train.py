"""Train the judges' heads, choose their settings by cross-validation, score test once, write the shipped weights.

    python -m evaluator.judges.train --features .cache/judges/hh_features.npz \
        --safety-features .cache/judges/safety_features.npz --request-states .cache/judges/request_states.npz \
        [--heads helpful,harmless,request] [--out DIR]

The recipe, in order:
1. Helpfulness: Bradley-Terry heads, one per (feature blocks, C) in `GRID`, compared by 5-fold
   cross-validated accuracy on the train and dev pairs together (the features of every train pair
   cost a model pass, and pooling gives each choice more pairs than a dev split alone); the best is
   refitted on all of them and scored once on test. Beside the human pairs, each fit gets
   off-topic pairs (the answer people chose against another conversation's answer, both read under
   this conversation; `evaluator.judges.cache.build_mismatched`): people never had to say that an
   answer should address the question, so HH pairs alone do not teach it. They follow their
   conversation's fold, and their held-out share (relevance) is reported beside the accuracy.
   A judge must rank an answer above another question's answer (`RELEVANCE_FLOOR`, cross-validated)
   before its accuracy counts; the grid also offers the "pmi" block (`features.with_pmi`, from
   `cache --alone`), which reads that directly.
2. Harmlessness: the same on harmless-base pairs, fitted together with the safety set's labelled
   answers of its train part (`evaluator.judges.safety.split_of`; pairs and labelled answers weigh
   the same in total). The judge's unsafe cut is the lowest whose cross-validated false-positive
   rate on safe answers to harmless requests is at most `ANSWER_MAX_FPR`; the guard's cut the same
   on the served model's answers as served (`SERVED_MODEL`). Precision and recall are reported on
   the safety set's held-out part.
3. A request head on the safety set's requests (harmful or not) and the requests labelled without an
   answer (`evaluator.judges.safety.load_safety_requests`, fit only), reading each request's state
   after the served model's first layers (`RequestEncoder`; the depth the shallowest whose
   cross-validated AUC is within `DEPTH_TOLERANCE` of the best); its threshold is the lowest
   whose cross-validated false-positive rate on the set's harmless requests is at most `REQUEST_MAX_FPR`.
The figures (cross-validated and test accuracy with 95 % bootstrap intervals, the safety set's precision and
recall) go into `recipe.json` beside the weights, with one recipe hash per head over the inputs that
head reads; `tests/evaluator/test_judges.py` fails when a head's inputs move without it being
retrained. `--heads` retrains some heads and keeps the others, which must match their hashes.
"""

from __future__ import annotations

import argparse
import hashlib
import json
from dataclasses import asdict, replace
from pathlib import Path
from typing import NamedTuple

import numpy as np

from evaluator.judges.features import SCALARS, FeatureConfig, with_pmi
from evaluator.judges.head import HeadSpec, LinearHead, fit_head, pair_accuracy
from evaluator.judges.judge import WEIGHTS_DIR
from evaluator.judges.safety import SERVED
from evaluator.paired import bootstrap_mean

# Each head's version: bumped when that head is refitted on other data or by another rule. A head is
# retrained alone when only its own inputs moved (`--heads`); each has its own recipe hash.
VERSIONS = {"helpful": "4", "harmless": "4", "request": "5"}
HEADS = tuple(VERSIONS)
BLOCK_CHOICES = (("scalars",), ("mean_last", "scalars"), ("mean_last", "final", "scalars"),
                 ("mean_last", "mean_mid", "final", "scalars"))
C_CHOICES = (0.0003, 0.001, 0.003, 0.01, 0.03)
GRID = [HeadSpec(blocks=b, C=c) for b in BLOCK_CHOICES for c in C_CHOICES]
PMI_SCALES = (1.0, 10.0, 30.0)
HELPFUL_GRID = GRID + [HeadSpec(blocks=b + ("pmi",), C=c, pmi_scale=s)
                       for s in PMI_SCALES for b in BLOCK_CHOICES[1::2] for c in C_CHOICES]
RELEVANCE_FLOOR = 0.90  # a helpfulness spec's CV share of off-topic pairs ranked right, before its accuracy counts
FOLDS = 5
REQUEST_MAX_FPR = 0.05  # the request head's cut: at most this share of harmless requests refused (CV)
DEPTH_TOLERANCE = 0.01  # the request head reads the shallowest depth whose CV AUC is this close to the best
ANSWER_MAX_FPR = 0.05  # the answer cut: at most this share of safe answers to harmless requests flagged (CV)
SERVED_MODEL = SERVED  # the guard's cut is set on the served model's answers as the service draws them
FIT_SPLITS = ("train", "dev")  # settings chosen by cross-validation over these; test scored once
MISMATCH_WEIGHT = 1.0  # an off-topic pair's weight beside a human preference pair


def _interval(hits: np.ndarray) -> dict:
    b = bootstrap_mean(hits.tolist())
    return {"accuracy": round(b["value"], 4), "interval": [round(x, 4) for x in b["ci95"]], "pairs": b["n"]}


def _pairs(data: dict, axis: str, splits: tuple[str, ...]) -> tuple[np.ndarray, np.ndarray]:
    keep = (data["axis"] == axis) & np.isin(data["split"], splits)
    return data["chosen"][keep], data["rejected"][keep]


def _folds(n: int, k: int = FOLDS) -> np.ndarray:
    return np.random.default_rng(0).permutation(n) % k


class Offtopic(NamedTuple):
    """Off-topic pairs: `better` (the chosen answer) beats `worse` (another conversation's answer);
    `pair` is the index of their conversation's HH pair among the pairs they are fitted with."""

    better: np.ndarray
    worse: np.ndarray
    pair: np.ndarray


def offtopic_pairs(data: dict, mismatched: dict | None, splits: tuple[str, ...]) -> Offtopic | None:
    if mismatched is None:
        return None
    keep = (data["axis"] == "helpful") & np.isin(data["split"], splits)
    where = {(s, int(r)): i for i, (s, r) in enumerate(zip(data["subset"][keep], data["row"][keep]))}
    rows = [(j, where[(s, int(r))]) for j, (s, r) in enumerate(zip(mismatched["subset"], mismatched["row"]))
            if (s, int(r)) in where]
    if not rows:
        return None
    mine, theirs = np.array([r[0] for r in rows]), np.array([r[1] for r in rows])
    return Offtopic(data["chosen"][keep][theirs], mismatched["features"][mine], theirs)


def _fit(spec: HeadSpec, hidden: int, better, worse, items, labels, extra: Offtopic | None, use=None) -> LinearHead:
    """A head on human pairs and, when given, the off-topic pairs whose conversation `use` keeps."""
    if extra is None:
        return fit_head(spec, hidden, better, worse, items, labels)
    take = np.ones(len(extra.pair), dtype=bool) if use is None else use[extra.pair]
    weights = np.concatenate([np.ones(len(better)), np.full(int(take.sum()), MISMATCH_WEIGHT)])
    return fit_head(spec, hidden, np.concatenate([better, extra.better[take]]),
                    np.concatenate([worse, extra.worse[take]]), items, labels, pair_weights=weights)


def choose(better: np.ndarray, worse: np.ndarray, hidden: int, axis: str, items=None, labels=None, grid=GRID,
           extra: Offtopic | None = None, say=print) -> tuple[HeadSpec, list]:
    """The spec with the best cross-validated pair accuracy on the non-test pairs (ties: the
    simpler, earlier in the grid), among those whose off-topic pairs reach `RELEVANCE_FLOOR` when
    any does. Labelled items, when given, are in every fold's fit; off-topic pairs are in the folds
    of their conversation."""
    folds = _folds(len(better))
    scores = []
    for spec in grid:
        hits = np.zeros(len(better))
        relevant = np.zeros(len(extra.pair)) if extra is not None else None
        for k in range(FOLDS):
            held = folds == k
            head = _fit(spec, hidden, better[~held], worse[~held], items, labels, extra, ~held)
            hits[held] = pair_accuracy(head, better[held], worse[held])
            if extra is not None:
                out = held[extra.pair]
                relevant[out] = pair_accuracy(head, extra.better[out], extra.worse[out])
        row = {"blocks": list(spec.blocks), "C": spec.C, "cv": round(float(hits.mean()), 4)}
        if "pmi" in spec.blocks:
            row["pmi_scale"] = spec.pmi_scale
        if relevant is not None:
            row["cv_relevance"] = round(float(relevant.mean()), 4)
        scores.append(row)
        say(f"  {axis} {'+'.join(spec.blocks):40s} C={spec.C:<7} x{spec.pmi_scale:<4g} cv {row['cv']:.3f} "
            f"relevance {row.get('cv_relevance', float('nan')):.3f}")
    eligible = [i for i, row in enumerate(scores) if row.get("cv_relevance", 1.0) >= RELEVANCE_FLOOR] or range(len(grid))
    best = max(eligible, key=lambda i: (scores[i]["cv"], -i))
    return grid[best], scores


def with_alone(data: dict, mismatched: dict | None, alone: dict | None) -> tuple[dict, dict | None]:
    """The helpful pairs (and off-topic ones) with the "pmi" block appended from `cache --alone`."""
    keep = data["axis"] == "helpful"
    view = {k: v[keep] for k, v in data.items() if k != "encoder"}
    if alone is None:
        return view, mismatched
    where = {(s, int(r)): i for i, (s, r) in enumerate(zip(alone["subset"], alone["row"]))}
    try:
        rows = np.array([where[(s, int(r))] for s, r in zip(view["subset"], view["row"])])
    except KeyError as e:
        raise SystemExit(f"helpful pair {e} has no answers read alone; run `cache --alone` again") from None
    view["chosen"] = with_pmi(view["chosen"], alone["chosen_alone"][rows])
    view["rejected"] = with_pmi(view["rejected"], alone["rejected_alone"][rows])
    if mismatched is not None:
        mismatched = {**mismatched, "features": with_pmi(mismatched["features"], mismatched["alone"])}
    return view, mismatched


def train_helpful(data: dict, hidden: int, mismatched: dict | None = None, alone: dict | None = None,
                  say=print) -> tuple[LinearHead, dict, dict]:
    """The head, its report, and the helpful pairs it read (with the "pmi" block when `alone` is given)."""
    data, mismatched = with_alone(data, mismatched, alone)
    better, worse = _pairs(data, "helpful", FIT_SPLITS)
    extra = offtopic_pairs(data, mismatched, FIT_SPLITS)
    grid_specs = HELPFUL_GRID if alone is not None else GRID
    spec, grid = choose(better, worse, hidden, "helpful", grid=grid_specs, extra=extra, say=say)
    head = _fit(spec, hidden, better, worse, None, None, extra)
    test = pair_accuracy(head, *_pairs(data, "helpful", ("test",)))
    chosen = grid[grid_specs.index(spec)]
    report = {"spec": asdict(spec), "cv_accuracy": chosen["cv"], "cv_relevance": chosen.get("cv_relevance"),
              "best_cv_accuracy": max(g["cv"] for g in grid), "fit_pairs": len(better),
              "offtopic_pairs": 0 if extra is None else len(extra.pair), "test": _interval(test), "grid": grid}
    held = offtopic_pairs(data, mismatched, ("test",))
    if held is not None:
        report["test_relevance"] = _interval(pair_accuracy(head, held.better, held.worse))
    return head, report, data


def fpr_threshold(probs: np.ndarray, labels: np.ndarray, max_fpr: float) -> float:
    """The lowest probability cut whose false-positive rate on the negatives is at most `max_fpr`."""
    negatives = np.sort(probs[~labels])
    if not len(negatives):
        return 0.5
    k = int(np.floor(max_fpr * len(negatives)))  # negatives allowed at or above the cut
    return float(negatives[len(negatives) - k - 1] + 1e-6) if k < len(negatives) else 0.0


def precision_recall(probs: np.ndarray, labels: np.ndarray, threshold: float) -> dict:
    pred = probs >= threshold
    tp, fp, fn = int((pred & labels).sum()), int((pred & ~labels).sum()), int((~pred & labels).sum())
    return {"threshold": round(threshold, 3), "precision": round(tp / max(1, tp + fp), 3),
            "recall": round(tp / max(1, tp + fn), 3), "positives": int(labels.sum()), "items": int(len(labels)),
            "flagged": int(pred.sum()), "false_positive_rate": round(fp / max(1, int((~labels).sum())), 3)}


def cv_probabilities(spec: HeadSpec, hidden: int, better, worse, items, labels, groups, folds: int = 5) -> np.ndarray:
    """Each labelled item's probability from a head fitted without its group (its request)."""
    keys = np.array([int(hashlib.sha256(str(g).encode()).hexdigest()[:8], 16) % folds for g in groups])
    out = np.zeros(len(items))
    for k in range(folds):
        test = keys == k
        head = fit_head(spec, hidden, better, worse, items[~test], labels[~test])
        out[test] = head.probability(items[test])
    return out


def train_harmless(data: dict, safety: dict, hidden: int, say=print) -> tuple[LinearHead, dict]:
    """Pairs (the less harmful answer higher) and the safety set's train answers, one score."""
    train = safety["split"] == "train"
    items, labels, groups = safety["answers"][train], safety["answer_unsafe"][train].astype(bool), safety["request_key"][train]
    # Pairs say the chosen (less harmful) side scores lower on risk: "better" for the risk score is the rejected.
    pb, pw = _pairs(data, "harmless", FIT_SPLITS)
    # The two kinds of human judgement weigh the same in the fit, whatever their counts: the pairs
    # teach which answer is less harmful, the labelled answers where "unsafe" begins.
    grid = [replace(g, item_weight=len(pb) / max(1, len(items))) for g in GRID]
    spec, scores = choose(pw, pb, hidden, "harmless", items, labels, grid=grid, say=say)
    probs = cv_probabilities(spec, hidden, pw, pb, items, labels, groups)
    harmless_request = ~safety["request_harmful"][train].astype(bool)
    threshold = fpr_threshold(probs[harmless_request], labels[harmless_request], ANSWER_MAX_FPR)
    # The guard judges the served model's answers: its cut holds the same 5 % on the served model's
    # own safe answers to harmless requests, drawn as served (the built-in model's are easy negatives
    # that flatter the pooled rate; greedy answers without the policy read differently).
    served = harmless_request & (safety["model"][train] == SERVED_MODEL)
    guard_threshold = fpr_threshold(probs[served], labels[served], ANSWER_MAX_FPR)
    head = fit_head(spec, hidden, pw, pb, items, labels)
    ob, ow = _pairs(data, "harmless", ("test",))
    test = (head.score(ow) > head.score(ob)).astype(float)
    held = safety["split"] == "held_out"
    held_pr = precision_recall(head.probability(safety["answers"][held]), safety["answer_unsafe"][held].astype(bool),
                               threshold)
    held_guard = precision_recall(head.probability(safety["answers"][held]),
                                  safety["answer_unsafe"][held].astype(bool), guard_threshold)
    held_served = held & (safety["model"] == SERVED_MODEL)
    served_guard = precision_recall(head.probability(safety["answers"][held_served]),
                                    safety["answer_unsafe"][held_served].astype(bool), guard_threshold)
    head.meta["threshold"], head.meta["guard_threshold"] = threshold, guard_threshold
    return head, {"spec": asdict(spec), "cv_accuracy": max(g["cv"] for g in scores), "fit_pairs": len(pb),
                  "test": _interval(test), "safety_held_out": held_pr, "guard_held_out": held_guard,
                  "guard_held_out_served": served_guard, "grid": scores}


def train_request(states: dict) -> tuple[LinearHead, dict]:
    """P(request seeks harmful help) from a request's `RequestEncoder` state (`cache --requests`):
    the safety set's requests and those labelled without an answer. Depth and C by cross-validated
    AUC on the real requests of the fitted part: the shallowest depth within `DEPTH_TOLERANCE` of
    the best depth (fewer layers run before the first token), at its best C. The cut comes from the
    same cross-validation, the figures from the real held-out requests; written requests (split
    "fit") are only fitted on."""
    y, split, groups = states["harmful"].astype(bool), states["split"].astype(str), states["group"].astype(str)
    fit, held = split != "held_out", split == "held_out"
    real = (split == "train")[fit]  # among the fitted rows, the real ones: they set the cut
    hidden = states["states"].shape[2]
    empty = np.zeros((0, hidden), dtype=np.float32)
    grid = []
    for k, depth in enumerate(states["depths"]):
        x = states["states"][:, k]
        for c in C_CHOICES:
            probs = cv_probabilities(HeadSpec(blocks=("state",), C=c), hidden, empty, empty, x[fit], y[fit], groups[fit])
            grid.append({"depth": int(depth), "k": k, "C": c, "cv_auc": _auc(probs[real], y[fit][real]),
                         "probs": probs[real]})
    best = max(g["cv_auc"] for g in grid)
    chosen = min((g for g in grid if g["cv_auc"] >= best - DEPTH_TOLERANCE), key=lambda g: (g["depth"], -g["cv_auc"]))
    # A refused everyday question costs a person their answer, and the answer check still catches
    # what a missed risky request leads to: the cut keeps refusals of harmless requests rare.
    threshold = fpr_threshold(chosen["probs"], y[fit][real], REQUEST_MAX_FPR)
    spec, x = HeadSpec(blocks=("state",), C=chosen["C"]), states["states"][:, chosen["k"]]
    head = fit_head(spec, hidden, empty, empty, x[fit], y[fit])
    head.meta.update(threshold=threshold, depth=chosen["depth"])
    per_depth = {str(d): round(max(g["cv_auc"] for g in grid if g["depth"] == d), 3) for d in states["depths"].tolist()}
    return head, {"spec": asdict(spec), "depth": chosen["depth"], "cv_auc": round(chosen["cv_auc"], 3),
                  "cv_auc_by_depth": per_depth, "fit_requests": int(fit.sum()),
                  "of_which_written": int((split == "fit").sum()),
                  "requests_without_answer": int(sum(g.startswith("extra:") for g in groups)),
                  "held_out": precision_recall(head.probability(x[held]), y[held], threshold)}


def _auc(probs: np.ndarray, labels: np.ndarray) -> float:
    from sklearn.metrics import roc_auc_score

    return float(roc_auc_score(labels, probs)) if 0 < labels.sum() < len(labels) else 0.5


def reference_scores(head: LinearHead, data: dict) -> np.ndarray:
    """Scores of every human answer (chosen and rejected) of the helpful dev split: the percentile scale."""
    b, w = _pairs(data, "helpful", ("dev",))
    return np.concatenate([head.score(b), head.score(w)])


def recipe_inputs(head: str) -> dict:
    """Everything `head`'s shipped weights depend on besides the data's text: change any of it and
    they are stale (the test compares `recipe_hash(head)` with the one in recipe.json)."""
    from evaluator.judges import data
    from evaluator.judges.cache import MISMATCH_SAMPLE, REQUEST_DEPTHS
    from evaluator.judges.safety import SAFETY_REQUESTS, SAFETY_SET

    inputs = {"version": VERSIONS[head], "folds": FOLDS, "features": asdict(FeatureConfig()),
              "safety_set": fingerprint(SAFETY_SET) if SAFETY_SET.is_file() else None}
    if head == "request":
        return {**inputs, "c_choices": C_CHOICES, "request_max_fpr": REQUEST_MAX_FPR, "depths": REQUEST_DEPTHS,
                "depth_tolerance": DEPTH_TOLERANCE,
                "safety_requests": fingerprint(SAFETY_REQUESTS) if SAFETY_REQUESTS.is_file() else None}
    inputs.update({"grid": [_spec_inputs(g) for g in GRID], "fit_splits": FIT_SPLITS, "shares": data.SHARES,
                   "reserved_below": data.RESERVED_BELOW,
                   "gate_rows": hashlib.sha256(json.dumps(sorted(data.gate_rows())).encode()).hexdigest()[:16]})
    if head == "helpful":
        inputs.pop("safety_set")
        return {**inputs, "grid": [_spec_inputs(g) for g in HELPFUL_GRID], "relevance_floor": RELEVANCE_FLOOR,
                "offtopic": {"weight": MISMATCH_WEIGHT, "sample": MISMATCH_SAMPLE}}
    return {**inputs, "answer_max_fpr": ANSWER_MAX_FPR, "served_model": SERVED_MODEL}


def _spec_inputs(spec: HeadSpec) -> dict:
    """A grid entry as the recipe hash reads it (`pmi_scale` only where there is a pmi block, so
    the hashes of heads without one did not move when it came)."""
    d = asdict(spec)
    if "pmi" not in spec.blocks:
        d.pop("pmi_scale")
    return d


def recipe_hash(head: str) -> str:
    return hashlib.sha256(json.dumps(recipe_inputs(head), sort_keys=True).encode()).hexdigest()[:16]


def fingerprint(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()[:16]


def _load_npz(path: Path | None) -> dict | None:
    if path is None:
        return None
    with np.load(path, allow_pickle=False) as f:
        return {k: f[k] for k in f.files}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--features", type=Path, default=None, help="HH pairs (cache); the helpful and harmless heads")
    ap.add_argument("--safety-features", type=Path, default=None, help="the safety set (cache --safety)")
    ap.add_argument("--mismatched", type=Path, default=None, help="off-topic answers (cache --mismatched)")
    ap.add_argument("--request-states", type=Path, default=None, help="labelled requests (cache --requests)")
    ap.add_argument("--alone", type=Path, default=None, help="helpful answers read alone (cache --alone): the pmi block")
    ap.add_argument("--heads", default=",".join(HEADS), help="which heads to retrain; the others are kept as shipped")
    ap.add_argument("--out", type=Path, default=WEIGHTS_DIR)
    args = ap.parse_args()
    heads = [h for h in args.heads.split(",") if h]
    if not set(heads) <= set(HEADS):
        ap.error(f"--heads: choose from {', '.join(HEADS)}")
    if ({"helpful", "harmless"} & set(heads) and args.features is None) or \
            ("harmless" in heads and args.safety_features is None) or ("request" in heads and args.request_states is None):
        ap.error("the helpful and harmless heads need --features, the harmless head --safety-features, "
                 "the request head --request-states")
    data, safety, states = _load_npz(args.features), _load_npz(args.safety_features), _load_npz(args.request_states)
    recipe = json.loads((args.out / "recipe.json").read_text()) if (args.out / "recipe.json").is_file() else {}
    kept = [h for h in HEADS if h not in heads]
    stale = [h for h in kept if recipe.get("recipe_hashes", {}).get(h) != recipe_hash(h)]
    if stale:
        raise SystemExit(f"the shipped {', '.join(stale)} head(s) were trained by another recipe or on other data; "
                         f"retrain them too (--heads {','.join(heads + stale)})")
    encoder = str((data or safety or states)["encoder"])
    if recipe.get("encoder") not in (None, encoder) and kept:
        raise SystemExit(f"the shipped heads read {recipe['encoder']}, these features {encoder}; retrain every head")
    dim = data["chosen"].shape[1] if data is not None else safety["answers"].shape[1] if safety is not None else 0
    hidden = (dim - len(SCALARS)) // 3
    recipe.update(encoder=encoder, recipe_hashes={**recipe.get("recipe_hashes", {}),
                                                 **{h: recipe_hash(h) for h in heads}})
    _train_heads(heads, data, safety, states, _load_npz(args.mismatched), _load_npz(args.alone), hidden, recipe, args.out)
    for head in {"helpful", "harmless"} & set(heads):  # which HH features file each head was fitted on
        recipe[head]["features_file"] = fingerprint(args.features)
    recipe.pop("version", None), recipe.pop("recipe_hash", None)
    (args.out / "recipe.json").write_text(json.dumps(recipe, indent=2) + "\n")


def _train_heads(heads: list[str], data: dict | None, safety: dict | None, states: dict | None,
                 mismatched: dict | None, alone: dict | None, hidden: int, recipe: dict, out: Path) -> None:
    meta = {"encoder": recipe["encoder"], "features": asdict(FeatureConfig())}
    if "helpful" in heads:
        head, recipe["helpful"], read = train_helpful(data, hidden, mismatched, alone)
        head.meta.update(meta, version=VERSIONS["helpful"], validated={"hh_helpful_test": recipe["helpful"]["test"]})
        head.save(out / "helpful")
        np.savez(out / "helpful_reference.npz", scores=reference_scores(head, read))
    if "harmless" in heads:
        head, recipe["harmless"] = train_harmless(data, safety, hidden)
        head.meta.update(meta, version=VERSIONS["harmless"],
                         validated={"hh_harmless_test": recipe["harmless"]["test"],
                                    "safety_held_out": recipe["harmless"]["safety_held_out"]})
        head.save(out / "harmless")
    if "request" in heads:
        head, recipe["request"] = train_request(states)
        head.meta.update(meta, version=VERSIONS["request"])
        head.save(out / "request")
    for axis in heads:
        print(axis, json.dumps({k: v for k, v in recipe[axis].items() if k != "grid"}))


if __name__ == "__main__":
    main()
