"""A real, throwaway PostgreSQL server: Debian's binaries, a temporary data directory, a free
port, trust authentication on 127.0.0.1 only. The tests' fixtures, the benchmarks and
deploy/ops/local_topology.py (without `--dsn`) start theirs here.

    with PostgresServer.start() as pg:
        url = pg.create_database()     # postgresql://postgres@127.0.0.1:PORT/t_1a2b...

Design choices:
- It lives with the operations scripts, not under tests/, so that shipped code never imports
  the tests.
- The binaries come from the `postgresql` Debian package (`/usr/lib/postgresql/<v>/bin`, or
  `pg_ctl` on PATH); `available()` says why not when they are absent, and the fixtures skip with
  that reason (fail under CI: tests/prereqs.py's `require`). `scripts/setup_test_deps.sh` installs the
  package in CI.
- `initdb` and `pg_ctl` refuse to run as root, so as root they run as the `postgres` user
  (`runuser`) on a directory it owns; otherwise as the current user.
- One server per test session; one database per test (`CREATE DATABASE` is a fraction of a
  second), so tests never see each other's rows, advisory locks or notifications.
- `fsync` is off by default: tests kill processes, never the machine, and a killed backend loses
  nothing committed either way. Benchmarks start it with `durable=True` (the server's defaults).
"""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import tempfile
import uuid
from dataclasses import dataclass
from pathlib import Path


def _bin_dir() -> Path | None:
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/pg_ctl"), key=lambda p: int(p.split("/")[4]))
    if found:
        return Path(found[-1]).parent
    pg_ctl = shutil.which("pg_ctl")
    return Path(pg_ctl).parent if pg_ctl else None


def available() -> str | None:
    """None when a server can be started here, else the reason it cannot."""
    if _bin_dir() is None:
        return "PostgreSQL binaries not found (apt-get install postgresql; scripts/setup_test_deps.sh does)"
    try:
        import psycopg  # noqa: F401
    except ImportError:
        return "psycopg is not installed"
    if os.geteuid() == 0 and shutil.which("runuser") is None:
        return "running as root without runuser: initdb refuses root"
    if os.geteuid() == 0:
        try:
            import pwd

            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres user to run initdb as"
    return None


def free_port() -> int:
    """A TCP port free on 127.0.0.1 now (the OS picks it)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class PostgresServer:
    root: Path
    port: int
    bin_dir: Path

    @property
    def admin_url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    @classmethod
    def start(cls, *, durable: bool = False, max_connections: int = 200) -> "PostgresServer":
        reason = available()
        if reason:
            raise RuntimeError(reason)
        bin_dir = _bin_dir()
        root = Path(tempfile.mkdtemp(prefix="advisor-pg-"))
        server = cls(root=root, port=free_port(), bin_dir=bin_dir)
        if os.geteuid() == 0:
            shutil.chown(root, "postgres", "postgres")
        server._run("initdb", "-D", str(root / "data"), "-U", "postgres", "--auth=trust", "-E", "UTF8",
                    "--no-instructions", "--locale=C.UTF-8")
        options = [f"-c port={server.port}", "-c listen_addresses=127.0.0.1",
                   f"-c unix_socket_directories={root}", f"-c max_connections={max_connections}"]
        if not durable:
            options += ["-c fsync=off", "-c full_page_writes=off"]
        server._run("pg_ctl", "-D", str(root / "data"), "-l", str(root / "server.log"), "-w", "-t", "60",
                    "-o", " ".join(options), "start")
        return server

    def _run(self, tool: str, *args: str) -> None:
        cmd = [str(self.bin_dir / tool), *args]
        if os.geteuid() == 0:
            cmd = ["runuser", "-u", "postgres", "--", *cmd]
        done = subprocess.run(cmd, capture_output=True, text=True, timeout=120, cwd=self.root)
        if done.returncode != 0:
            log = self.root / "server.log"
            tail = log.read_text()[-2000:] if log.is_file() else ""
            raise RuntimeError(f"{tool} failed ({done.returncode}): {done.stderr[-2000:]}\n{tail}")

    def create_database(self, name: str | None = None) -> str:
        import psycopg

        name = name or "t_" + uuid.uuid4().hex[:12]
        with psycopg.connect(self.admin_url, autocommit=True) as conn:
            conn.execute(f'CREATE DATABASE "{name}"')
        return f"postgresql://postgres@127.0.0.1:{self.port}/{name}"

    def stop(self) -> None:
        try:
            self._run("pg_ctl", "-D", str(self.root / "data"), "-m", "immediate", "-w", "stop")
        finally:
            shutil.rmtree(self.root, ignore_errors=True)

    def __enter__(self) -> "PostgresServer":
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

