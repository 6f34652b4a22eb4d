"""Generation backends on real models: the tiny random built-in-family model for transformers
(streaming, batching, cancellation, adapter swaps with real PEFT LoRA adapters), and the
OpenAI-compatible client against a closed port (server down) and a small local HTTP server
speaking the streaming chat-completions protocol (request shape and parsing)."""

from __future__ import annotations

import json
import socket
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from chat.backends import (
    NO_ADAPTER,
    Backend,
    BackendError,
    BackendUnavailable,
    OpenAICompatibleBackend,
    SamplingParams,
)
from chat.backends.transformers_backend import TransformersBackend
from store.attributes import Attributes

QUESTION = [{"role": "user", "content": "How can I sleep better before an exam?"}]
GREEDY = SamplingParams(max_new_tokens=24, temperature=0.0)


@pytest.fixture(scope="module")
def backend(tiny_model_dir) -> TransformersBackend:
    b = TransformersBackend(tiny_model_dir, device="cpu")
    yield b
    b.close()


def make_lora(base_dir: Path, out_dir: Path, seed: int) -> Path:
    """A LoRA adapter with random, non-zero A and B (init_lora_weights=False), so it changes outputs."""
    import torch
    from peft import LoraConfig, get_peft_model
    from transformers import AutoModelForCausalLM

    torch.manual_seed(seed)
    model = AutoModelForCausalLM.from_pretrained(base_dir)
    config = LoraConfig(r=8, lora_alpha=64, target_modules=["q_proj", "v_proj", "o_proj"],
                        init_lora_weights=False)
    peft_model = get_peft_model(model, config)
    peft_model.save_pretrained(out_dir)
    return out_dir


@pytest.fixture(scope="module")
def adapters(tiny_model_dir, tmp_path_factory) -> tuple[Path, Path]:
    root = tmp_path_factory.mktemp("adapters")
    return make_lora(tiny_model_dir, root / "a1", 1), make_lora(tiny_model_dir, root / "a2", 2)


def greedy(b: Backend, adapter: str | None = None) -> str:
    return b.stream(QUESTION, attributes=Attributes(), steering="steerlm", params=GREEDY, adapter=adapter).read()


# --------------------------------------------------------------------------- transformers


def test_backend_satisfies_the_interface(backend):
    assert isinstance(backend, Backend)
    assert backend.kind == "transformers" and backend.active_adapter is None
    health = backend.health()
    assert health["ok"] and health["device"] == "cpu" and not health["busy"]


def test_stream_yields_token_deltas_and_reports_counts(backend):
    params = SamplingParams(max_new_tokens=20, temperature=0.8, seed=3)
    gen = backend.stream(QUESTION, attributes=Attributes(verbosity=4), steering="steerlm", params=params)
    deltas = list(gen)
    assert len(deltas) > 1  # streamed, not one blob at the end
    assert "".join(deltas) == gen.text
    assert 1 <= gen.completion_tokens <= 20
    assert gen.finish_reason in ("stop", "length")
    assert gen.finish_reason == "length" or gen.completion_tokens < 20
    ids, _ = backend.encode(QUESTION, attributes=Attributes(verbosity=4), steering="steerlm", max_new_tokens=20)
    assert gen.prompt_tokens == len(ids)
    assert 0 < gen.first_token_ms <= gen.latency_ms


def test_same_seed_same_answer(backend):
    params = SamplingParams(max_new_tokens=16, temperature=1.0, seed=11)
    a = backend.stream(QUESTION, attributes=None, steering="steerlm", params=params).read()
    b = backend.stream(QUESTION, attributes=None, steering="steerlm", params=params).read()
    assert a == b


def test_steerlm_attributes_reach_the_prompt(backend):
    attrs = Attributes(verbosity=0, complexity=3)
    ids, _ = backend.encode(QUESTION, attributes=attrs, steering="steerlm", max_new_tokens=10)
    prompt = backend.tokenizer.decode(ids)
    assert prompt.endswith("<|assistant|>\n<|attributes|>" + attrs.steerlm() + "\n")
    ids, _ = backend.encode(QUESTION, attributes=attrs, steering="instruct", max_new_tokens=10)
    prompt = backend.tokenizer.decode(ids)
    # instruct: the instructions follow the question in the user turn, no system message
    assert "<|system|>" not in prompt
    assert prompt.index("one or two sentences") > prompt.index(QUESTION[0]["content"]) > prompt.index("<|user|>")
    assert "<|attributes|>" not in prompt


def test_complete_runs_one_generate_per_batch(backend, monkeypatch):
    calls = []
    real = backend._model.generate

    def spy(*args, **kwargs):
        calls.append(kwargs["input_ids"].shape)
        return real(*args, **kwargs)

    monkeypatch.setattr(backend._model, "generate", spy)
    batch = [QUESTION, [{"role": "user", "content": "Hi"}],
             [{"role": "user", "content": "A much longer question about money, rent, savings and a budget?"}]]
    out = backend.complete(batch, attributes=Attributes(), steering="steerlm", params=GREEDY)
    assert len(out) == 3 and all(isinstance(t, str) for t in out)
    assert len(calls) == 1 and calls[0][0] == 3  # one padded batch
    # Left padding does not change what each conversation gets (greedy).
    monkeypatch.setattr(backend._model, "generate", real)
    assert out[0] == greedy(backend).strip()


def test_cancel_stops_early_and_is_reported(backend):
    params = SamplingParams(max_new_tokens=400, temperature=1.0, seed=5)
    gen = backend.stream(QUESTION, attributes=None, steering="steerlm", params=params)
    it = iter(gen)
    first = next(it)
    gen.cancel()
    rest = list(it)
    assert gen.finish_reason == "cancelled"
    assert gen.completion_tokens < 50  # stopped at the next token, not after 400
    assert gen.text == first + "".join(rest)
    assert not backend.health()["busy"]


def test_abandoning_the_stream_cancels_generation(backend):
    params = SamplingParams(max_new_tokens=400, temperature=1.0, seed=6)
    gen = backend.stream(QUESTION, attributes=None, steering="steerlm", params=params)
    it = iter(gen)
    next(it)
    it.close()  # what a dropped HTTP client does to the generator
    assert gen.finish_reason == "cancelled" and gen.completion_tokens < 50
    assert not backend.health()["busy"]


def test_overlong_prompt_keeps_the_end_and_still_answers(backend):
    long = [{"role": "user", "content": "word " * 3000 + "THE END?"}]
    ids, max_new = backend.encode(long, attributes=Attributes(), steering="steerlm", max_new_tokens=50)
    assert len(ids) + max_new <= backend.health()["max_context"]
    assert backend.tokenizer.decode(ids).endswith("THE END?<|end|>\n<|assistant|>\n<|attributes|>" + Attributes().steerlm() + "\n")
    gen = backend.stream(long, attributes=Attributes(), steering="steerlm", params=SamplingParams(max_new_tokens=5))
    gen.read()
    assert gen.finish_reason in ("stop", "length")


def test_set_adapter_swaps_outputs(tiny_model_dir, adapters):
    a1, a2 = adapters
    b = TransformersBackend(tiny_model_dir, device="cpu")
    base = greedy(b)
    b.set_adapter("a1", str(a1))
    assert b.active_adapter == "a1"
    with_a1 = greedy(b)
    assert with_a1 != base
    assert greedy(b, adapter=NO_ADAPTER) == base  # the base model stays reachable (evaluation)
    b.set_adapter("a2", str(a2))
    with_a2 = greedy(b)
    assert with_a2 not in (base, with_a1)
    assert greedy(b, adapter="a1") == with_a1  # still loaded by name
    b.set_adapter(None)
    assert b.active_adapter is None and greedy(b) == base
    b.set_adapter("a1")  # already loaded: no path needed
    assert greedy(b) == with_a1
    b.close()


def test_in_flight_request_keeps_the_adapter_it_started_with(tiny_model_dir, adapters):
    a1, a2 = adapters
    b = TransformersBackend(tiny_model_dir, device="cpu", adapter=str(a1), adapter_name="a1")
    reference = greedy(b)
    slow = SamplingParams(max_new_tokens=GREEDY.max_new_tokens, temperature=0.0)
    # Submitted on a1; the swap (and a reload of the name "a1" with other weights) comes after.
    gen = b.stream(QUESTION, attributes=Attributes(), steering="steerlm", params=slow)
    swapper = threading.Thread(target=b.set_adapter, args=("a1", str(a2)))
    swapper.start()
    assert gen.read() == reference
    assert gen.adapter == "a1"
    swapper.join()
    assert greedy(b) != reference  # later requests get the new weights
    assert list(b._peft.peft_config) == [b._adapters["a1"][1]]  # the superseded adapter was deleted once unpinned
    b.close()


def test_adapter_errors_are_clear(backend, tmp_path):
    with pytest.raises(BackendError, match="No adapter named 'nope'"):
        backend.set_adapter("nope")
    with pytest.raises(BackendError, match="Cannot load the adapter 'bad'"):
        backend.set_adapter("bad", str(tmp_path / "missing"))
    assert backend.active_adapter is None


def test_missing_model_dir_is_unavailable(tmp_path):
    with pytest.raises(BackendUnavailable, match="Cannot load the model"):
        TransformersBackend(tmp_path / "nothing-here", device="cpu", local_files_only=True)


# --------------------------------------------------------------------------- OpenAI-compatible


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed when the block ends: nothing listens there


def test_openai_server_down_is_reported_quickly():
    url = f"http://127.0.0.1:{closed_port()}/v1"
    b = OpenAICompatibleBackend(url, model="m", max_retries=1, timeout_s=5)
    t0 = time.monotonic()
    with pytest.raises(BackendUnavailable) as info:
        b.stream(QUESTION, attributes=Attributes(), steering="steerlm", params=GREEDY)
    assert time.monotonic() - t0 < 10  # refused connections are not waited out
    message = str(info.value)
    assert url in message and "Start it" in message
    with pytest.raises(BackendUnavailable):
        b.complete([QUESTION, QUESTION], attributes=None, steering="instruct", params=GREEDY)
    health = b.health()
    assert not health["ok"] and url in health["error"]


class _ChatServer(ThreadingHTTPServer):
    """Speaks the slice of the OpenAI protocol the backend uses: /v1/models and streaming and
    non-streaming /v1/chat/completions. Records every request body."""

    def __init__(self):
        super().__init__(("127.0.0.1", 0), _Handler)
        self.requests: list[dict] = []
        self.models = ["base-model", "release-1"]
        self.context_chars = 0  # > 0: a prompt of more characters is refused as vLLM refuses one


class _Handler(BaseHTTPRequestHandler):
    def log_message(self, *args):
        pass

    def _json(self, obj, status=200):
        body = json.dumps(obj).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self):
        self._json({"object": "list", "data": [
            {"id": m, "object": "model", "created": 0, "owned_by": "me", "parent": None if m == "base-model" else "base-model"}
            for m in self.server.models]})

    def do_POST(self):
        req = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        self.server.requests.append(req)
        if self.path.endswith("/load_lora_adapter"):
            self.server.models.append(req["lora_name"])
            self.send_response(200)
            self.send_header("Content-Length", "2")
            self.end_headers()
            self.wfile.write(b"ok")
            return
        if req["model"] not in self.server.models:
            return self._json({"error": {"message": f"The model `{req['model']}` does not exist.", "code": 404}}, 404)
        prompt = sum(len(m["content"]) for m in req["messages"])
        if self.server.context_chars and prompt > self.server.context_chars:
            return self._json({"object": "error", "type": "BadRequestError", "code": 400, "message": (
                f"This model's maximum context length is {self.server.context_chars} tokens. However, your prompt "
                f"contains at least {prompt} input tokens.")}, 400)
        words = ["Keep ", "a ", "regular ", "schedule."]
        base = {"id": "c1", "created": 0, "model": req["model"]}
        if not req.get("stream"):
            return self._json({**base, "object": "chat.completion", "choices": [
                {"index": 0, "finish_reason": "stop", "message": {"role": "assistant", "content": "".join(words)}}],
                "usage": {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11}})
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        for i, w in enumerate(words):
            chunk = {**base, "object": "chat.completion.chunk", "choices": [
                {"index": 0, "delta": {"content": w}, "finish_reason": "stop" if i == len(words) - 1 else None}]}
            self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
        usage = {**base, "object": "chat.completion.chunk", "choices": [],
                 "usage": {"prompt_tokens": 7, "completion_tokens": 4, "total_tokens": 11}}
        self.wfile.write(f"data: {json.dumps(usage)}\n\ndata: [DONE]\n\n".encode())


@pytest.fixture
def chat_server():
    server = _ChatServer()
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server
    server.shutdown()
    server.server_close()


def test_openai_streams_with_steerlm_kwargs_and_adapter_by_name(chat_server):
    url = f"http://127.0.0.1:{chat_server.server_address[1]}/v1"
    b = OpenAICompatibleBackend(url, max_retries=0)
    assert b.model == "base-model"  # discovered: the served model without a parent
    attrs = Attributes(verbosity=1)
    gen = b.stream(QUESTION + [{"role": "assistant", "content": "x", "attributes": "a:1"}, *QUESTION],
                   attributes=attrs, steering="steerlm", params=SamplingParams(max_new_tokens=9, seed=4))
    assert list(gen) == ["Keep ", "a ", "regular ", "schedule."]
    assert (gen.prompt_tokens, gen.completion_tokens, gen.finish_reason) == (7, 4, "stop")
    req = chat_server.requests[-1]
    assert req["model"] == "base-model" and req["stream"] and req["stream_options"] == {"include_usage": True}
    assert req["chat_template_kwargs"] == {"attributes": attrs.steerlm()}
    assert req["max_tokens"] == 9 and req["seed"] == 4
    assert all(set(m) == {"role", "content"} for m in req["messages"])

    b.set_adapter("release-1")  # served already
    b.stream(QUESTION, attributes=attrs, steering="instruct", params=GREEDY).read()
    req = chat_server.requests[-1]
    assert req["model"] == "release-1" and "chat_template_kwargs" not in req
    assert [m["role"] for m in req["messages"]] == ["user"]
    assert req["messages"][0]["content"].startswith(QUESTION[0]["content"] + "\n\nAnswer briefly")

    b.set_adapter("release-2", "/adapters/release-2")  # loaded into the server at run time
    assert chat_server.requests[-1] == {"lora_name": "release-2", "lora_path": "/adapters/release-2"}
    assert b.complete([QUESTION, QUESTION], attributes=None, steering="steerlm", params=GREEDY) == ["Keep a regular schedule."] * 2
    assert chat_server.requests[-1]["model"] == "release-2"
    assert b.stream(QUESTION, attributes=None, steering="steerlm", params=GREEDY, adapter=NO_ADAPTER).read()
    assert chat_server.requests[-1]["model"] == "base-model"

    with pytest.raises(BackendError, match="no adapter named 'ghost'"):
        b.set_adapter("ghost")
    b._active = "gone"  # an adapter the server dropped
    with pytest.raises(BackendError, match="no model named 'gone'"):
        b.stream(QUESTION, attributes=None, steering="steerlm", params=GREEDY)
    b.close()


def test_openai_conversation_longer_than_the_context_is_answered_without_its_older_turns(chat_server):
    """vLLM refuses a prompt longer than its context; the backend sends the conversation again
    without its older half of turns (system message and new question kept), as the transformers
    backend trims one, and only a question too long on its own is an error."""
    url = f"http://127.0.0.1:{chat_server.server_address[1]}/v1"
    b = OpenAICompatibleBackend(url, max_retries=0)
    turns = []
    for i in range(6):
        turns += [{"role": "user", "content": f"question {i} " + "x" * 40}, {"role": "assistant", "content": "y" * 60}]
    conversation = [{"role": "system", "content": "Be kind."}, *turns, {"role": "user", "content": "and now?"}]
    chat_server.context_chars = 200
    gen = b.stream(conversation, attributes=None, steering="instruct", params=GREEDY)
    assert gen.read() == "Keep a regular schedule."
    sent = chat_server.requests[-1]["messages"]
    assert sum(len(m["content"]) for m in sent) <= 200
    assert sent[0]["content"].startswith("Be kind.") and sent[-1]["content"].startswith("and now?")
    assert [m["role"] for m in sent[1:]] == ["user", "assistant"] * ((len(sent) - 2) // 2) + ["user"]
    assert len(chat_server.requests) - 1 <= 3  # halved each time: a few requests, not one per turn
    assert b.complete([conversation], attributes=None, steering="instruct", params=GREEDY) == ["Keep a regular schedule."]

    chat_server.context_chars = 5
    with pytest.raises(BackendError, match="maximum context length"):
        b.stream(conversation, attributes=None, steering="instruct", params=GREEDY)
    b.close()


def test_without_older_turns_keeps_the_system_message_and_restarts_at_a_user_turn():
    from chat.backends.openai_backend import without_older_turns

    sys_, u1, a1, u2, a2, u3 = ({"role": r, "content": c} for r, c in (
        ("system", "s"), ("user", "1"), ("assistant", "a"), ("user", "2"), ("assistant", "b"), ("user", "3")))
    assert without_older_turns([sys_, u1, a1, u2, a2, u3]) == [sys_, u2, a2, u3]
    assert without_older_turns([u1, a1, u3]) == [u3]
    assert without_older_turns([sys_, u3]) is None
    assert without_older_turns([u3]) is None
