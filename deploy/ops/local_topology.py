"""The production topology of deploy/ops/compose.yaml on one machine, without Docker: PostgreSQL,
the vLLM CPU server with runtime LoRA, two `advisor serve` replicas on that store pointing at vLLM,
and nginx in front of them with deploy/ops/nginx.conf.

    .venv/bin/python deploy/ops/local_topology.py --model DIR       # Ctrl-C tears it all down
    .venv/bin/python deploy/ops/local_topology.py --dsn postgresql://... --replicas 3 --port 7860

Design choices:
- Every process is the command production runs: `advisor serve-model` (which execs vLLM) and
  `advisor serve`, configured by the same ADVISOR_* variables as the compose file; ADVISOR_*
  variables already in the caller's environment pass through (the topology's own win).
- nginx runs deploy/ops/nginx.conf itself: only the listen port and the upstream's server line
  are substituted (`render_nginx_conf`), inside a minimal main file with a private prefix, so the
  file tested here is the file shipped. A change to those two lines fails loudly here.
- Without `--dsn` a throwaway PostgreSQL is started (deploy/ops/pg_throwaway.py: Debian's
  binaries, a temporary directory, fsync on), stopped and removed at the end.
- Each replica and vLLM get their own process group: `kill_replica` SIGKILLs the whole group, as
  a container's death would (a training subprocess dies with its replica), and a replica comes
  back on the same port (`start_replica`), as a supervisor would restart it.
- `Users` is the load used to check it: simulated users posting turns through nginx, each on
  one conversation and one cookie jar, every acknowledged turn recorded (tests/deploy/ops/test_topology.py,
  bench/topology.py).
"""

from __future__ import annotations

import argparse
import os
import re
import secrets
import shutil
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from deploy.ops.pg_throwaway import PostgresServer, free_port
from deploy.serving.vllm import wait_healthy as wait_vllm_healthy

REPO = Path(__file__).resolve().parents[2]
NGINX_CONF = Path(__file__).with_name("nginx.conf")
SERVE = [sys.executable, "-m", "deploy.wiring", "serve"]
SERVE_MODEL = [sys.executable, "-m", "deploy.wiring", "serve-model"]
SERVED_MODEL_NAME = "advisor"  # what the replicas ask vLLM for, as in compose.yaml


def nginx_binary() -> str | None:
    found = shutil.which("nginx") or "/usr/sbin/nginx"  # Debian's, outside a non-root user's PATH
    return found if os.access(found, os.X_OK) else None


# --------------------------------------------------------------------------- nginx


def render_nginx_conf(listen_port: int, replica_ports: Sequence[int]) -> str:
    """deploy/ops/nginx.conf with its listen port and upstream servers made local."""
    text = NGINX_CONF.read_text()
    text, n_listen = re.subn(r"^(\s*)listen 80;", rf"\g<1>listen 127.0.0.1:{listen_port};", text, flags=re.M)
    server = re.search(r"^(\s*)server advisor:7860( [^;]*)?;\n", text, flags=re.M)
    if n_listen != 1 or server is None:
        raise RuntimeError(f"{NGINX_CONF} no longer has the `listen 80;` and `server advisor:7860 ...;` lines "
                           "this script substitutes: update render_nginx_conf to match it")
    indent, params = server.group(1), server.group(2) or ""
    lines = "".join(f"{indent}server 127.0.0.1:{port}{params};\n" for port in replica_ports)
    return text[:server.start()] + lines + text[server.end():]


def nginx_main_conf(prefix: Path) -> str:
    """The main file around the rendered server block: private pid, logs and temp paths."""
    user = "user root;\n" if os.geteuid() == 0 else ""  # workers would drop to `nobody`, locked out of prefix
    temps = "".join(f"    {kind}_temp_path {prefix}/tmp/{kind};\n" for kind in ("client_body", "proxy", "fastcgi",
                                                                              "uwsgi", "scgi"))
    return (f"{user}daemon off;\nworker_processes 1;\npid {prefix}/nginx.pid;\nerror_log {prefix}/error.log warn;\n"
            "events { worker_connections 1024; }\nhttp {\n"
            # the upstreams come last: a request retried after a refused connection lists both
            "    log_format upstream '$msec $status $request_time $request_method $upstream_addr';\n"
            f"    access_log {prefix}/access.log upstream;\n{temps}    include {prefix}/advisor.conf;\n}}\n")


def write_nginx_conf(prefix: Path, listen_port: int, replica_ports: Sequence[int]) -> Path:
    (prefix / "tmp").mkdir(parents=True, exist_ok=True)
    (prefix / "advisor.conf").write_text(render_nginx_conf(listen_port, replica_ports))
    main = prefix / "nginx.conf"
    main.write_text(nginx_main_conf(prefix))
    return main


def start_nginx(prefix: Path, listen_port: int, replica_ports: Sequence[int]) -> subprocess.Popen:
    binary = nginx_binary()
    if binary is None:
        raise RuntimeError("nginx not found: apt-get install nginx (Debian), or your system's package")
    main = write_nginx_conf(prefix, listen_port, replica_ports)
    cmd = [binary, "-p", str(prefix), "-e", str(prefix / "error.log"), "-c", str(main)]
    check = subprocess.run([*cmd, "-t"], capture_output=True, text=True)
    if check.returncode != 0:
        raise RuntimeError(f"nginx rejected the rendered configuration:\n{check.stderr}")
    return subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=(prefix / "stderr.log").open("w"),
                            start_new_session=True)


# --------------------------------------------------------------------------- processes


@dataclass
class Replica:
    port: int
    log: Path
    proc: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def alive(self) -> bool:
        return self.proc is not None and self.proc.poll() is None

    def health(self) -> dict:
        return httpx.get(f"{self.url}/healthz", timeout=10).json()


def wait_healthy(url: str, proc: subprocess.Popen, log: Path, timeout: float) -> float:
    """Seconds until `url`/healthz says ok; raises with the log's tail if the process dies first."""
    t0 = time.monotonic()
    while time.monotonic() - t0 < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"{log.stem} exited ({proc.returncode}) while starting:\n{log.read_text()[-3000:]}")
        try:
            if httpx.get(f"{url}/healthz", timeout=5).json().get("status") == "ok":
                return time.monotonic() - t0
        except (httpx.HTTPError, ValueError):
            pass
        time.sleep(0.5)
    raise RuntimeError(f"{log.stem} not healthy after {timeout:.0f} s:\n{log.read_text()[-3000:]}")


def kill_group(proc: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    if proc.poll() is None:
        try:
            os.killpg(proc.pid, sig)
        except ProcessLookupError:
            pass
    proc.wait(60)


@dataclass
class Topology:
    work: Path
    env: dict[str, str]
    port: int
    vllm_port: int
    replicas: list[Replica]
    serve: list[str] = field(default_factory=lambda: list(SERVE))
    vllm: subprocess.Popen | None = None
    nginx: subprocess.Popen | None = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def vllm_url(self) -> str:
        return f"http://127.0.0.1:{self.vllm_port}"

    def start_replica(self, i: int) -> None:
        """Start replica `i` on its port (again, after a kill: a supervisor's restart)."""
        r = self.replicas[i]
        r.proc = subprocess.Popen([*self.serve, "--host", "127.0.0.1", "--port", str(r.port), "--log-level", "warning"],
                                  cwd=REPO, env=self.env, stdout=r.log.open("a"), stderr=subprocess.STDOUT,
                                  start_new_session=True)

    def wait_replica(self, i: int, timeout: float = 300) -> float:
        r = self.replicas[i]
        return wait_healthy(r.url, r.proc, r.log, timeout)

    def kill_replica(self, i: int) -> None:
        """SIGKILL replica `i` and everything it started: a crash, not a shutdown."""
        kill_group(self.replicas[i].proc)

    def leader(self, timeout: float = 30) -> int:
        """The index of the live replica that leads the scheduler."""
        t0 = time.monotonic()
        while time.monotonic() - t0 < timeout:
            leading = [i for i, r in enumerate(self.replicas) if r.alive and _leads(r)]
            if len(leading) == 1:
                return leading[0]
            time.sleep(0.2)
        raise RuntimeError(f"no single leader among the replicas after {timeout:.0f} s")

    def route_to(self, indices: Sequence[int]) -> None:
        """Point nginx at these replicas only (a graceful reload: no request dropped)."""
        write_nginx_conf(self.work / "nginx", self.port, [self.replicas[i].port for i in indices])
        os.kill(self.nginx.pid, signal.SIGHUP)
        time.sleep(1.0)  # the old workers finish their requests; new connections get the new upstreams

    def down(self) -> None:
        procs = [p for p in (self.nginx, *(r.proc for r in self.replicas), self.vllm) if p is not None]
        for proc in procs:
            if proc.poll() is None:
                os.killpg(proc.pid, signal.SIGTERM)
        for proc in procs:
            try:
                proc.wait(30)
            except subprocess.TimeoutExpired:
                kill_group(proc)


def _leads(replica: Replica) -> bool:
    try:
        return bool(replica.health().get("leading"))
    except (httpx.HTTPError, ValueError):
        return False


def topology_env(work: Path, dsn: str, vllm_port: int, admin_token: str, extra: dict[str, str]) -> dict[str, str]:
    """The environment of every advisor process: compose.yaml's `advisor` service, made local."""
    data = work / "data"
    return {**os.environ, **extra,
            "ADVISOR_DATA_DIR": str(data),
            "ADVISOR_STORE__URL": dsn,
            "ADVISOR_BACKEND__KIND": "openai",
            "ADVISOR_BACKEND__BASE_URL": f"http://127.0.0.1:{vllm_port}/v1",
            "ADVISOR_BACKEND__MODEL": SERVED_MODEL_NAME,
            "ADVISOR_VLLM__HOST": "127.0.0.1",
            "ADVISOR_VLLM__PORT": str(vllm_port),
            "ADVISOR_VLLM__ADAPTER_DIR": str(data / "adapters"),
            "ADVISOR_SERVER__ADMIN_TOKEN": admin_token}


@contextmanager
def up(work: Path, *, model: str = "", dsn: str = "", replicas: int = 2, port: int = 0, admin_token: str = "",
       env: dict[str, str] | None = None, serve: Sequence[str] = SERVE) -> Iterator[Topology]:
    """Start everything, wait until healthy, yield the topology; tear it all down on exit.
    `serve` is the replica command (tests add a job kind to it); `env` adds ADVISOR_* settings."""
    work.mkdir(parents=True, exist_ok=True)
    pg = None
    if not dsn:
        pg = start_postgres()
        dsn = pg.create_database("advisor")
    vllm_port = free_port()
    topo = Topology(work=work, env=topology_env(work, dsn, vllm_port, admin_token or secrets.token_hex(16), env or {}),
                    port=port or free_port(), vllm_port=vllm_port, serve=list(serve),
                    replicas=[Replica(free_port(), work / f"replica{i}.log") for i in range(replicas)])
    try:
        vllm_log = work / "vllm.log"
        topo.vllm = subprocess.Popen([*SERVE_MODEL, *(["--model", model] if model else [])], cwd=REPO, env=topo.env,
                                     stdout=vllm_log.open("w"), stderr=subprocess.STDOUT, start_new_session=True)
        for i in range(replicas):  # they wait for vLLM themselves (their health says degraded until then)
            topo.start_replica(i)
        wait_vllm_healthy(topo.vllm_url, 600, proc=topo.vllm, log_path=vllm_log)
        for i in range(replicas):
            topo.wait_replica(i)
        topo.nginx = start_nginx(work / "nginx", topo.port, [r.port for r in topo.replicas])
        wait_healthy(topo.url, topo.nginx, work / "nginx" / "error.log", 30)
        yield topo
    finally:
        topo.down()
        if pg is not None:
            pg.stop()


def start_postgres() -> PostgresServer:
    """A throwaway PostgreSQL server (deploy/ops/pg_throwaway.py), durable like a real one."""
    return PostgresServer.start(durable=True)


# --------------------------------------------------------------------------- load


@dataclass
class Turn:
    user: int
    sent: float  # time.monotonic()
    done: float
    status: int  # HTTP status; 0 when no response came back
    conversation_id: str | None = None
    question_id: str | None = None
    answer_id: str | None = None

    @property
    def acknowledged(self) -> bool:
        return self.status == 200 and self.answer_id is not None


class Users:
    """`n` simulated users posting turns through `url` until stopped; every turn recorded."""

    def __init__(self, url: str, n: int, *, max_new_tokens: int = 8, pause_after_error_s: float = 0.1):
        self.url, self.n, self.max_new_tokens, self.pause = url, n, max_new_tokens, pause_after_error_s
        self.turns: list[Turn] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._user, args=(u,), daemon=True) for u in range(n)]

    def __enter__(self) -> Users:
        for t in self._threads:
            t.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(120)

    def acknowledged(self) -> list[Turn]:
        with self._lock:
            return [t for t in self.turns if t.acknowledged]

    def _user(self, u: int) -> None:
        conv = None
        with httpx.Client(timeout=120) as client:  # one cookie jar: nginx keeps the user on one replica
            k = 0
            while not self._stop.is_set():
                path = f"/api/conversations/{conv}/messages" if conv else "/api/messages"
                body = {"content": f"user {u} turn {k}: how do I stay calm at work?",
                        "max_new_tokens": self.max_new_tokens}
                turn = Turn(u, time.monotonic(), 0.0, 0, conv)
                try:
                    r = client.post(self.url + path, json=body)
                    turn.status = r.status_code
                    if r.status_code == 200:
                        got = r.json()
                        conv = turn.conversation_id = got["conversation_id"]
                        turn.question_id, turn.answer_id = got["user_message"]["id"], got["answer"]["id"]
                except httpx.HTTPError:
                    pass
                turn.done = time.monotonic()
                with self._lock:
                    self.turns.append(turn)
                if not turn.acknowledged:
                    self._stop.wait(self.pause)
                k += 1


# --------------------------------------------------------------------------- command line


def default_model() -> str:
    """What `advisor serve-model` would serve with your settings (the topology has its own data
    directory, so the model is resolved here, against yours)."""
    from deploy.serving.vllm import server_config
    from deploy.settings import load_settings

    model = server_config(load_settings(), gpu=False).model
    if not Path(model).exists():
        raise SystemExit(f"no model at {model}: build it with `advisor model build`, or pass --model DIR")
    return model


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--model", default="", help="model directory vLLM serves (default: your settings' "
                        "vllm.model, else the model `advisor model build` made in your data directory)")
    parser.add_argument("--dsn", default="", help="PostgreSQL URL to use (default: start a throwaway server)")
    parser.add_argument("--replicas", type=int, default=2)
    parser.add_argument("--port", type=int, default=7860, help="where nginx listens (127.0.0.1)")
    parser.add_argument("--work", type=Path, default=REPO / "data" / "local-topology",
                        help="logs, nginx files and the shared data directory")
    args = parser.parse_args()
    model = args.model or default_model()
    token = os.environ.get("ADVISOR_SERVER__ADMIN_TOKEN") or secrets.token_hex(16)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    with up(args.work, model=model, dsn=args.dsn, replicas=args.replicas, port=args.port,
            admin_token=token) as topo:
        print(f"Advisor on {topo.url} (nginx) -> replicas {', '.join(r.url for r in topo.replicas)}; "
              f"vLLM {topo.vllm_url}; admin token {token}; logs in {args.work}. Ctrl-C stops everything.",
              flush=True)
        try:
            stop.wait()
        except KeyboardInterrupt:
            pass
    print("stopped.")


if __name__ == "__main__":
    main()
