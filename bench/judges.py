"""The judges as instruments: speed, and the gate's judged axes on SmolLM2 against the built-in model.

    python bench/judges.py --models-dir .cache/test/models [--prompts N] [--out bench/results/judges.json]

1. Both models answer the gate's advice requests and risky prompts as a gate run does (greedy, the
   default sliders rendered as the chat renders them, `gate.max_new_tokens`); answers are cached in
   the output directory so a re-run only re-scores.
2. Known groups: the helpfulness judge's percentile per prompt, SmolLM2 − built-in, with the gate's
   paired bootstrap (the built-in model answers a roommate question with homework advice: a judge
   that agrees with people must rank SmolLM2 above it). Harmlessness per side at the judge's
   threshold.
3. Validity: relevance (own answer vs another prompt's) for each model, and Spearman ρ of score
   and words.
4. Speed: pairs per second of each judge kind on HH pairs (both answers of a pair scored), and
   seconds per gate side for the judged axes.
"""

from __future__ import annotations

import argparse
import json
import platform
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import numpy as np  # noqa: E402


def answers(model_dir: Path, mode: str, prompts: list[str], cache: Path, max_new_tokens: int) -> list[str]:
    if cache.is_file():
        got = json.loads(cache.read_text())
        if got.get("prompts") == prompts:
            return got["answers"]
    from tools.data.make_safety_set import answer

    t0 = time.time()
    out = [a.strip() for a in answer(model_dir, mode, prompts, max_new_tokens)]
    cache.write_text(json.dumps({"prompts": prompts, "answers": out, "seconds": time.time() - t0}))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--models-dir", type=Path, required=True)
    ap.add_argument("--prompts", type=int, default=0, help="advice requests and risky prompts each (0 = all)")
    ap.add_argument("--max-new-tokens", type=int, default=64)
    ap.add_argument("--hh-dir", type=Path, default=Path(__file__).resolve().parents[2] / "shared/data/hh-rlhf")
    ap.add_argument("--speed-pairs", type=int, default=100)
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results" / "judges.json")
    args = ap.parse_args()

    from chat.builtin import builtin_model_path
    from evaluator.helpfulness import ReferenceScale
    from evaluator.judges.check import pair_hits
    from evaluator.judges.data import load_judge_pairs
    from evaluator.judges.judge import load_judges
    from evaluator.judges.validity import length_correlation, relevance
    from evaluator.moderation import harmlessness, load_risky_prompts
    from evaluator.paired import bootstrap_mean, mean_statistic, paired_bootstrap
    from evaluator.shipped import load_advice_prompts
    from evaluator.text import words

    n = args.prompts or None
    advice, risky = load_advice_prompts()[:n], load_risky_prompts()[:n]
    smol = args.models_dir / "smollm2-135m-instruct"
    cache_dir = args.out.parent / "judges-answers"
    cache_dir.mkdir(parents=True, exist_ok=True)
    sides = {"smollm2": (smol, "instruct"), "builtin": (builtin_model_path(args.models_dir.parent), "steerlm")}
    got = {name: {"advice": answers(d, m, advice, cache_dir / f"{name}-advice.json", args.max_new_tokens),
                  "risky": answers(d, m, risky, cache_dir / f"{name}-risky.json", args.max_new_tokens)}
           for name, (d, m) in sides.items()}

    judges = load_judges(smol)
    helpful, harmless = judges.helpfulness, judges.harmlessness
    scale = ReferenceScale(np.sort(helpful.reference))
    result: dict = {"machine": f"{platform.processor() or platform.machine()}, {len(__import__('os').sched_getaffinity(0))} cores",
                    "date": time.strftime("%Y-%m-%d"), "advice_prompts": len(advice), "risky_prompts": len(risky),
                    "judges": {"helpful": helpful.version, "harmless": harmless.version}, "sides": {}}
    per = {}
    for name, a in got.items():
        t0 = time.time()
        raw = np.asarray(helpful.score(advice, a["advice"]))
        pct = scale.percentile(raw)
        t_help = time.time() - t0
        t0 = time.time()
        harm = harmlessness(risky, a["risky"], harmless)
        t_harm = time.time() - t0
        per[name] = pct
        rel = relevance(lambda p, x: scale.percentile(np.asarray(helpful.score(p, x))), advice, a["advice"], pct)
        result["sides"][name] = {
            "helpfulness": {**bootstrap_mean(pct.tolist()), "words": float(np.mean([words(x) for x in a["advice"]]))},
            "harmlessness": {"safe_share": harm.score, "flagged": harm.unsafe,
                             "examples": [f["answer"][:200] for f in harm.flagged[:5]]},
            "relevance": rel, "length_spearman": length_correlation(raw.tolist(), a["advice"]),
            "seconds": {"helpfulness": round(t_help, 1), "harmlessness": round(t_harm, 1)}}
    known = paired_bootstrap(len(advice), mean_statistic(per["smollm2"], per["builtin"]))
    result["known_groups"] = {"smollm2_minus_builtin": known.as_dict(), "passes": bool(known.low and known.low > 0)}
    pairs, _ = load_judge_pairs(args.hh_dir, ("dev",))
    sample = [(jp.pair.prompt, jp.pair.chosen, jp.pair.rejected) for jp in pairs if jp.axis == "helpful"][: args.speed_pairs]
    t0 = time.time()
    pair_hits(helpful, sample)
    result["speed"] = {"trained_pairs_per_s": round(len(sample) / (time.time() - t0), 2), "pairs": len(sample)}
    args.out.write_text(json.dumps(result, indent=2) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "sides"}, indent=2))
    for name, s in result["sides"].items():
        print(name, json.dumps({k: v for k, v in s.items() if k != "harmlessness"}),
              "harmless", s["harmlessness"]["safe_share"])


if __name__ == "__main__":
    main()
