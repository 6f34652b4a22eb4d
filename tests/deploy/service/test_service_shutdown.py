"""`advisor serve` as a real process: SIGTERM lets short answers finish, stops long ones after the
grace period and stores them as interrupted, and releases the database."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

import httpx
from service_helpers import free_port

from store import Store

REPO = Path(__file__).resolve().parents[3]


def _stream(url: str, body: dict, first_delta: threading.Event, out: dict) -> None:
    try:
        with httpx.Client(timeout=120) as c, c.stream("POST", f"{url}/api/messages", json=body) as r:
            for line in r.iter_lines():
                if line.startswith("data: "):
                    event = json.loads(line[6:])
                    if event["type"] == "start":
                        out["conversation_id"] = event["conversation_id"]
                    if event["type"] == "delta":
                        first_delta.set()
    except httpx.HTTPError as exc:  # the server may close the stream at shutdown
        out["error"] = str(exc)
    finally:
        first_delta.set()


def test_sigterm_finishes_or_interrupts_answers_and_releases_the_database(tiny_model_dir, tmp_path):
    port = free_port()
    env = {**os.environ, "ADVISOR_BACKEND__KIND": "transformers", "ADVISOR_BACKEND__MODEL": str(tiny_model_dir),
           "ADVISOR_BACKEND__DEVICE": "cpu", "ADVISOR_BACKEND__STEERING": "steerlm",
           "ADVISOR_SCHEDULE__EXTRACT_EVERY_MINUTES": "0", "ADVISOR_SCHEDULE__TRAIN_CRON": "",
           "ADVISOR_GUARD__ENABLED": "false"}  # arbitrary verdicts on gibberish; tests/chat/test_guard_service.py
    env.pop("ADVISOR_CONFIG", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "deploy.wiring", "--data-dir", str(tmp_path), "serve", "--port", str(port),
         "--grace", "0.5", "--log-level", "warning"],
        cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=2).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert proc.poll() is None, proc.stdout.read()
            assert time.monotonic() < deadline, "the service did not start"
            time.sleep(0.2)
        short, long_ = {}, {}
        short_started, long_started = threading.Event(), threading.Event()
        t1 = threading.Thread(target=_stream, args=(url, {"content": "short one", "stream": True,
                                                          "max_new_tokens": 24}, short_started, short))
        t1.start()
        short_started.wait(60)
        t2 = threading.Thread(target=_stream, args=(url, {"content": "long one", "stream": True,
                                                          "max_new_tokens": 900}, long_started, long_))
        t2.start()
        long_started.wait(60)  # the long answer is streaming (a fixed sleep raced a loaded machine)
        proc.send_signal(signal.SIGTERM)
        proc.wait(timeout=90)
        t1.join(30)
        t2.join(30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, proc.stdout.read()
    # The process let go of the database: it opens, and both questions and answers are there.
    with Store(tmp_path / "advisor.duckdb") as store:
        statuses = {}
        for out in (short, long_):
            msgs = store.conversations.get_messages(out["conversation_id"])
            assert [m.role for m in msgs] == ["user", "assistant"], msgs
            statuses[msgs[0].content] = msgs[1].status
    assert statuses["short one"] == "complete"
    assert statuses["long one"] == "interrupted"
