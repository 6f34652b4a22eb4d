"""The helpfulness judge's relevance check, item by item, read against people who read the answers.

    .venv/bin/python bench/judge_relevance.py [--model-dir DIR] [--out bench/results/judge-relevance.json]

The check (`evaluator.judges.validity.relevance`): SmolLM2's answer to each of the gate's 243 advice
requests against its answer to another request (the same seeded derangement), both scored under
the first; the judge is right when the answer to this request scores higher. A miss can be the
judge's or the model's (an answer that does not address its own request). So two readers marked,
blind to the judge, the model and which answer was whose, whether each answer addresses the
request (`tools/annotation/records/relevance/`: brief, items, labels; 60 items read by both).
Reported: the share over all pairs, the share where the reader says the own answer addresses the
request and the other does not (the pairs the check is about), and the readers' agreement.
The answers are `bench/judges.py`'s cached ones (greedy, 64 new tokens, no safety policy).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

ANSWERS = REPO / "bench/results/judges-all-prompts/judges-answers/smollm2-advice.json"
READINGS = REPO / "tools/annotation/records/relevance/readings.jsonl"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, default=REPO / ".cache/test/models/smollm2-135m-instruct")
    ap.add_argument("--out", type=Path, default=REPO / "bench/results/judge-relevance.json")
    args = ap.parse_args()

    from sklearn.metrics import cohen_kappa_score

    from evaluator.judges.judge import load_judges
    from evaluator.judges.validity import relevance_scores
    from evaluator.paired import bootstrap_mean
    from evaluator.shipped import load_advice_prompts

    prompts, got = load_advice_prompts(), json.loads(ANSWERS.read_text())
    if got["prompts"] != prompts:
        raise SystemExit(f"{ANSWERS} holds answers to other prompts; run bench/judges.py first")
    answers = got["answers"]
    helpful = load_judges(args.model_dir).helpfulness
    t0 = time.time()
    own, other = relevance_scores(helpful.score, prompts, answers)  # the gate's check, item by item
    seconds = time.time() - t0
    readings = {r["id"]: r for r in map(json.loads, READINGS.read_text().splitlines())}
    right = own > other
    confirmed = []  # pairs the readers say the check is about: own answer on the request, the other not
    for i in range(len(prompts)):
        r = readings[i]
        if r["own"] == "A" and r["A"] != answers[i] or r["own"] == "B" and r["B"] != answers[i]:
            raise SystemExit(f"reading {i} is of another answer than the cached one")
        label = next(x for x in r["labels"] if x["annotator"] == r["primary"])
        mine, theirs = label[r["own"]], label["B" if r["own"] == "A" else "A"]
        if mine == "yes" and theirs == "no":
            confirmed.append(bool(right[i]))
    both = [r for r in readings.values() if len(r["labels"]) == 2]
    a = [x["labels"][0][s] for x in both for s in "AB"]
    b = [x["labels"][1][s] for x in both for s in "AB"]
    result = {"date": time.strftime("%Y-%m-%d"), "judge": helpful.version, "pairs": len(prompts),
              "share": bootstrap_mean(right.astype(float).tolist()),
              "reader_confirmed": {**bootstrap_mean([float(x) for x in confirmed]), "misses": confirmed.count(False)},
              "readers": {"items_read_twice": len(both), "kappa": round(float(cohen_kappa_score(a, b)), 3),
                          "agreement": round(sum(x == y for x, y in zip(a, b)) / len(a), 3)},
              "seconds": round(seconds, 1),
              "items": [{"i": i, "own": float(own[i]), "other": float(other[i]), "right": bool(right[i])}
                        for i in range(len(prompts))]}
    args.out.write_text(json.dumps(result, indent=1) + "\n")
    print(json.dumps({k: v for k, v in result.items() if k != "items"}, indent=1))


if __name__ == "__main__":
    main()
