"""Run the real service (create_app + uvicorn) on a free port for service and browser tests.

The server runs in a thread of the test process with the tiny random model (fast gibberish),
so a test can also look straight into its store. `LiveService.client()` gives an httpx client
with its own cookie jar (= its own anonymous user).
"""

from __future__ import annotations

import socket
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
import uvicorn

ADMIN_TOKEN = "test-admin-token"
ADMIN_PASSWORD = "operator-pass"
CHROMIUM_ARGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-background-networking",
                 "--disable-component-update", "--disable-sync"]


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def judge_model_dir() -> Path:
    from conftest import cache_dir

    return cache_dir() / "models" / "smollm2-135m-instruct"


def tiny_settings(data_dir: Path, model_dir: Path, **overrides: Any):
    from deploy.settings import load_settings

    values = {
        "data_dir": str(data_dir), "backend.kind": "transformers", "backend.model": str(model_dir),
        "backend.device": "cpu", "backend.steering": "steerlm", "backend.max_new_tokens": 12,
        "server.admin_token": ADMIN_TOKEN, "server.admin_password": ADMIN_PASSWORD,
        "server.max_message_chars": 4000, "schedule.extract_every_minutes": 0, "schedule.train_cron": "",
        # Tests that mistype a password on purpose retry at once; tests/deploy/service/test_sessions.py
        # times the throttle.
        "server.login_delay_s": 0.0,
        # The judges read the served base model's features; `make test` builds it in the test cache.
        "judges.model_dir": str(judge_model_dir()),
        # The safety guard's verdicts on the tiny model's gibberish would be arbitrary: the guard's own
        # tests (tests/chat/test_guard_service.py) switch it on with a deterministic judge.
        "guard.enabled": False, "guard.system_prompt": "",
    }
    values.update(overrides)
    return load_settings(environ={}, overrides=values)


@dataclass
class LiveService:
    app: Any
    server: uvicorn.Server
    thread: threading.Thread
    url: str

    @property
    def services(self):
        return self.app.state.services

    @property
    def store(self):
        return self.services.store

    def client(self, **kwargs: Any) -> httpx.Client:
        return httpx.Client(base_url=self.url, timeout=120, **kwargs)

    def admin(self) -> httpx.Client:
        return self.client(headers={"Authorization": f"Bearer {ADMIN_TOKEN}"})

    def stop(self) -> None:
        self.server.should_exit = True
        self.thread.join(60)


def start_service(settings, **create_kwargs: Any) -> LiveService:
    from deploy.wiring import create_app

    app = create_app(settings, **create_kwargs)
    port = free_port()
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", timeout_graceful_shutdown=5)
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, name="uvicorn-test", daemon=True)
    thread.start()
    deadline = time.monotonic() + 120
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            raise RuntimeError("the test service did not start")
        time.sleep(0.05)
    return LiveService(app=app, server=server, thread=thread, url=f"http://127.0.0.1:{port}")


@pytest.fixture(scope="module")
def live(tiny_model_dir, tmp_path_factory):
    """One service per test module; tests isolate themselves by using their own clients (users)."""
    service = start_service(tiny_settings(tmp_path_factory.mktemp("service"), tiny_model_dir))
    yield service
    service.stop()


def sse_events(response: httpx.Response) -> list[dict]:
    import json

    events = []
    for line in response.iter_lines():
        if line.startswith("data: ") and line != "data: [DONE]":
            events.append(json.loads(line[len("data: "):]))
    return events


def down_settings(data_dir: Path, **overrides: Any):
    """A service whose model server is down (nothing listens on the port)."""
    values = {"backend.kind": "openai", "backend.base_url": f"http://127.0.0.1:{free_port()}/v1",
              "backend.model": "advisor-down", "backend.timeout_s": 3.0, "backend.max_retries": 0}
    values.update(overrides)
    return tiny_settings(data_dir, Path("/nonexistent"), **values)
