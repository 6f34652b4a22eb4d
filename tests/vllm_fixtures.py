"""A real vLLM CPU server for tests, and tiny LoRA adapters to hot-swap into it.

Use from a test module (pytest finds fixtures imported into the module):

    from vllm_fixtures import vllm_server, vllm_model_dir, make_random_lora  # noqa: F401

`vllm_server` is module-scoped: one server per test module (start-up is ~40 s on 2 cores), on a
free localhost port, serving `vllm_model_dir` (the tiny random model by default; override the
fixture in a module to serve another directory) with runtime LoRA loading enabled. Tests are
skipped with the reason (failed under CI: `prereqs.require`) when `.venv-vllm` is absent
(`scripts/setup_vllm_env.sh` creates it).
A test may kill the server (`server.kill()`); the next test that asks for it gets it restarted
(on a new port), or the test restarts it itself on the same port (`server.restart()`), as a
supervisor would, so that clients configured with its URL find it again.
"""

from __future__ import annotations

import dataclasses
import os
import signal
import socket
import subprocess
from dataclasses import dataclass, field
from pathlib import Path

import pytest
from prereqs import VLLM_PYTHON, require

from deploy.serving.vllm import (
    VLLMNotInstalled,
    VLLMServerConfig,
    find_vllm_python,
    start_server,
    stop_server,
    wait_healthy,
)

START_TIMEOUT_S = 300.0  # generous: a busy 2-core CI box; the usual start is ~40 s
LORA_RANK = 8
MAX_MODEL_LEN = 1024



def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class VLLMTestServer:
    """A running vLLM server; `base_url` has no /v1 (the OpenAI client wants `openai_url`)."""

    model_dir: Path
    log_path: Path
    python: str
    cfg: VLLMServerConfig = field(init=False)
    proc: subprocess.Popen | None = None
    start_seconds: float = 0.0

    def __post_init__(self) -> None:
        self.cfg = VLLMServerConfig(
            model=str(self.model_dir),
            port=free_port(),
            dtype="float32",
            max_model_len=MAX_MODEL_LEN,
            max_lora_rank=LORA_RANK,
            max_loras=2,
            kv_cache_gib=1,
            enforce_eager=True,
        )

    @property
    def base_url(self) -> str:
        return self.cfg.base_url

    @property
    def openai_url(self) -> str:
        return self.cfg.base_url + "/v1"

    @property
    def model(self) -> str:
        return str(self.model_dir)  # vLLM's default served name is the path

    def start(self) -> None:
        self.proc = start_server(self.cfg, self.python, log_path=self.log_path)
        try:
            self.start_seconds = wait_healthy(self.base_url, START_TIMEOUT_S, proc=self.proc, log_path=self.log_path)
        except Exception:
            self.stop()
            raise

    def ensure_running(self) -> VLLMTestServer:
        if self.proc is None or self.proc.poll() is not None:
            self.cfg = dataclasses.replace(self.cfg, port=free_port())
            self.start()
        return self

    def restart(self) -> float:
        """Start again on the same port (after `kill()`); returns the seconds it took."""
        if self.proc is not None and self.proc.poll() is None:
            raise RuntimeError("the vLLM test server is still running; kill() it first")
        self.start()
        return self.start_seconds

    def kill(self) -> None:
        """SIGKILL the whole server (API process, engine and workers): a crash, not a shutdown."""
        if self.proc is not None and self.proc.poll() is None:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None:
            stop_server(self.proc)


@pytest.fixture(scope="module")
def vllm_model_dir(tiny_model_dir) -> Path:
    """What `vllm_server` serves (conftest's tiny random model); override it in a module to serve
    another directory, e.g. `builtin_model_dir`."""
    return Path(tiny_model_dir)


@pytest.fixture(scope="module")
def _vllm_module_server(vllm_model_dir, tmp_path_factory):
    require(VLLM_PYTHON.exists(),
            f"vLLM CPU environment missing ({VLLM_PYTHON}); create it with `bash scripts/setup_vllm_env.sh`")
    try:
        python = find_vllm_python(VLLM_PYTHON)
    except VLLMNotInstalled as exc:
        require(False, f"{VLLM_PYTHON} exists but cannot import vllm: {exc}")
    log_path = tmp_path_factory.mktemp("vllm-log") / "server.log"
    server = VLLMTestServer(Path(vllm_model_dir), log_path, python)
    server.start()
    yield server
    server.stop()


@pytest.fixture
def vllm_server(_vllm_module_server) -> VLLMTestServer:
    """The module's server, restarted first if an earlier test killed it."""
    return _vllm_module_server.ensure_running()


def make_random_lora(base_dir: Path, out_dir: Path, *, seed: int = 1, rank: int = LORA_RANK, scale: float = 0.5) -> Path:
    """A PEFT LoRA adapter for `base_dir` whose B matrices are random (PEFT initialises them to
    zero, which would leave outputs unchanged), saved with `save_pretrained`. Seconds on CPU."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(base_dir, dtype=torch.float32)
    cfg = LoraConfig(
        r=rank,
        lora_alpha=2 * rank,
        lora_dropout=0.0,
        target_modules=["q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj"],
        task_type="CAUSAL_LM",
    )
    peft_model = get_peft_model(model, cfg)
    gen = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, param in peft_model.named_parameters():
            if "lora_B" in name:
                param.copy_(torch.randn(param.shape, generator=gen) * scale)
    peft_model.save_pretrained(out_dir)
    return Path(out_dir)
