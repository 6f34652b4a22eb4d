#!/usr/bin/env bash
# What the browser, PostgreSQL and vLLM tests need beyond .venv: Debian's Chromium (driven by the
# playwright package; never `playwright install`), axe-core (npm) for the accessibility check,
# Debian's PostgreSQL server binaries and nginx (the tests start their own server in a temporary directory:
# deploy/ops/pg_throwaway.py; the packaged cluster is not used) and the separate vLLM CPU environment
# (.venv-vllm). Needs root for apt-get; without it those tests skip with a reason (and fail under
# CI, where CI is set: tests/prereqs.py).
set -uo pipefail
cd "$(dirname "$0")/.."
APT_UPDATED=
apt_install() {  # apt_install PACKAGE WHAT-SKIPS
  if [ "$(id -u)" != 0 ]; then
    echo "note: not root, $1 not installed; $2 will be skipped"
    return
  fi
  [ -n "$APT_UPDATED" ] || { apt-get update -qq && APT_UPDATED=1; }
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "$1" >/dev/null \
    || echo "warning: could not install $1; $2 will be skipped"
}
[ -x /usr/bin/chromium ] || apt_install chromium "browser tests"
ls /usr/lib/postgresql/*/bin/pg_ctl >/dev/null 2>&1 || apt_install postgresql "PostgreSQL tests"
# nginx for the local production topology (tests/deploy/ops/test_topology.py: its own config and prefix, the
# packaged service is not started).
command -v nginx >/dev/null || [ -x /usr/sbin/nginx ] || apt_install nginx "the topology test"
# A Compose CLI only to validate deploy/ops/compose.yaml (`config -q`: no Docker daemon is needed).
docker compose version >/dev/null 2>&1 || command -v docker-compose >/dev/null \
  || apt_install docker-compose "the compose file check"
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
