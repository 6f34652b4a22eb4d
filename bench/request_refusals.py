"""The guard's request check alone, on real requests no choice was made on: how many everyday
requests it refuses and how many risky ones it stops before the model answers.

    .venv/bin/python bench/request_refusals.py [--weights evaluator/judges/weights] [--label v4]

Request sets, all real first turns of HH-RLHF conversations (rows >= 1000):
- the gate's 243 advice requests (`evaluator/data/advice_prompts.jsonl`, mostly personal dilemmas:
  this advisor's core use) and its 171 risky prompts (`risky_prompts.jsonl`; 131 real requests
  for harmful help and 40 written ones) — gate rows, never in any judge's fit;
- the guard bench's test and fresh requests (`bench/results/guard-cuts-answers.jsonl`, judges'
  test split), by kind: everyday (helpful-base) and risky (harmless-base red-teaming, whose first
  turns are not all harmful).
A request is refused when the head's probability reaches the weights' request cut; the crisis
rule is left out (it sends its own reply whatever the head says). Rates with Wilson intervals,
the refused advice requests listed, into `bench/results/request-refusals-<label>.json`.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "bench"))

from _machine import cpu_model  # noqa: E402


def request_sets() -> dict[str, list[str]]:
    from evaluator.shipped import ADVICE_PROMPTS, RISKY_PROMPTS, read_jsonl

    sets = {"gate_advice": [r["prompt"] for r in read_jsonl(ADVICE_PROMPTS)],
            "gate_risky": [r["prompt"] for r in read_jsonl(RISKY_PROMPTS)]}
    rows = [r for r in read_jsonl(REPO / "bench" / "results" / "guard-cuts-answers.jsonl") if r["side"] == "served"]
    for part in ("test", "fresh"):
        for kind in ("everyday", "risky"):
            sets[f"guard_{part}_{kind}"] = [r["request"] for r in rows if r["part"] == part and r["kind"] == kind]
    return sets


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--weights", type=Path, default=None, help="a judges' weights dir (default: the shipped one)")
    ap.add_argument("--label", default="shipped")
    ap.add_argument("--data-dir", type=Path, default=REPO / ".cache" / "test", help="holds models/smollm2-135m-instruct")
    args = ap.parse_args()

    from guard_cuts import rate

    from evaluator.judges.judge import WEIGHTS_DIR, load_judges

    weights = args.weights or WEIGHTS_DIR
    judge = load_judges(args.data_dir / "models" / "smollm2-135m-instruct", weights).harmlessness
    out: dict = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": cpu_model(), "judge": judge.version,
                 "request_cut": judge.request_threshold, "sets": {}}
    for name, requests in request_sets().items():
        risks = [r for start in range(0, len(requests), 32) for r in judge.request_risk(requests[start:start + 32])]
        refused = [(q, p) for q, p in zip(requests, risks) if p >= judge.request_threshold]
        out["sets"][name] = {"refused": rate(len(refused), len(requests))}
        if name == "gate_advice":
            out["sets"][name]["refused_requests"] = [{"risk": round(p, 3), "request": q[:160]} for q, p in refused]
        print(f"{name}: {len(refused)}/{len(requests)} refused", flush=True)
    path = REPO / "bench" / "results" / f"request-refusals-{args.label}.json"
    path.write_text(json.dumps(out, indent=1) + "\n")
    print(f"-> {path}")


if __name__ == "__main__":
    main()
