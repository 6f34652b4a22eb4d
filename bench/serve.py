"""Serving throughput: N concurrent conversations through the advisor service (real HTTP, the
public REST API, streaming), once on the vLLM backend and once on the transformers backend, on
the same model with the same prompts, greedy.

Prints the machine and its load, per backend answers/s, tokens/s, p50/p95 latency and time to
first token, and the vLLM/transformers ratios. Every answer must come back complete and be
stored (exit status 1 otherwise).

Design choices:
- The load generator, percentiles and per-backend summary are `bench/chat_load.py`'s, so the two
  benchmarks measure turns the same way; this script only swaps the backend under the service.
- Each backend gets a fresh service and store (a temporary data directory), so neither run
  reads the other's conversations.
- vLLM runs as its own server process, as in production: started here from `.venv-vllm`
  (CPU: float32, eager, capped KV cache), or an already running one with `--vllm-url` (the GPU
  script's `advisor serve-model`: a second server would not fit beside it on the GPU).
- The transformers backend generates one answer at a time (a lock around one model), vLLM
  batches continuously: the ratio is the point of the comparison. Tokens/s is the fairer
  figure when the two produce answers of different length.

    .venv/bin/python bench/serve.py                               # 32 conversations x 2 turns, 32 tokens
    .venv/bin/python bench/serve.py --conversations 32 --turns 1 --max-new-tokens 16
    .venv/bin/python bench/serve.py --vllm-url http://127.0.0.1:8001 --served-model-name advisor
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))
sys.path.append(str(REPO / "bench"))  # after the repo, so bench/store.py does not shadow the store package

from chat_load import machine, run_service, service, summary  # noqa: E402


def gpu_name() -> str:
    """The NVIDIA GPU(s), or '' (no torch import, no CUDA initialisation here)."""
    try:
        out = subprocess.run(["nvidia-smi", "--query-gpu=name,memory.total", "--format=csv,noheader"],
                             capture_output=True, text=True, timeout=20)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    return "; ".join(line.strip() for line in out.stdout.splitlines() if line.strip()) if out.returncode == 0 else ""


def load_avg() -> str:
    return ", ".join(f"{x:.2f}" for x in os.getloadavg())


def stored_complete(store) -> int:
    # A count no typed function gives: the store's private analytics helper, benchmark only.
    return store._db.analytics("SELECT count(*) FROM messages WHERE role = 'assistant' AND status = 'complete'")[0][0]


def run_backend(name: str, make_backend: Callable[[], object], kind: str, args, params: dict) -> dict | None:
    """One backend under the service: the load, its summary, and the stored-answer check."""
    backend = make_backend()
    try:
        with tempfile.TemporaryDirectory(prefix=f"advisor-serve-{name}-") as tmp, \
                service(backend, Path(tmp), kind) as (url, store):
            # One untimed answer first: lazy initialisation (kernels, caches) is not throughput.
            run_service(url, 1, 1, params)
            before = stored_complete(store)
            rows, wall, errors = run_service(url, args.conversations, args.turns, params)
            out = summary(name, rows, wall)
            expected = args.conversations * args.turns
            stored = stored_complete(store) - before
            print(f"          stored {stored}/{expected} complete answers, {len(errors)} errors; load avg {load_avg()}")
            for e in errors[:5]:
                print("           ", e)
            out["ok"] = stored == expected and not errors
            return out
    finally:
        backend.close()


@contextmanager
def vllm_endpoint(args, model_dir: Path) -> Iterator[tuple[str, str]]:
    """(OpenAI base URL, served model name): the given server, or one started here."""
    if args.vllm_url:
        url = args.vllm_url.rstrip("/")
        yield (url if url.endswith("/v1") else url + "/v1"), args.served_model_name
        return
    import socket

    from deploy.serving.vllm import (
        VLLMServerConfig,
        find_vllm_python,
        has_nvidia_gpu,
        start_server,
        stop_server,
        wait_healthy,
    )

    gpu = has_nvidia_gpu()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cfg = VLLMServerConfig(model=str(model_dir), port=port, served_model_name=args.served_model_name or None,
                           dtype="auto" if gpu else "float32", max_model_len=1024, enforce_eager=not gpu,
                           kv_cache_gib=None if gpu else 1, gpu_memory_utilization=0.5 if gpu else None)
    log_path = Path(tempfile.gettempdir()) / f"advisor-bench-vllm-{port}.log"
    proc = start_server(cfg, find_vllm_python(args.vllm_python), log_path=log_path)
    try:
        waited = wait_healthy(cfg.base_url, 600, proc=proc, log_path=log_path)
        print(f"vLLM: started in {waited:.0f} s on {cfg.base_url} (log {log_path})")
        yield cfg.base_url + "/v1", args.served_model_name or str(model_dir)
    finally:
        stop_server(proc)


def ratios(v: dict, t: dict) -> None:
    def r(a: float, b: float) -> str:
        return f"{a / b:.2f}x" if b else "n/a"

    print(f"vLLM / transformers: answers/s {r(v['turns_per_s'], t['turns_per_s'])}, "
          f"tokens/s {r(v['tokens_per_s'], t['tokens_per_s'])}, "
          f"p50 latency {r(v['p50_s'], t['p50_s'])}, p95 latency {r(v['p95_s'], t['p95_s'])} "
          f"(latency: below 1x is faster)")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--conversations", type=int, default=32, help="concurrent conversations")
    ap.add_argument("--turns", type=int, default=2, help="turns per conversation")
    ap.add_argument("--max-new-tokens", type=int, default=32)
    ap.add_argument("--data-dir", type=Path, default=REPO / "data",
                    help="where the built-in model is (or gets built): <data-dir>/models/builtin-*")
    ap.add_argument("--model-dir", type=Path, default=None, help="serve this HF model directory instead")
    ap.add_argument("--vllm-url", default="", help="use this running vLLM server (serving the same model)")
    ap.add_argument("--served-model-name", default="", help="its model name (default: the model path)")
    ap.add_argument("--vllm-python", default=".venv-vllm/bin/python", help="vLLM's environment, to start one")
    ap.add_argument("--device", default="auto", choices=["auto", "cpu", "cuda"], help="transformers backend device")
    ap.add_argument("--only", choices=["vllm", "transformers"], default=None, help="run one backend only")
    args = ap.parse_args()

    from chat.backends import OpenAICompatibleBackend
    from chat.backends.transformers_backend import TransformersBackend
    from chat.builtin.build import build_builtin_model

    print("machine:", machine())
    gpu = gpu_name()
    print("GPU:", gpu or "none")
    model_dir = args.model_dir or build_builtin_model(
        args.data_dir, progress=lambda s, n, loss: print(f"  building the built-in model {s}/{n}", end="\r"))
    print(f"model: {model_dir}")
    print(f"load: {args.conversations} concurrent conversations x {args.turns} turns, "
          f"at most {args.max_new_tokens} new tokens, greedy; load avg before {load_avg()}")
    params = {"max_new_tokens": args.max_new_tokens, "temperature": 0.0, "seed": 0}
    results: dict[str, dict] = {}

    if args.only in (None, "vllm"):
        with vllm_endpoint(args, model_dir) as (url, served):
            results["vllm"] = run_backend(
                "vllm", lambda: OpenAICompatibleBackend(url, model=served, timeout_s=600, max_retries=2,
                                                        max_concurrency=args.conversations),
                "openai", args, params)
    if args.only in (None, "transformers"):
        device = args.device if args.device != "auto" else ("cuda" if gpu else "cpu")
        results["transformers"] = run_backend(
            "transf.", lambda: TransformersBackend(model_dir, device=device, kind="transformers",
                                                   name=Path(model_dir).name, local_files_only=True),
            "transformers", args, params)

    if len(results) == 2:
        ratios(results["vllm"], results["transformers"])
    print(f"load avg after {load_avg()}")
    ok = all(r["ok"] for r in results.values())
    print("RESULT:", "all answers complete and stored" if ok else "MISSING OR FAILED ANSWERS")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
