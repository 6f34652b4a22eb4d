#!/usr/bin/env bash
# The GPU path, end to end, on a fresh CUDA machine (target: under 8 minutes on one modern GPU):
#   1. install the app with the GPU extra, and the official vLLM in its own environment;
#   2. build the built-in model and serve it on vLLM with LoRA (`advisor serve-model`);
#   3. start the advisor service on the vLLM backend and chat through it;
#   4. simulate conversations through the service (`advisor simulate`), train a QLoRA KTO adapter
#      on the mined feedback (`advisor train --method kto --wait`), pass it through the gate
#      (`advisor release gate RUN`) and promote it in the running service (`advisor release
#      promote ID --url`: published to the adapter directory, loaded into vLLM at run time);
#   5. chat again and check the stored answer names the new release;
#   6. throughput, vLLM vs the transformers backend on the same model and prompts (bench/serve.py);
#   7. the learning loop on the real pretrained model (bench/learning.py, as on the CPU in
#      docs/learning.md, with more users and steps): simulated users who want short answers, a
#      QLoRA KTO run, the held-out change in length and implicit-reward margin.
#
# Every step prints its elapsed time; the first failing step stops the script with its name
# (exit 1). A command that does not exist in this checkout yet is a failure too, named as such:
# this script is the acceptance check, not a demo that skips what is missing.
#
# Why the service stops around training: the service owns the DuckDB file while it runs, and
# `advisor train` / `advisor release gate` work on it directly. vLLM keeps running throughout, so
# the promotion is still a runtime adapter load into the same server.
#
# The served model name is the model's path (vLLM's default): releases record the base model they
# were trained on by path, and promotion refuses a release for another base model.
#
# Environment: WORK (scratch dir, default mktemp), SKIP_INSTALL=1 (use existing .venv/.venv-vllm),
# VLLM_PORT (8001), ADVISOR_PORT (7860), USERS/TURNS (simulated feedback, 24 x 4),
# CONVERSATIONS (bench, 32), BENCH_TURNS (2), LEARN_USERS/LEARN_TURNS/LEARN_STEPS (step 7: 32 x 8,
# 200 steps), FORCE_PROMOTE=1 (promote even if the gate rejects,
# saying so loudly, to exercise the serving path; default 1).
set -Eeuo pipefail

ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"
WORK="${WORK:-$(mktemp -d -t advisor-gpu-XXXX)}"
VLLM_PORT="${VLLM_PORT:-8001}"
ADVISOR_PORT="${ADVISOR_PORT:-7860}"
USERS="${USERS:-24}"
TURNS="${TURNS:-4}"
CONVERSATIONS="${CONVERSATIONS:-32}"
BENCH_TURNS="${BENCH_TURNS:-2}"
FORCE_PROMOTE="${FORCE_PROMOTE:-1}"
SERVICE_URL="http://127.0.0.1:$ADVISOR_PORT"
T0=$(date +%s)
STEP="start"
VLLM_PID=""
SERVICE_PID=""

export ADVISOR_DATA_DIR="$WORK/data"
export ADVISOR_VLLM__PORT="$VLLM_PORT"
export ADVISOR_VLLM__DEVICE=cuda
# The trainer's LoRA rank is 64 (trainer.config.RunConfig.lora_r); vLLM refuses adapters above its
# --max-lora-rank, whose setting defaults to 16.
export ADVISOR_VLLM__MAX_LORA_RANK="${ADVISOR_VLLM__MAX_LORA_RANK:-64}"
export ADVISOR_BACKEND__KIND=openai
export ADVISOR_BACKEND__BASE_URL="http://127.0.0.1:$VLLM_PORT/v1"
export ADVISOR_SERVER__PORT="$ADVISOR_PORT"
export ADVISOR_SERVER__ADMIN_TOKEN="${ADVISOR_SERVER__ADMIN_TOKEN:-gpu-check-token}"
ADVISOR="$ROOT/.venv/bin/advisor"
PY="$ROOT/.venv/bin/python"

step() { STEP="$*"; echo; echo "==> [$(( $(date +%s) - T0 ))s] $STEP"; }
die() { echo "FAILED at step '$STEP': $*" >&2; exit 1; }
on_error() { echo "FAILED at step '$STEP' (exit $1, line $2)" >&2; }
trap 'on_error $? $LINENO' ERR
stop_pid() {  # PID: SIGTERM its process group (vLLM has an engine process), wait for it
    [[ -n "$1" ]] || return 0
    kill -TERM -- "-$1" 2>/dev/null || kill -TERM "$1" 2>/dev/null || true
    for _ in $(seq 60); do kill -0 "$1" 2>/dev/null || return 0; sleep 0.5; done
    kill -KILL -- "-$1" 2>/dev/null || true
}
cleanup() { stop_pid "$SERVICE_PID"; stop_pid "$VLLM_PID"; }
trap cleanup EXIT
need_cmd() {  # the advisor sub-command must exist in this checkout
    "$ADVISOR" "$@" --help >/dev/null 2>&1 || die "\`advisor $*\` does not exist in this checkout"
}
wait_http() {  # URL SECONDS LOG
    for _ in $(seq "$2"); do
        if "$PY" -c "import sys, urllib.request; urllib.request.urlopen(sys.argv[1], timeout=3)" "$1" 2>/dev/null; then return 0; fi
        sleep 1
    done
    echo "last lines of $3:"; tail -40 "$3"
    die "$1 not up after $2 s"
}
start_service() {
    setsid "$ADVISOR" serve >>"$WORK/advisor.log" 2>&1 &
    SERVICE_PID=$!
    wait_http "$SERVICE_URL/healthz" 180 "$WORK/advisor.log"
}
stop_service() { stop_pid "$SERVICE_PID"; SERVICE_PID=""; }
chat() {  # QUESTION [EXPECTED_RELEASE]: one streamed answer through the REST API; prints it and its release
    "$PY" - "$SERVICE_URL" "$1" "${2:-}" <<'PY'
import json, sys, httpx
url, question, expected = sys.argv[1:4]
answer = None
with httpx.Client(base_url=url, timeout=300) as c:
    with c.stream("POST", "/api/messages", json={"content": question, "stream": True, "max_new_tokens": 120}) as r:
        r.raise_for_status()
        for line in r.iter_lines():
            if line.startswith("data: "):
                event = json.loads(line[6:])
                if event["type"] == "error":
                    sys.exit(f"the chat failed: {event['error']['message']}")
                if event["type"] == "done":
                    answer = event["answer"]
if answer is None:
    sys.exit("the stream ended without an answer")
g = answer["generation"]
print(f"[release {g['release_id']}, adapter {g['adapter']}, {g['completion_tokens']} tokens, "
      f"{g['latency_ms']:.0f} ms] {answer['content']!r}")
if expected and g["release_id"] != expected:
    sys.exit(f"the answer names release {g['release_id']}, expected {expected}")
PY
}

step "GPU"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader || die "no NVIDIA GPU (nvidia-smi failed)"

if [[ "${SKIP_INSTALL:-0}" != 1 ]]; then
    step "install the app (.venv, torch first, GPU extra)"
    python3.11 -m venv .venv
    .venv/bin/pip install -q torch==2.13.0
    .venv/bin/pip install -q -e ".[gpu]"
    step "install the official vLLM in its own environment (.venv-vllm)"
    python3 -m venv .venv-vllm
    .venv-vllm/bin/pip install -q vllm
fi
step "check torch sees the GPU"
"$PY" -c "import torch; assert torch.cuda.is_available(), 'torch in .venv cannot see the GPU'; print('torch', torch.__version__, torch.cuda.get_device_name())"

step "build the built-in model"
"$ADVISOR" model build
MODEL="$("$ADVISOR" model path)" || die "the built-in model was not built"
export ADVISOR_BACKEND__MODEL="$MODEL"
echo "model: $MODEL"

step "serve it on vLLM with LoRA (advisor serve-model)"
setsid "$ADVISOR" serve-model >"$WORK/vllm.log" 2>&1 &
VLLM_PID=$!
wait_http "http://127.0.0.1:$VLLM_PORT/health" 600 "$WORK/vllm.log"
"$ADVISOR" vllm status

step "advisor service on the vLLM backend; chat"
start_service
chat "I can't fall asleep before exams. Any advice?"

step "simulate conversations through the service"
need_cmd simulate
# --extract: the service mines the natural feedback at the end, which the KTO set is built from.
"$ADVISOR" simulate --users "$USERS" --turns "$TURNS" --url "$SERVICE_URL" --concurrency 8 --extract

step "stop the service (training and the gate open the database directly)"
stop_service

step "train a QLoRA KTO adapter on the feedback"
"$ADVISOR" train --method kto --wait --base-model "$MODEL"
RUN_ID="$("$ADVISOR" runs --json | "$PY" -c "import json, sys; print(json.load(sys.stdin)[0]['id'])")"
RUN_STATUS="$("$ADVISOR" runs --json | "$PY" -c "import json, sys; print(json.load(sys.stdin)[0]['status'])")"
echo "run $RUN_ID: $RUN_STATUS"
[[ "$RUN_STATUS" == "succeeded" ]] \
    || die "training run $RUN_ID ended $RUN_STATUS"

step "gate the run (candidate vs live on the same prompts)"
need_cmd release gate
"$ADVISOR" release gate "$RUN_ID" --json >"$WORK/gate.json" || die "the gate could not run on $RUN_ID"
read -r RELEASE_ID RELEASE_STATUS < <("$PY" -c "
import json, sys
o = json.loads([l for l in open(sys.argv[1]) if l.strip()][-1])
d = o['decision']
print(d['summary'], file=sys.stderr)
for a in d['axes']:
    print(f\"  {a['axis']}: candidate {a['candidate']}, live {a['live']}: {a['reason']}\", file=sys.stderr)
print(o['release_id'], 'candidate' if d['promote'] else 'rejected')" "$WORK/gate.json")
[[ -n "$RELEASE_ID" ]] || die "the gate recorded no release for run $RUN_ID"
echo "release $RELEASE_ID: $RELEASE_STATUS"

step "promote it in the running service (runtime LoRA load into vLLM)"
start_service
case "$RELEASE_STATUS" in
    candidate) "$ADVISOR" release promote "$RELEASE_ID" --url "$SERVICE_URL" ;;
    rejected)
        [[ "$FORCE_PROMOTE" == 1 ]] || die "the gate rejected $RELEASE_ID (FORCE_PROMOTE=1 promotes it anyway)"
        echo "NOTE: the gate REJECTED $RELEASE_ID; promoting with --force only to exercise the serving path"
        "$ADVISOR" release promote "$RELEASE_ID" --force --url "$SERVICE_URL" ;;
    *) die "release $RELEASE_ID is $RELEASE_STATUS" ;;
esac
"$ADVISOR" vllm status  # the release's adapter is listed with the base as parent

step "chat on the new adapter"
chat "I can't fall asleep before exams. Any advice?" "$RELEASE_ID"

step "throughput: vLLM vs transformers, same model and prompts (bench/serve.py)"
stop_service  # the bench runs its own services; the GPU keeps only vLLM's memory
"$PY" bench/serve.py --vllm-url "http://127.0.0.1:$VLLM_PORT" --served-model-name "$MODEL" --model-dir "$MODEL" \
    --conversations "$CONVERSATIONS" --turns "$BENCH_TURNS" --device cuda | tee "$WORK/bench.txt"

step "the learning loop on the real model (bench/learning.py)"
stop_pid "$VLLM_PID"; VLLM_PID=""  # the bench starts its own vLLM (with the pretrained model) and trains between
"$ADVISOR" model build --model pretrained
"$PY" bench/learning.py --model-dir "$ADVISOR_DATA_DIR/models/smollm2-135m-instruct" --users "${LEARN_USERS:-32}" \
    --turns "${LEARN_TURNS:-8}" --train-steps "${LEARN_STEPS:-200}" --out "$WORK/learning.json" | tail -40

step "done in $(( $(date +%s) - T0 ))s"
echo "logs and figures in $WORK"
