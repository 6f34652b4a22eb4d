"""When should the guard judge the request: before the model starts, or while it reads its prompt?

    python bench/guard_overlap.py --data-dir .cache/test [--rounds 4 --threads 2]

Design choices:
- Three ways to reach a first token on SmolLM2 (the served backend, the safety policy, greedy):
  `off` (no request check), `before` (judge, then start the model: the guard until 2026-12-04)
  and `beside` (start the model, then judge while it prefills: `chat.turns` since), each timed
  from the start to the first streamed delta. The model's start is `chat.turns._start_generation`,
  the function a turn uses.
- Everyday questions (`bench/chat_load.QUESTIONS`), the three ways interleaved per question with
  the order reversed every other round; medians and 95 % bootstrap intervals, and each way's
  ratio to `off` with an interval from resampling the paired questions.
"""

from __future__ import annotations

import argparse
import platform
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "bench"))

from _machine import cpu_model, emit  # noqa: E402
from chat_load import QUESTIONS  # noqa: E402
from guard_latency import median_ci, ratio_ci, served_path  # noqa: E402

WAYS = ("off", "before", "beside")


def first_token(ctx, guard, way: str, question: str, params) -> float:
    from chat.turns import _start_generation
    from store.attributes import Attributes

    messages = [{"role": "user", "content": question}]
    t0 = time.perf_counter()
    if way == "before":
        guard.request_risk(question)
    gen = _start_generation(ctx, messages, Attributes(), params)
    if way == "beside":
        guard.request_risk(question)
    first = None
    for _ in gen:
        first = first or time.perf_counter() - t0
    return first if first is not None else time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, default=REPO / ".cache" / "test")
    ap.add_argument("--rounds", type=int, default=4)
    ap.add_argument("--questions", type=int, default=6)
    ap.add_argument("--threads", type=int, default=2, help="torch threads")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "guard-overlap.json")
    args = ap.parse_args()

    from chat.backends.base import SamplingParams
    from deploy.serving.factory import turn_context

    params = SamplingParams(max_new_tokens=8, temperature=0.0)
    got: dict[str, list[float]] = {w: [] for w in WAYS}
    with served_path(args.data_dir, args.threads) as (settings, store, backend, guard):
        ctx = turn_context(settings, store, backend, source="cli", guard=guard)
        first_token(ctx, guard, "off", "Hello?", params)
        for r in range(args.rounds):
            for q in QUESTIONS[:args.questions]:
                for way in (WAYS if r % 2 == 0 else WAYS[::-1]):
                    got[way].append(first_token(ctx, guard, way, q, params))
            print("round", r, {w: round(v[-1], 3) for w, v in got.items()}, flush=True)
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{cpu_model()}, {platform.machine()}",
              "torch_threads": args.threads, "judge": guard.version, "pairs": len(got["off"]),
              "ttft": {w: median_ci(v) for w, v in got.items()},
              "over_off": {w: ratio_ci(got[w], got["off"]) for w in ("before", "beside")}}
    emit(report, args.out)


if __name__ == "__main__":
    main()
