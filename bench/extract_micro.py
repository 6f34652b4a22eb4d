"""Micro-benchmark of the fast extractor alone (no store): real chat windows, one core.

    taskset -c 0 .venv/bin/python bench/extract_micro.py [--repeats 5] [--windows-per-conversation 3]

The windows are those of the real gold set's dev split (HH-RLHF turns: longer and messier than the
generated log of `bench/extract.py`), cut into 4-turn conversations: 4 user turns, so 3 windows
(user turn, the answer before it, the request before that) per conversation. `make_extractor("fast")`
as the service builds it runs over them in chunks of 512 windows, as the runner feeds it; the best
of `--repeats` passes is reported, in process CPU time (what one dedicated core would spend; on a
shared machine wall-clock time also counts other processes) and wall-clock time. The embedding
model, if the extractor uses it, is loaded and warmed before timing, as in the service.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--windows-per-conversation", type=int, default=3)
    parser.add_argument("--chunk", type=int, default=512)
    parser.add_argument("--gold", type=Path, default=REPO / "feedback" / "data" / "hh_gold.jsonl")
    args = parser.parse_args()
    if hasattr(os, "sched_setaffinity"):
        os.sched_setaffinity(0, {sorted(os.sched_getaffinity(0))[0]})
    import torch

    torch.set_num_threads(1)
    from feedback.extract import load_gold, make_extractor, windows_of

    windows = [w for c in load_gold(args.gold, split="dev") for w in windows_of(c)]
    extractor = make_extractor("fast")
    if getattr(extractor, "use_embeddings", False) and not getattr(extractor, "model", None):
        extractor.embedder(["warm up the embedding model"])
    extractor.extract(windows[:64])  # first-call costs (regex compilation caches, model file) out
    best_cpu = best_wall = float("inf")
    stats = None
    for _ in range(args.repeats):
        c0, w0 = time.process_time(), time.perf_counter()
        for lo in range(0, len(windows), args.chunk):
            result = extractor.extract(windows[lo:lo + args.chunk])
            stats = result.stats
        best_cpu = min(best_cpu, time.process_time() - c0)
        best_wall = min(best_wall, time.perf_counter() - w0)
    conversations = len(windows) / args.windows_per_conversation
    print(json.dumps({
        "extractor": f"{extractor.name} {extractor.version}", "windows": len(windows),
        "windows_per_conversation": args.windows_per_conversation,
        "us_per_window_cpu": round(best_cpu * 1e6 / len(windows), 1),
        "conversations_per_cpu_s": round(conversations / best_cpu),
        "conversations_per_s_wall": round(conversations / best_wall),
        "embedded_pairs_last_chunk": (stats or {}).get("embedded_pairs", 0),
        "load_average": [round(x, 2) for x in os.getloadavg()],
    }))


if __name__ == "__main__":
    main()
