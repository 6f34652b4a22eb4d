"""vLLM's CPU build serving the real pretrained model (SmolLM2-135M-Instruct, head size 64), with a
LoRA adapter trained on it by the project's own trainer hot-swapped in and out at run time.

The adapter is a real (two-step, high learning rate) SFT run: a few seconds of training, enough to
move the next-token distribution, which the server's log-probabilities show."""

from __future__ import annotations

import json

import httpx
import pytest
from training_helpers import make_run_dir
from vllm_fixtures import _vllm_module_server, vllm_server  # noqa: F401

from deploy.serving.vllm import load_adapter, served_adapters, unload_adapter
from trainer.config import config_for
from trainer.process import start_run
from trainer.rundir import EXIT_OK, run_state

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

QUESTION = [{"role": "user", "content": "My roommate never cleans the kitchen. How do I bring it up?"}]


@pytest.fixture(scope="module")
def vllm_model_dir(pretrained_model_dir):
    return pretrained_model_dir


@pytest.fixture(scope="module")
def trained_adapter(pretrained_model_dir, tmp_path_factory):
    run_dir = make_run_dir(tmp_path_factory.mktemp("real-lora") / "run", "sft", n=4)
    cfg = config_for("sft", base_model=str(pretrained_model_dir), max_steps=2, batch_size=2, max_length=128,
                     learning_rate=1e-3, cpu_min_learning_rate=1e-3, lora_r=8, lora_alpha=16, save_steps=2)
    handle = start_run(run_dir, cfg)
    assert handle.wait(900) == EXIT_OK, (run_dir / "train.log").read_text()[-3000:]
    state = run_state(run_dir)
    assert state.status == "succeeded" and state.adapter_dir
    return state.adapter_dir


def first_token_logprobs(server, model: str) -> dict[str, float]:
    body = {"model": model, "messages": QUESTION, "max_tokens": 1, "temperature": 0, "logprobs": True,
            "top_logprobs": 5}
    r = httpx.post(f"{server.openai_url}/chat/completions", json=body, timeout=120)
    assert r.status_code == 200, r.text
    top = r.json()["choices"][0]["logprobs"]["content"][0]["top_logprobs"]
    return {t["token"]: t["logprob"] for t in top}


def test_vllm_serves_the_pretrained_model_and_hot_swaps_a_lora_trained_on_it(vllm_server, trained_adapter):
    config = json.loads((vllm_server.model_dir / "config.json").read_text())
    assert config["hidden_size"] // config["num_attention_heads"] == 64
    r = httpx.post(f"{vllm_server.openai_url}/chat/completions", timeout=180, json={
        "model": vllm_server.model, "messages": QUESTION, "max_tokens": 48, "temperature": 0})
    assert r.status_code == 200 and r.json()["choices"][0]["message"]["content"].strip()
    base = first_token_logprobs(vllm_server, vllm_server.model)

    load_adapter(vllm_server.base_url, "release-real", trained_adapter)
    assert "release-real" in served_adapters(vllm_server.base_url)
    tuned = first_token_logprobs(vllm_server, "release-real")
    shared = set(base) & set(tuned)
    assert shared and max(abs(base[t] - tuned[t]) for t in shared) > 1e-3, "the adapter changed nothing"
    # The base model is still served unchanged beside it, and the adapter goes away when unloaded.
    assert first_token_logprobs(vllm_server, vllm_server.model) == pytest.approx(base, abs=1e-4)
    unload_adapter(vllm_server.base_url, "release-real")
    assert "release-real" not in served_adapters(vllm_server.base_url)
