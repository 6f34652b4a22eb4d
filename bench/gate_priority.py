"""Does a user's answer go first while the gate runs in the same process? Chat latency idle, and beside
the gate's generation with its streams at niceness 0 and at `gate.niceness`.

    python bench/gate_priority.py --data-dir .cache/test [--turns 8 --blocks 2 --niceness 10] [--out FILE.json]

Design choices:
- The chat side is what a user gets: `chat.turns.send` on SmolLM2 with the guard and the policy
  (the served defaults), one user at a time, greedy, 64 new tokens, everyday questions
  (`bench/guard_latency`), in the same process as the load, as the service answers while its
  scheduler gates.
- The load is the gate's advice step: the served SmolLM2 answering the 243 shipped advice
  requests as `deploy.release.measure` has the gate answer them (its answer function, batches of
  `gate.batch_size`, `gate.streams` side by side, the gate's dtype), inside
  `evaluator.streams.side_by_side(streams, niceness)` as the gate runs it, chunk after chunk (one
  batch per stream) until the block's turns are done.
- Blocks in ABBA order (idle, nice 0, nice N, nice N, nice 0, ..., idle), so drift in the machine
  falls on both loaded arms alike. Reported per arm: time to first token and whole turn, medians
  with 95 % bootstrap intervals and p95; each loaded arm's median over idle's, and nice N's over
  nice 0's, with intervals from resampling each side; and the load's pace (advice answers a second
  over the chunks that ran wholly while the chat was answering), which is what the chat's
  priority costs the gate. In both loaded arms a chat answer runs on one torch thread of two
  (`evaluator.streams`), so over idle mixes that in; nice N over nice 0 is the priority alone.
"""

from __future__ import annotations

import argparse
import platform
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "bench"))

from _machine import cpu_model, emit  # noqa: E402
from chat_during_training import ratio_unpaired  # noqa: E402
from chat_load import pct  # noqa: E402
from guard_latency import EVERYDAY, median_ci, served_path, timed_turn  # noqa: E402


class GateLoad:
    """The gate's answering of the advice requests, repeated in a background thread until stopped."""

    def __init__(self, answer, prompts: list[str], batch: int, streams: int, niceness: int, head_start: float = 5):
        self.answer, self.prompts, self.batch = answer, prompts, batch
        self.streams, self.niceness, self.head_start = streams, niceness, head_start
        self.chunks: list[tuple[float, float, int]] = []  # (start, end, answers) of each chunk
        self.error: BaseException | None = None
        self.stop_event = threading.Event()
        self.thread = threading.Thread(target=self._loop, name="gate-load", daemon=True)

    def _loop(self) -> None:
        from evaluator.streams import side_by_side

        try:
            with side_by_side(self.streams, self.niceness):
                i = 0
                while not self.stop_event.is_set():  # one batch per stream, then check
                    chunk = [self.prompts[(i + k) % len(self.prompts)] for k in range(self.batch * self.streams)]
                    t0 = time.monotonic()
                    n = len(self.answer(chunk))
                    self.chunks.append((t0, time.monotonic(), n))
                    i += len(chunk)
        except BaseException as exc:  # re-raised by __exit__: an arm whose load died measured nothing
            self.error = exc

    def pace(self, start: float, end: float) -> float | None:
        """Answers a second over the chunks that ran wholly between `start` and `end`."""
        inside = [(a, b, n) for a, b, n in self.chunks if a >= start and b <= end]
        return round(sum(n for *_, n in inside) / sum(b - a for a, b, _ in inside), 3) if inside else None

    def __enter__(self) -> GateLoad:
        self.thread.start()
        self.stop_event.wait(self.head_start)  # the first chunk is generating before the first turn
        return self

    def __exit__(self, *exc) -> None:
        self.stop_event.set()
        self.thread.join()
        if self.error is not None:
            raise RuntimeError("the gate's load failed, so this arm measured an idle chat") from self.error


def chat_turns(ctx, n: int, tag: str, params) -> list[dict]:
    out = []
    for i in range(n):
        out.append(timed_turn(ctx, f"{tag}-{i}", EVERYDAY[i % len(EVERYDAY)], params))
        print(tag, i, round(out[-1]["ttft"], 2), round(out[-1]["total"], 2), flush=True)
    return out


def summary(rows: list[dict], idle: list[dict]) -> dict:
    out = {}
    for metric in ("ttft", "total"):
        values = [r[metric] for r in rows]
        out[metric] = {**median_ci(values), "p95": round(pct(values, 95), 3)}
        if rows is not idle:
            out[metric]["over_idle"] = ratio_unpaired(values, [r[metric] for r in idle])
    return out


def arm_order(blocks: int, niceness: int) -> list[int]:
    """The loaded arms' niceness block by block, ABBA: 0, N, N, 0, 0, N, ..."""
    return [nice for b in range(blocks) for nice in ((0, niceness) if b % 2 == 0 else (niceness, 0))]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data-dir", type=Path, default=REPO / ".cache" / "test")
    ap.add_argument("--turns", type=int, default=8, help="chat turns per block")
    ap.add_argument("--blocks", type=int, default=2, help="blocks of each loaded arm")
    ap.add_argument("--niceness", type=int, default=10, help="the lowered arm's niceness")
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    if args.niceness < 1:
        ap.error("--niceness must be 1 or more: the arm to compare with niceness 0")

    from chat.backends.base import SamplingParams
    from chat.pretrained import build_pretrained_model
    from deploy.release.measure import _answer_fn, weights_dtype
    from deploy.release.models import load_merged
    from deploy.serving.factory import turn_context
    from evaluator.shipped import load_advice_prompts

    params = SamplingParams(max_new_tokens=64, temperature=0.0)
    with served_path(args.data_dir, 2) as (settings, store, backend, guard):
        ctx = turn_context(settings, store, backend, source="cli", guard=guard)
        if settings.backend.kind != "pretrained":
            raise SystemExit(f"{args.data_dir}'s settings serve backend.kind {settings.backend.kind!r}; "
                             "this bench loads the served SmolLM2 (backend.kind 'pretrained') for the gate's load")
        gate, dtype = settings.gate, weights_dtype(settings)
        model_dir = build_pretrained_model(settings.data_path)  # the served model, already built there
        model, tokenizer = load_merged(model_dir, None, dtype)
        answer = _answer_fn(model, tokenizer, settings)  # the gate's advice answers, as measure_side makes them
        prompts = load_advice_prompts()
        timed_turn(ctx, "warmup", "Hello?", SamplingParams(max_new_tokens=4, temperature=0.0))
        rows: dict[str, list[dict]] = {"idle": chat_turns(ctx, args.turns, "idle", params)}
        paces: dict[str, list[float | None]] = {}
        for block, nice in enumerate(arm_order(args.blocks, args.niceness)):
            arm = f"nice {nice}"
            with GateLoad(answer, prompts, gate.batch_size, gate.streams, nice) as load:
                start = time.monotonic()
                rows.setdefault(arm, []).extend(chat_turns(ctx, args.turns, f"{arm} block {block}", params))
                end = time.monotonic()
            paces.setdefault(arm, []).append(load.pace(start, end))
        rows["idle"] += chat_turns(ctx, args.turns, "idle", params)
    lowered, same = rows[f"nice {args.niceness}"], rows["nice 0"]
    report = {"date": time.strftime("%Y-%m-%d %H:%M"), "machine": f"{cpu_model()}, {platform.machine()}",
              "model": str(model_dir), "judge": guard.version, "gate": {"batch_size": gate.batch_size,
              "streams": gate.streams, "dtype": dtype}, "turns_per_block": args.turns, "blocks": args.blocks,
              "arms": {arm: summary(r, rows["idle"]) for arm, r in rows.items()},
              f"nice {args.niceness} over nice 0": {m: ratio_unpaired([r[m] for r in lowered], [r[m] for r in same])
                                                    for m in ("ttft", "total")},
              "gate_answers_per_s": paces}
    emit(report, args.out)


if __name__ == "__main__":
    main()
