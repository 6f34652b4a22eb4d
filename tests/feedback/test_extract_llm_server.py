"""`advisor extract eval --extractor llm --url --model` against an OpenAI-compatible server: a small
fake one that answers in the paper's format, so the path (settings, client, concurrent requests,
the paper's prompt over whole conversations, validation, metrics) runs without a model. The real
vLLM server and the real model: `bench/extract_llm.py` (figures in docs/results.md)."""

from __future__ import annotations

import http.server
import json
import threading
import time

from typer.testing import CliRunner

from deploy.wiring import build_cli

GOLD = [
    {"id": "g1", "messages": [
        {"role": "user", "content": "How do I fall asleep faster?"},
        {"role": "assistant", "content": "Keep a schedule."},
        {"role": "user", "content": "Thanks! That helps."},
        {"role": "assistant", "content": "Glad to help."},
        {"role": "user", "content": "What about naps?"}],
     "feedback": [{"message": 2, "category": "positive", "span": "Thanks! That helps."}]},
    {"id": "g2", "messages": [
        {"role": "user", "content": "Best tea?"}, {"role": "assistant", "content": "Coffee."},
        {"role": "user", "content": "No, I asked about tea, not coffee."}],
     "feedback": [{"message": 2, "category": "aware_with_correction", "span": "No, I asked about tea, not coffee."}]},
    {"id": "g3", "messages": [
        {"role": "user", "content": "Hi"}, {"role": "assistant", "content": "Hello."},
        {"role": "user", "content": "Tell me a joke."}], "feedback": []},
]


class FakeOpenAI(http.server.ThreadingHTTPServer):
    """/v1/models and /v1/chat/completions; answers each conversation's prompt in the paper's
    format, quoting 'Thanks! That helps.' when the conversation has it (and an invented span
    always), and records how many requests were in flight at once."""

    def __init__(self) -> None:
        self.prompts: list[str] = []
        self.in_flight = self.max_in_flight = 0
        self.lock = threading.Lock()
        super().__init__(("127.0.0.1", 0), self._Handler)

    class _Handler(http.server.BaseHTTPRequestHandler):
        def log_message(self, *args) -> None:
            pass

        def _send(self, payload: dict) -> None:
            data = json.dumps(payload).encode()
            self.send_response(200)
            self.send_header("content-type", "application/json")
            self.send_header("content-length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):  # noqa: N802
            self._send({"object": "list", "data": [{"id": "fake-model", "object": "model", "created": 0,
                                                    "owned_by": "test"}]})

        def do_POST(self):  # noqa: N802
            server: FakeOpenAI = self.server
            body = json.loads(self.rfile.read(int(self.headers["content-length"])))
            with server.lock:
                server.in_flight += 1
                server.max_in_flight = max(server.max_in_flight, server.in_flight)
                server.prompts.append(body["messages"][-1]["content"])
            time.sleep(0.3)  # long enough for concurrent requests to overlap
            prompt = body["messages"][-1]["content"]
            items = [{"User Response Pattern": "Make Aware without Correction (UR3)", "User Response Text": "You lie."}]
            if "Thanks! That helps." in prompt:
                items.append({"User Response Pattern": "Positive Feedback (UR5)", "User Response Text": "Thanks! That helps."})
            answer = "\n\n".join(json.dumps(i, indent=0) for i in items)
            with server.lock:
                server.in_flight -= 1
            self._send({"id": "x", "object": "chat.completion", "created": 0, "model": body["model"],
                        "choices": [{"index": 0, "finish_reason": "stop",
                                     "message": {"role": "assistant", "content": answer}}],
                        "usage": {"prompt_tokens": 1, "completion_tokens": 1, "total_tokens": 2}})


def test_eval_on_an_openai_compatible_server(tmp_path):
    gold = tmp_path / "gold.jsonl"
    gold.write_text("".join(json.dumps(g) + "\n" for g in GOLD))
    server = FakeOpenAI()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    url = f"http://127.0.0.1:{server.server_address[1]}/v1"
    try:
        args = ["--data-dir", str(tmp_path / "data"), "extract", "eval", "--gold", str(gold), "--extractor", "llm",
                "--url", url, "--model", "fake-model", "--batch-size", "3", "--json"]
        out = CliRunner().invoke(build_cli(), args)
    finally:
        server.shutdown()
    assert out.exit_code == 0, out.output
    metrics = json.loads(out.stdout.strip().splitlines()[-1])
    assert len(server.prompts) == 3 and server.max_in_flight == 3  # one prompt per conversation, all at once
    assert all(p.startswith("There are five different patterns") for p in server.prompts)
    assert any(p.endswith("# user: Thanks! That helps.\n# assistant: Glad to help.\n# user: What about naps?\n")
               for p in server.prompts)  # the whole conversation (requests arrive in any order)
    assert metrics["span_precision"]["value"] == 1.0 and metrics["span_recall"]["value"] == 0.5
    assert metrics["extractor_stats"]["span_not_in_user_message"] == 3  # the invented span, every time
    assert metrics["conversations_per_s"] > 0 and metrics["extractor"] == "llm"
