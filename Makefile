# Two commands for a fresh machine (Python 3.11, no GPU, no model hub):
#   make run   — set up .venv and start the chat service on the built-in model (http://127.0.0.1:7860)
#   make test  — set up .venv plus the browser/vLLM test dependencies and run the whole suite
.PHONY: setup run test test-fast bench

setup:
	bash scripts/setup.sh

run: setup
	.venv/bin/advisor serve

test: setup
	bash scripts/setup_test_deps.sh
	# Build (or reuse) the built-in model once, outside pytest's per-test timeout.
	.venv/bin/advisor --data-dir .cache/test model build --model builtin
	.venv/bin/python -m pytest -q --timeout=900

test-fast: setup
	.venv/bin/python -m pytest -q -m "not slow and not browser and not vllm"
