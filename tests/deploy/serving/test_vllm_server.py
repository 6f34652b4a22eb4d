"""A real vLLM CPU server on the tiny model: OpenAI chat (streaming and not), the SteerLM
attributes reaching the chat template, LoRA hot-swap through deploy.serving.vllm, and what a client
sees when the server is killed. One server start for the whole module (~40 s)."""

from __future__ import annotations

import socket

import httpx
import openai
import pytest
from vllm_fixtures import _vllm_module_server, make_random_lora, vllm_model_dir, vllm_server  # noqa: F401

from deploy.serving.vllm import (
    RetryPolicy,
    VLLMError,
    is_healthy,
    list_models,
    load_adapter,
    served_adapters,
    unload_adapter,
)

pytestmark = pytest.mark.vllm

ATTR = "helpfulness:4,correctness:4,coherence:4,complexity:2,verbosity:1"
QUESTION = [{"role": "user", "content": "How do I sleep better?"}]


def client(server, **kw) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.openai_url, api_key="EMPTY", max_retries=0, timeout=60, **kw)


def answer(server, model: str, **kw) -> str:
    resp = client(server).chat.completions.create(model=model, messages=QUESTION, max_tokens=16, temperature=0, **kw)
    return resp.choices[0].message.content


@pytest.fixture(scope="module")
def lora_dir(vllm_model_dir, tmp_path_factory):
    return make_random_lora(vllm_model_dir, tmp_path_factory.mktemp("lora") / "release-1", seed=1)


def test_models_lists_the_base(vllm_server):
    models = list_models(vllm_server.base_url)
    assert [m["id"] for m in models] == [vllm_server.model]
    assert models[0]["parent"] is None
    assert is_healthy(vllm_server.base_url)


def test_chat_non_streaming_and_streaming_agree(vllm_server):
    extra = {"extra_body": {"chat_template_kwargs": {"attributes": ATTR}}}
    full = answer(vllm_server, vllm_server.model, **extra)
    stream = client(vllm_server).chat.completions.create(
        model=vllm_server.model, messages=QUESTION, max_tokens=16, temperature=0, stream=True, **extra
    )
    pieces = [c.choices[0].delta.content or "" for c in stream if c.choices]
    assert len(pieces) > 1  # really streamed, token by token
    assert "".join(pieces) == full  # greedy: same text either way


def test_attributes_reach_the_chat_template(vllm_server):
    # vLLM renders the prompt with the model's own template; /tokenize + /detokenize show it.
    body = {"model": vllm_server.model, "messages": QUESTION, "add_generation_prompt": True}
    rendered = {}
    for key, kwargs in (("with", {"chat_template_kwargs": {"attributes": ATTR}}), ("without", {})):
        tokens = httpx.post(vllm_server.base_url + "/tokenize", json=body | kwargs, timeout=30).json()["tokens"]
        rendered[key] = httpx.post(vllm_server.base_url + "/detokenize", json={"model": vllm_server.model, "tokens": tokens}, timeout=30).json()["prompt"]
    assert rendered["with"] == f"<|user|>\nHow do I sleep better?<|end|>\n<|assistant|>\n<|attributes|>{ATTR}\n"
    assert rendered["without"] == "<|user|>\nHow do I sleep better?<|end|>\n<|assistant|>\n"
    # And the chat endpoint itself uses the kwargs: the prompt is longer by the attribute line.
    usage = lambda **kw: client(vllm_server).chat.completions.create(  # noqa: E731
        model=vllm_server.model, messages=QUESTION, max_tokens=1, **kw
    ).usage.prompt_tokens
    assert usage(extra_body={"chat_template_kwargs": {"attributes": ATTR}}) > usage()


def test_lora_hot_swap_changes_answers_and_unloads(vllm_server, lora_dir):
    base_before = answer(vllm_server, vllm_server.model)
    load_adapter(vllm_server.base_url, "release-1", lora_dir)
    load_adapter(vllm_server.base_url, "release-1", lora_dir)  # idempotent
    models = {m["id"]: m for m in list_models(vllm_server.base_url)}
    assert models["release-1"]["parent"] == vllm_server.model
    assert served_adapters(vllm_server.base_url) == {"release-1": str(lora_dir)}

    assert answer(vllm_server, "release-1") != base_before
    assert answer(vllm_server, vllm_server.model) == base_before  # the base is untouched

    unload_adapter(vllm_server.base_url, "release-1")
    unload_adapter(vllm_server.base_url, "release-1")  # missing_ok
    assert served_adapters(vllm_server.base_url) == {}
    with pytest.raises(openai.NotFoundError):
        answer(vllm_server, "release-1")


def test_bad_adapter_path_is_a_clear_error(vllm_server, tmp_path):
    with pytest.raises(VLLMError, match="PEFT adapter directory") as info:
        load_adapter(vllm_server.base_url, "nope", tmp_path / "missing")
    assert info.value.status == 404
    with pytest.raises(VLLMError) as info:
        unload_adapter(vllm_server.base_url, "nope", missing_ok=False)
    assert info.value.status == 404


@pytest.mark.timeout(120)  # a hang guard, not a timing assertion
def test_killed_server_fails_fast_mid_stream_and_after(vllm_server):
    # The tiny model writes 900 tokens in about a second, faster than a client can react, so a
    # short stream can sit whole in the socket buffers before the kill lands. This one is ~12 MB
    # (8 choices with their top log-probabilities) against a 64 KiB receive buffer and the
    # kernel's 4 MiB send buffer: whatever the timing, most of it is still unsent when the server dies.
    small_buffer = httpx.HTTPTransport(socket_options=[(socket.SOL_SOCKET, socket.SO_RCVBUF, 65536)])
    choices, max_tokens = 8, 900
    stream = client(vllm_server, http_client=httpx.Client(transport=small_buffer)).chat.completions.create(
        model=vllm_server.model,
        messages=QUESTION,
        max_tokens=max_tokens,
        n=choices,
        temperature=1,
        seed=0,
        logprobs=True,
        top_logprobs=20,
        stream=True,
        extra_body={"ignore_eos": True},
    )
    got = []
    # A dropped connection, not a read timeout: the client learns at once that the server is gone.
    with pytest.raises((openai.APIConnectionError, httpx.RemoteProtocolError, httpx.ReadError)) as info:
        for chunk in stream:
            got.append(chunk)
            if len(got) == 1:
                vllm_server.kill()
    assert not isinstance(info.value, (openai.APITimeoutError, httpx.TimeoutException))
    assert 1 <= len(got) < choices * max_tokens

    with pytest.raises(openai.APIConnectionError) as info:
        answer(vllm_server, vllm_server.model)
    assert not isinstance(info.value, openai.APITimeoutError)
    with pytest.raises(VLLMError, match="did not answer"):
        list_models(vllm_server.base_url, retry=RetryPolicy(attempts=2, backoff_s=0.1))
    assert not is_healthy(vllm_server.base_url)
