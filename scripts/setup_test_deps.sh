#!/usr/bin/env bash
# What the browser and vLLM tests need beyond .venv: Debian's Chromium (driven by the playwright
# package; never `playwright install`), axe-core (npm) for the accessibility check, and the separate
# vLLM CPU environment (.venv-vllm).
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
# axe-core for the accessibility check in the browser tests (a plain npm package: no browser download).
if [ ! -f .cache/npm/node_modules/axe-core/axe.min.js ]; then
  if command -v npm >/dev/null; then
    mkdir -p .cache/npm && (cd .cache/npm && npm install --silent --no-audit --no-fund axe-core@4) \
      || echo "warning: could not install axe-core; the accessibility test will be skipped"
  else
    echo "note: npm not found; the accessibility test will be skipped"
  fi
fi
if [ -x scripts/setup_vllm_env.sh ] && [ ! -x .venv-vllm/bin/python ]; then
  bash scripts/setup_vllm_env.sh || echo "warning: vLLM environment not created; vLLM tests will be skipped"
fi
exit 0
