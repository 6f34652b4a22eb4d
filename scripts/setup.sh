#!/usr/bin/env bash
# Create .venv with the CPU build of torch first (a plain `torch` would pull a multi-GB CUDA
# build), then the project and its test extras. Idempotent: re-running only fills gaps.
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PYTHON:-python3.11}
command -v "$PY" >/dev/null || PY=python3
if [ ! -x .venv/bin/python ]; then
  "$PY" -m venv .venv
  .venv/bin/python -m pip install -q --upgrade pip
fi
.venv/bin/python -c "import torch" 2>/dev/null || .venv/bin/pip install -q torch==2.13.0
# Hash-pinned first (requirements-hashes.txt says why): the install below then finds them present.
.venv/bin/pip install -q --no-deps --require-hashes -r requirements-hashes.txt
.venv/bin/pip install -q -c constraints.txt -e ".[test]"
echo "ready: .venv (torch $(.venv/bin/python -c 'import torch; print(torch.__version__)'))"
