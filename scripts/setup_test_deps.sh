#!/usr/bin/env bash
# What the browser and vLLM tests need beyond .venv: Debian's Chromium (driven by the playwright
# package; never `playwright install`) and the separate vLLM CPU environment (.venv-vllm).
# Needs root for apt-get; without it those tests skip with a reason.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ ! -x /usr/bin/chromium ]; then
  if [ "$(id -u)" = 0 ]; then
    (apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
      || echo "warning: could not install chromium; browser tests will be skipped"
  else
    echo "note: not root, chromium not installed; browser tests will be skipped"
  fi
fi
if [ -x scripts/setup_vllm_env.sh ] && [ ! -x .venv-vllm/bin/python ]; then
  bash scripts/setup_vllm_env.sh || echo "warning: vLLM environment not created; vLLM tests will be skipped"
fi
exit 0
