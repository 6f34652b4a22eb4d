"""Train the helpfulness judge's cross-encoder (`crossencoder.py`) and choose its weight beside the head.

`python -m evaluator.judges.train --heads helpful …` runs it after fitting the head (about 35 min on
2 cores). The recipe:
1. Fine-tune the cross-encoder on the train split's helpful pairs (and its off-topic pairs when
   `CrossEncoderSettings.offtopic`); dev and test are never trained on.
2. On dev, the head refitted on train alone (so that neither reader has seen dev) and the
   cross-encoder score every pair and every off-topic pair; the judge's score is
   head + w·(σ_head/σ_ce)·cross-encoder, w in `MIX_CHOICES` (each reader in units of its spread
   over dev's human answers). The w with the best dev accuracy among those whose dev relevance
   reaches `RELEVANCE_FLOOR` wins (ties: the smaller); w = 0 is the head alone.
3. Test is scored once, with the shipped head (fitted on train and dev) and the chosen w; the
   reference scale (human dev answers) is scored the same way.
"""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path

import numpy as np

from evaluator.judges.cache import offtopic_sample
from evaluator.judges.crossencoder import CrossEncoder, CrossEncoderSettings, fine_tune
from evaluator.judges.data import load_judge_pairs
from evaluator.judges.head import LinearHead
from evaluator.judges.judge import CROSSENCODER_DIR
from evaluator.judges.pairs import (
    RELEVANCE_FLOOR,
    fit_with_offtopic,
    interval,
    offtopic_pairs,
    pair_features,
    with_alone,
)

MIX_CHOICES = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
SETTINGS = CrossEncoderSettings()


def _key(subset, row) -> str:
    return f"{subset}:{int(row)}"


def _texts(hh_dir: Path, split: str):
    """(HH pairs, off-topic pairs) of `split` as (conversation, better, worse), keyed by (subset, row)."""
    pairs, _ = load_judge_pairs(hh_dir, (split,))
    hh = {_key(p.pair.subset, p.pair.row): (p.pair.prompt, p.pair.chosen, p.pair.rejected)
          for p in pairs if p.axis == "helpful"}
    off = {_key(mine.subset, mine.row): (mine.prompt, mine.chosen, other.chosen)
           for mine, other in offtopic_sample(pairs, split)}
    return hh, off


def _head_scores(head: LinearHead, view: dict, mismatched: dict, split: str) -> tuple[dict, dict]:
    """{key: (better score, worse score)} for the HH and the off-topic pairs of `split`."""
    keep = (view["axis"] == "helpful") & (view["split"] == split)
    keys = [_key(s, r) for s, r in zip(view["subset"][keep], view["row"][keep])]
    hh = dict(zip(keys, zip(head.score(view["chosen"][keep]), head.score(view["rejected"][keep]))))
    where = dict(zip(keys, np.flatnonzero(keep)))
    k = mismatched["split"] == split
    mkeys = [_key(s, r) for s, r in zip(mismatched["subset"][k], mismatched["row"][k])]
    better = head.score(view["chosen"][[where[m] for m in mkeys]])
    return hh, dict(zip(mkeys, zip(better, head.score(mismatched["features"][k]))))


def _ce_scores(ce: CrossEncoder, texts: dict) -> dict:
    keys = list(texts)
    b = ce.score([texts[k][0] for k in keys], [texts[k][1] for k in keys])
    w = ce.score([texts[k][0] for k in keys], [texts[k][2] for k in keys])
    return dict(zip(keys, zip(b, w)))


def _hits(head: dict, ce: dict, k: float) -> np.ndarray:
    return np.array([(h[0] + k * c[0]) > (h[1] + k * c[1]) for h, c in ((head[key], ce[key]) for key in head)], float)


def _spread(scores: dict) -> float:
    return float(np.std([s for pair in scores.values() for s in pair]))


def choose_mix(head_hh: dict, head_off: dict, ce_hh: dict, ce_off: dict, say=print) -> tuple[float, float, list]:
    """(w, k = w·σ_head/σ_ce, grid): the module docstring's step 2."""
    unit = _spread(head_hh) / _spread(ce_hh)
    grid = []
    for w in MIX_CHOICES:
        row = {"w": w, "dev": round(float(_hits(head_hh, ce_hh, w * unit).mean()), 4),
               "dev_relevance": round(float(_hits(head_off, ce_off, w * unit).mean()), 4)}
        grid.append(row)
        say(f"  w {w:<5g} dev {row['dev']:.4f} relevance {row['dev_relevance']:.4f}")
    eligible = [r for r in grid if r["dev_relevance"] >= RELEVANCE_FLOOR] or grid
    best = max(eligible, key=lambda r: (r["dev"], -r["w"]))
    return best["w"], best["w"] * unit, grid


def attach(hh_dir: Path, data: dict, mismatched: dict, alone: dict, head: LinearHead, out: Path,
           settings: CrossEncoderSettings = SETTINGS, say=print) -> dict:
    """Train the cross-encoder, choose its weight, score test once; write it beside `head` (already
    in `out`) and return its report. Rewrites `out`'s helpful weights' metadata and reference scale."""
    view, m = with_alone(data, mismatched, alone)
    train_hh, train_off = _texts(hh_dir, "train")
    ce = fine_tune(list(train_hh.values()) + (list(train_off.values()) if settings.offtopic else []), settings, log=say)
    ce.save(out / CROSSENCODER_DIR)
    b, w = pair_features(view, "helpful", ("train",))
    alone_head = fit_with_offtopic(head.spec, head.hidden, b, w, None, None, offtopic_pairs(view, m, ("train",)))
    dev_hh, dev_off = _texts(hh_dir, "dev")
    ce_dev_hh, ce_dev_off = _ce_scores(ce, dev_hh), _ce_scores(ce, dev_off)
    w, k, grid = choose_mix(*_head_scores(alone_head, view, m, "dev"), ce_dev_hh, ce_dev_off, say=say)
    test_hh, test_off = _texts(hh_dir, "test")
    head_hh, head_off = _head_scores(head, view, m, "test")
    ce_hh, ce_off = _ce_scores(ce, test_hh), _ce_scores(ce, test_off)
    report = {"settings": asdict(settings), "train_pairs": len(train_hh), "train_offtopic": len(train_off) if settings.offtopic else 0,
              "w": w, "k": round(k, 6), "grid": grid, "test": interval(_hits(head_hh, ce_hh, k)),
              "test_relevance": interval(_hits(head_off, ce_off, k)),
              "test_crossencoder_alone": interval(_hits({x: (0, 0) for x in ce_hh}, ce_hh, 1.0))}
    head.meta["crossencoder"] = {"k": k, "w": w}
    head.save(out / "helpful")
    dev_head, _ = _head_scores(head, view, m, "dev")
    np.savez(out / "helpful_reference.npz",
             scores=np.array([h + k * c for key in dev_head for h, c in zip(dev_head[key], ce_dev_hh[key])]))
    return report
