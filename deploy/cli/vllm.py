"""vLLM commands: `advisor serve-model` (alias `advisor vllm serve`) and `advisor vllm setup|status|load|unload`.

`serve-model` replaces itself with the vLLM server process (exec), so Ctrl-C, systemd and
container signals reach vLLM directly and its exit code is the command's. Flags override the
`vllm` settings for one run.
"""

from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
import sys
from pathlib import Path
from typing import Optional

import typer
from rich.console import Console
from rich.table import Table

from deploy.cli.common import settings_of
from deploy.serving.vllm import (
    SETUP_SCRIPT,
    VLLMError,
    VLLMNotInstalled,
    build_command,
    build_env,
    find_vllm_python,
    has_nvidia_gpu,
    install_instructions,
    is_healthy,
    list_models,
    load_adapter,
    server_config,
    unload_adapter,
)

err = Console(stderr=True)


def _fail(message: str, code: int = 1) -> typer.Exit:
    """Print a plain (unwrapped, unmarked-up) error: it often holds commands to copy."""
    err.print(message, style="red", markup=False, soft_wrap=True, highlight=False)
    return typer.Exit(code)


def serve_model(
    ctx: typer.Context,
    model: Optional[str] = typer.Option(None, "--model", help="HF model directory (default: vllm.model, else the built-in model)."),
    host: Optional[str] = typer.Option(None, "--host"),
    port: Optional[int] = typer.Option(None, "--port"),
    tensor_parallel_size: Optional[int] = typer.Option(None, "--tensor-parallel-size", "--tp", help="GPUs per model replica (split each layer)."),
    pipeline_parallel_size: Optional[int] = typer.Option(None, "--pipeline-parallel-size", "--pp", help="Pipeline stages (split the layers; across nodes with Ray)."),
    max_lora_rank: Optional[int] = typer.Option(None, "--max-lora-rank"),
    max_loras: Optional[int] = typer.Option(None, "--max-loras", help="Adapters served in one batch."),
    max_model_len: Optional[int] = typer.Option(None, "--max-model-len"),
    kv_cache_gib: Optional[float] = typer.Option(None, "--kv-cache-gib", help="CPU only: KV cache size (GiB)."),
    dry_run: bool = typer.Option(False, "--dry-run", help="Print the command and environment, start nothing."),
) -> None:
    """Start the vLLM OpenAI-compatible server for the configured model, with runtime LoRA loading."""
    settings = settings_of(ctx)
    cfg = server_config(settings, model=model)
    flags = {
        "host": host,
        "port": port,
        "tensor_parallel_size": tensor_parallel_size,
        "pipeline_parallel_size": pipeline_parallel_size,
        "max_lora_rank": max_lora_rank,
        "max_loras": max_loras,
        "max_model_len": max_model_len,
        "kv_cache_gib": kv_cache_gib if cfg.kv_cache_gib is not None else None,
    }
    cfg = dataclasses.replace(cfg, **{k: v for k, v in flags.items() if v is not None})
    try:
        python = find_vllm_python(settings.vllm.python)
    except VLLMNotInstalled as exc:
        if not dry_run:
            raise _fail(str(exc)) from None
        python = settings.vllm.python
    argv, env = build_command(cfg, python), build_env(cfg)
    line = " ".join(f"{k}={v}" for k, v in env.items()) + " " + shlex.join(argv)
    if dry_run:
        print(line.strip())
        return
    if not Path(cfg.model).exists() and not _looks_like_hub_id(cfg.model):
        raise _fail(f"The model directory {cfg.model} does not exist. Build the built-in model with `advisor model build`, or set vllm.model.")
    err.print(f"starting vLLM on {cfg.base_url}: {line.strip()}", markup=False, soft_wrap=True, highlight=False)
    sys.stdout.flush()
    os.execve(argv[0], argv, {**os.environ, **env})


def _looks_like_hub_id(model: str) -> bool:
    return "/" in model and not model.startswith(("/", ".", "~")) and model.count("/") == 1


def setup(
    venv: Path = typer.Option(Path(".venv-vllm"), "--venv", help="Where to create the environment."),
    cpu: bool = typer.Option(False, "--cpu", help="Build the CPU environment even on a GPU machine."),
) -> None:
    """Create the separate vLLM environment (CPU build; on a GPU machine, say what to install)."""
    if has_nvidia_gpu() and not cpu:
        print(install_instructions(gpu=True))
        raise typer.Exit(0)
    if not SETUP_SCRIPT.exists():
        raise _fail(f"{SETUP_SCRIPT} is missing (it ships with the source checkout).\n" + install_instructions(gpu=False))
    raise typer.Exit(subprocess.call(["bash", str(SETUP_SCRIPT), str(venv)]))


def _url(ctx: typer.Context, url: Optional[str]) -> str:
    if url:
        return url
    vs = settings_of(ctx).vllm
    host = "127.0.0.1" if vs.host in ("0.0.0.0", "::") else vs.host
    return f"http://{host}:{vs.port}"


URL = typer.Option(None, "--url", help="vLLM server (default: http://vllm.host:vllm.port).")


def status(ctx: typer.Context, url: Optional[str] = URL) -> None:
    """Health and served models (base and adapters) of the vLLM server."""
    base = _url(ctx, url)
    if not is_healthy(base):
        raise _fail(f"vLLM at {base} is not healthy or not running. Start it with `advisor serve-model`.")
    table = Table("model", "parent", "path")
    for m in list_models(base):
        table.add_row(m["id"], m.get("parent") or "", m.get("root") or "")
    Console().print(f"vLLM at {base}: healthy")
    Console().print(table)


def load(ctx: typer.Context, name: str = typer.Argument(..., help="Model name clients will use."), path: Path = typer.Argument(..., help="PEFT adapter directory, as the server sees it."), url: Optional[str] = URL) -> None:
    """Load a LoRA adapter into the running server (no restart)."""
    _call(load_adapter, _url(ctx, url), name, str(path))
    err.print(f"loaded {name} from {path}")


def unload(ctx: typer.Context, name: str = typer.Argument(...), url: Optional[str] = URL) -> None:
    """Unload a LoRA adapter from the running server."""
    _call(unload_adapter, _url(ctx, url), name)
    err.print(f"unloaded {name}")


def _call(fn, *args) -> None:
    try:
        fn(*args)
    except VLLMError as exc:
        raise _fail(str(exc)) from None


def register(app: typer.Typer) -> None:
    app.command("serve-model")(serve_model)
    vllm_app = typer.Typer(help="The vLLM server: environment, health, LoRA adapters.", no_args_is_help=True)
    vllm_app.command("serve", help="Same as `advisor serve-model`.")(serve_model)
    vllm_app.command("setup")(setup)
    vllm_app.command("status")(status)
    vllm_app.command("load")(load)
    vllm_app.command("unload")(unload)
    app.add_typer(vllm_app, name="vllm")
