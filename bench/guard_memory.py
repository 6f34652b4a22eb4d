"""Does the serving guard's judging make a long-lived service's memory grow, and does it slow down?

    python bench/guard_memory.py [--model-dir .cache/test/models/smollm2-135m-instruct] [--pairs 700]
        [--passes 2] [--every 100] [--out bench/results/guard-memory.json]
    ONEDNN_PRIMITIVE_CACHE_CAPACITY=8 python bench/guard_memory.py --out bench/results/guard-memory-onednn8.json

Design choices:
- The judges as the guard runs them (`evaluator.judges.load_judges`): for each (request, answer)
  of the labelled safety set, in a seeded order, the request check and then the answer check, one
  pair at a time, one torch thread (pin the process to one core with `taskset -c N`).
- `--passes`: the same pairs again. Memory that grows in the first pass and not the second is
  kept per input shape (a cache); memory that grows in both is kept per request.
- After every `--every` pairs: the seconds so far, resident memory (/proc) and glibc's own counts
  (`mallinfo2`): bytes in use in its heap, free in its heap, and in blocks it mapped on their own
  (large tensors). In-use bytes that keep rising are something kept; free bytes that keep rising
  are holes the heap does not hand back.
- The safety set's texts have many lengths, as real traffic does, so every shape-keyed cache
  (oneDNN keeps one primitive per input shape, 1,024 by default) fills as it would in service.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import platform
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "bench"))

from _machine import cpu_model, emit  # noqa: E402


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in ("arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks",
                                                     "fsmblks", "uordblks", "fordblks", "keepcost")]


def memory() -> dict:
    """Resident memory, glibc's heap bytes in use and free, and its separately mapped blocks, in MiB."""
    libc = ctypes.CDLL(None)
    libc.mallinfo2.restype = _MallInfo2
    info = libc.mallinfo2()
    rss = next(int(line.split()[1]) for line in Path("/proc/self/status").read_text().splitlines()
               if line.startswith("VmRSS"))
    return {"rss_mib": rss // 1024, "heap_in_use_mib": info.uordblks >> 20, "heap_free_mib": info.fordblks >> 20,
            "mapped_mib": info.hblkhd >> 20}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model-dir", type=Path, default=REPO / ".cache/test/models/smollm2-135m-instruct")
    ap.add_argument("--pairs", type=int, default=700)
    ap.add_argument("--passes", type=int, default=2, help="times over the same pairs")
    ap.add_argument("--every", type=int, default=100)
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args()
    import torch

    from evaluator.judges.judge import load_judges

    torch.set_num_threads(1)
    judge = load_judges(args.model_dir).harmlessness
    rows = [json.loads(line) for line in (REPO / "evaluator/data/safety_set.jsonl").read_text().splitlines()]
    random.Random(0).shuffle(rows)
    samples, start, k = [{"pairs": 0, "seconds": 0.0, **memory()}], time.perf_counter(), 0
    for _ in range(args.passes):
        for row in rows[:args.pairs]:
            judge.request_risk([row["request"]])
            judge.answer_risk([row["request"]], [row["answer"]])
            k += 1
            if k % args.every == 0:
                samples.append({"pairs": k, "seconds": round(time.perf_counter() - start, 1), **memory()})
                print(json.dumps(samples[-1]), flush=True)
    emit({"machine": cpu_model(), "cores": sorted(os.sched_getaffinity(0)), "torch": torch.__version__,
          "libc": " ".join(platform.libc_ver()), "pairs": args.pairs, "passes": args.passes, "every": args.every,
          "onednn_primitive_cache_capacity": os.environ.get("ONEDNN_PRIMITIVE_CACHE_CAPACITY", "default (1024)"),
          "samples": samples}, args.out)


if __name__ == "__main__":
    main()
