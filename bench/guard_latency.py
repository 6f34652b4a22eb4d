"""What the safety guard costs a chat turn: time to first token and total time, guard on vs off.

    python bench/guard_latency.py --data-dir .cache/test [--rounds 3 --rounds-8 1 --max-new-tokens 16]

Design choices:
- Both sides are `chat.turns.send` on SmolLM2 (the path every surface uses) over one backend and
  one store, with the safety policy in the prompt on both, so the difference is the guard's
  work alone: the request judged before the model is called, the answer at each sentence end and
  at its end.
- Everyday questions (`bench/chat_load.QUESTIONS`, none refused), greedy, so both sides generate
  the same tokens unless the guard replaces an answer (counted: a replaced answer ends early).
- Interleaved: each round runs the same questions once per side, the side that goes first
  alternating, at 1 user and at 8 concurrent users (threads; the local backend generates one
  answer at a time, so 8 users queue for the model and time to first token includes the wait).
- Medians per side with 95 % bootstrap intervals, and the on/off ratio of medians with an
  interval from resampling paired turns (the same question in the same round and user slot).
"""

from __future__ import annotations

import argparse
import contextlib
import platform
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "bench"))  # after the repo, so bench/store.py does not shadow the store package

from _machine import cpu_model, emit  # noqa: E402
from chat_load import QUESTIONS  # noqa: E402

EVERYDAY = QUESTIONS[:10]  # the first-turn questions (the last two are follow-ups)


def timed_turn(ctx, user: str, text: str, params) -> dict:
    """Seconds to the first delta and to the end of one turn, counted from the submit."""
    from chat.turns import send

    t0 = time.perf_counter()
    first = None
    turn = send(ctx, user_id=user, text=text, params=params)
    for _ in turn:
        if first is None:
            first = time.perf_counter() - t0
    total = time.perf_counter() - t0
    verdict = (turn.answer.generation.safety or {}).get("verdict") if turn.answer else None
    return {"ttft": first if first is not None else total, "total": total, "verdict": verdict}


def run_round(ctx, users: int, round_no: int, params) -> list[dict]:
    questions = [EVERYDAY[(round_no * users + u) % len(EVERYDAY)] for u in range(users)]
    with ThreadPoolExecutor(users) as pool:
        return list(pool.map(lambda u: timed_turn(ctx, f"u{round_no}-{u}", questions[u], params), range(users)))


def median_ci(values: list[float], n_boot: int = 2000, seed: int = 0) -> dict:
    import numpy as np

    x = np.asarray(values)
    rng = np.random.default_rng(seed)
    meds = np.median(x[rng.integers(0, x.size, (n_boot, x.size))], axis=1)
    return {"median": round(float(np.median(x)), 3), "ci95": [round(float(v), 3) for v in np.percentile(meds, [2.5, 97.5])],
            "n": int(x.size)}


def ratio_ci(on: list[float], off: list[float], n_boot: int = 2000, seed: int = 0) -> dict:
    """Median(on) / median(off) over paired turns (same question, round and user slot), with a
    95 % interval from resampling the pairs."""
    import numpy as np

    a, b = np.asarray(on), np.asarray(off)
    idx = np.random.default_rng(seed).integers(0, a.size, (n_boot, a.size))
    ratios = np.median(a[idx], axis=1) / np.median(b[idx], axis=1)
    return {"ratio": round(float(np.median(a) / np.median(b)), 3),
            "ci95": [round(float(v), 3) for v in np.percentile(ratios, [2.5, 97.5])], "pairs": int(a.size)}


def measure(ctxs: dict, users: int, rounds: int, params) -> dict:
    got: dict[str, list[list[dict]]] = {"on": [], "off": []}
    for r in range(rounds):
        for side in (("on", "off") if r % 2 == 0 else ("off", "on")):
            got[side].append(run_round(ctxs[side], users, r, params))
            print(users, "users, round", r, side, [round(t["total"], 1) for t in got[side][-1]], flush=True)
    out: dict = {"users": users, "rounds": rounds}
    for metric in ("ttft", "total"):
        per = {side: [t[metric] for rnd in got[side] for t in rnd] for side in got}
        out[metric] = {side: median_ci(per[side]) for side in per}
        out[metric]["on_over_off"] = ratio_ci(per["on"], per["off"])
    out["guard_verdicts"] = {v: sum(t["verdict"] == v for rnd in got["on"] for t in rnd)
                             for v in ("allowed", "refused", "replaced")}
    return out


@contextlib.contextmanager
def served_path(data_dir: Path, threads: int):
    """(settings, store, backend, guard) of the served turn path: the data dir's settings and model,
    the guard warmed up, a throwaway store; torch at `threads` threads."""
    import torch

    torch.set_num_threads(threads)
    from deploy.serving.factory import make_backend
    from deploy.serving.guard import make_guard, warm_up
    from deploy.settings import Settings
    from store import Store

    settings = Settings(data_dir=str(data_dir))
    with tempfile.TemporaryDirectory() as tmp, Store(Path(tmp) / "bench.duckdb") as store:
        guard = make_guard(settings)
        warm_up(guard)
        yield settings, store, make_backend(settings), guard


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, default=REPO / ".cache" / "test")
    ap.add_argument("--rounds", type=int, default=3, help="interleaved rounds at 1 user")
    ap.add_argument("--rounds-8", type=int, default=1, help="interleaved rounds at 8 users")
    ap.add_argument("--max-new-tokens", type=int, default=16)
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--out", type=Path, default=REPO / "bench" / "results" / "guard-latency.json")
    args = ap.parse_args()

    from chat.backends.base import SamplingParams
    from deploy.serving.factory import turn_context

    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=0.0)
    with served_path(args.data_dir, args.threads) as (settings, store, backend, guard):
        ctxs = {"on": turn_context(settings, store, backend, source="cli", guard=guard),
                "off": turn_context(settings, store, backend, source="cli", guard=None)}
        timed_turn(ctxs["on"], "warmup", "Hello?", SamplingParams(max_new_tokens=4, temperature=0.0))
        report = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{cpu_model()}, {platform.machine()}",
                  "torch_threads": args.threads, "max_new_tokens": args.max_new_tokens, "judge": guard.version,
                  "runs": [measure(ctxs, 1, args.rounds, params), measure(ctxs, 8, args.rounds_8, params)]}
    emit(report, args.out)


if __name__ == "__main__":
    main()
