"""The advisor service on a real vLLM CPU server serving the built-in model: chat
through the REST API, streaming and not; a trained adapter promoted through the
gate and hot-loaded into vLLM; rollback; vLLM killed mid-answer and brought back on the same port.

One vLLM server for the module (restarted once, by the kill test) and one advisor service on it.
The tests run in file order and build on each other's releases, like an operator's day.

The candidate is a real KTO run (TRL + PEFT, the project's trainer subprocess) on the built-in
model: 6 steps at a high learning rate, LoRA rank 8 (the server's --max-lora-rank), ~40 s, so
greedy answers change. It goes through the real gate (`deploy.release.evaluate.gate_candidate`, small
prompt counts) under a test policy that keeps a harmlessness floor (0.5: 6 prompts, and CPUs
differ in the last bits of training) but tolerates any helpfulness and Self-BLEU change: a
six-step adapter is not expected to be better, and what is under test here is serving.
Promotion and rollback go through the admin API, as an operator's do.
"""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import httpx
import pytest
from service_helpers import start_service, tiny_settings
from training_helpers import make_run_dir
from vllm_fixtures import LORA_RANK, _vllm_module_server, vllm_server  # noqa: F401

from deploy.release import registry
from deploy.release.evaluate import gate_candidate
from deploy.release.gate import decide
from deploy.serving.vllm import served_adapters, unload_adapter
from trainer.config import config_for
from trainer.process import start_run
from trainer.rundir import EXIT_OK

pytestmark = [pytest.mark.vllm, pytest.mark.slow]

PROMPTS = [
    "How do I sleep better before exams?",
    "My roommate never does the dishes. How do I bring it up?",
    "Should I lend money to my brother again?",
]
GREEDY = {"temperature": 0.0, "max_new_tokens": 24}
# The gate, small enough for a 2-core CPU, and the test policy (see the module docstring).
GATE = {"gate.helpfulness_prompts": 4, "gate.harmlessness_prompts": 6, "gate.max_new_tokens": 24,
        "gate.harmlessness.floor": 0.5, "gate.helpfulness.tolerance": 1.0, "gate.self_bleu.tolerance": 1.0,
        # A few KTO steps on the built-in model and two steering prompts: the slider axis is far too
        # noisy here to mean anything, and this module tests the hand-off to vLLM, not the gate.
        "gate.steer_prompts": 2, "gate.steer_values": [0, 4], "gate.steerability.tolerance": 2.0}


@pytest.fixture(scope="module")
def vllm_model_dir(builtin_model_dir) -> Path:
    """Serve the built-in model (head size 64, which the CPU build supports)."""
    return Path(builtin_model_dir)


@pytest.fixture(scope="module")
def kto_run_dir(builtin_model_dir, tmp_path_factory) -> Path:
    """A finished real KTO training run on the built-in model (its adapter in run_dir/adapter)."""
    run_dir = make_run_dir(tmp_path_factory.mktemp("kto") / "run", "kto", n=16)
    cfg = config_for("kto", base_model=str(builtin_model_dir), max_steps=6, batch_size=8, learning_rate=2e-2,
                     lora_r=LORA_RANK, lora_alpha=2 * LORA_RANK, cpu_scaling=False)
    handle = start_run(run_dir, cfg)
    assert handle.wait(900) == EXIT_OK, (run_dir / "train.log").read_text()[-3000:]
    return run_dir


@pytest.fixture(scope="module")
def svc(_vllm_module_server, tmp_path_factory):  # noqa: F811 - the fixture imported above
    server = _vllm_module_server
    settings = tiny_settings(tmp_path_factory.mktemp("advisor"), Path("/nonexistent"), **{
        "backend.kind": "openai", "backend.base_url": server.openai_url, "backend.model": server.model,
        "backend.timeout_s": 60.0, "backend.max_retries": 1, **GATE,
    })
    service = start_service(settings, ui=False)
    yield service
    service.stop()


@pytest.fixture(scope="module")
def state() -> dict:
    """What earlier tests learned (base answers, release ids) for the later ones."""
    return {}


def needs(state: dict, *keys: str) -> None:
    """Skip (not fail) a test run on its own, without the earlier tests it builds on."""
    missing = [k for k in keys if k not in state]
    if missing:
        pytest.skip(f"needs the earlier tests of this module (no {', '.join(missing)})")


def ask(client: httpx.Client, content: str, conversation_id: str | None = None, **params) -> httpx.Response:
    return client.post("/api/messages", json={"content": content, "conversation_id": conversation_id,
                                              **GREEDY, **params})


def answers(svc) -> list[dict]:
    """Each prompt in a new conversation, greedy; the stored answers (as the API returns them)."""
    with svc.client() as c:
        out = []
        for p in PROMPTS:
            r = ask(c, p)
            assert r.status_code == 200, r.text
            out.append(r.json()["answer"])
    return out


def stream_events(client: httpx.Client, body: dict, on_event=None) -> list[dict]:
    events = []
    with client.stream("POST", "/api/messages", json=body) as r:
        assert r.status_code == 200
        for line in r.iter_lines():
            if line.startswith("data: "):
                events.append(json.loads(line[6:]))
                if on_event is not None:
                    on_event(events[-1])
    return events


def test_chat_through_the_service_streaming_and_not(svc, vllm_server, state):
    base = svc.store.releases.live()
    assert base is not None and base.adapter_path is None  # the base model is a release of its own
    with svc.client() as c:
        r = ask(c, PROMPTS[0])
        assert r.status_code == 200, r.text
        full = r.json()["answer"]
        events = stream_events(c, {"content": PROMPTS[0], "stream": True, **GREEDY})
    assert full["content"] and full["status"] == "complete"
    kinds = [e["type"] for e in events]
    assert kinds[0] == "start" and kinds[-1] == "done" and kinds.count("delta") > 1  # token by token
    streamed = "".join(e["text"] for e in events if e["type"] == "delta")
    assert streamed == full["content"]  # greedy: the same answer either way
    for answer in (full, events[-1]["answer"]):
        stored = svc.store.conversations.get_message(answer["id"])
        assert stored.content == answer["content"] and stored.status == "complete"
        g = stored.generation
        assert (g.backend, g.model, g.adapter, g.release_id) == ("openai", vllm_server.model, None, base.id)
        assert g.prompt_tokens > 0 and g.completion_tokens > 0  # counted by vLLM
    state["base_release"] = base.id
    state["base_answers"] = [a["content"] for a in answers(svc)]


def test_gated_adapter_promoted_through_the_admin_api(svc, vllm_server, kto_run_dir, state):
    needs(state, "base_release", "base_answers")
    store, settings = svc.store, svc.services.settings
    run = store.jobs.create_training_run(method="kto", run_dir=str(kto_run_dir), base_model=vllm_server.model)
    store.jobs.update_training_run(run.id, status="succeeded")
    outcome = gate_candidate(store, settings, run.id)
    release = store.releases.get(outcome.release_id)
    assert outcome.decision.promote, outcome.decision.summary()
    assert release.status == "candidate" and release.decision["reasons"] == outcome.decision.reasons
    assert outcome.live_release_id == state["base_release"]

    with svc.admin() as admin:
        # A release the gate rejected is refused (the gate decides, not the caller).
        rejected = decide({**outcome.candidate, "harmlessness": 0.0}, outcome.live, settings.gate)
        bad = registry.register_candidate(store, run_id="run-rejected", adapter_path=kto_run_dir / "adapter",
                                          base_model=vllm_server.model, data_dir=settings.data_path)
        store.releases.set_status(bad.id, "rejected", decision=rejected.as_dict())
        refused = admin.post(f"/api/admin/releases/{bad.id}/promote")
        assert refused.status_code == 409 and "rejected by the gate" in refused.json()["error"]["message"]

        r = admin.post(f"/api/admin/releases/{release.id}/promote")
        assert r.status_code == 200, r.text
        assert r.json()["serving"] == release.id  # hot-swapped: no restart of either process

    # Published to the shared adapter directory and loaded into vLLM under the release id.
    published = settings.data_path / "adapters" / release.id
    assert served_adapters(vllm_server.base_url) == {release.id: str(published)}
    new = answers(svc)
    assert sum(a["content"] != b for a, b in zip(new, state["base_answers"])) >= 2  # the adapter answers
    for a in new:
        g = svc.store.conversations.get_message(a["id"]).generation
        assert (g.release_id, g.adapter, g.model) == (release.id, release.id, vllm_server.model)
    state["release"] = release.id
    state["adapter_answers"] = [a["content"] for a in new]
    shutil.rmtree(kto_run_dir)  # serving reads the published copy, never the run directory


def test_rollback_brings_the_base_answers_back(svc, state):
    needs(state, "release", "base_answers")
    with svc.admin() as admin:
        r = admin.post("/api/admin/releases/rollback")
        assert r.status_code == 200, r.text
        assert r.json()["id"] == r.json()["serving"] == state["base_release"]
    back = answers(svc)
    assert [a["content"] for a in back] == state["base_answers"]
    for a in back:
        g = svc.store.conversations.get_message(a["id"]).generation
        assert (g.release_id, g.adapter) == (state["base_release"], None)
    assert svc.store.releases.get(state["release"]).status == "retired"


FOLLOW_UPS = ["And if they get angry? Explain step by step.",
              "Walk me through every step in detail, with an example for each.",
              "Tell me everything I should think about, one point at a time, at length."]


def _killed_mid_answer(c, vllm_server, state) -> tuple[str, list[dict]]:
    """A conversation whose second answer lost vLLM as its first token reached the user: (its id,
    the stream's events). The longest answer is asked for (verbosity 4, up to 900 tokens), but the
    trained adapter may still end it within the first delta's round trip; then vLLM is started
    again and another follow-up is tried, in a new conversation."""
    def kill_on_first_delta(event: dict) -> None:
        if event["type"] == "delta" and vllm_server.proc.poll() is None:
            vllm_server.kill()

    for follow_up in FOLLOW_UPS:
        first = ask(c, PROMPTS[1])
        assert first.status_code == 200, first.text
        conv = first.json()["conversation_id"]
        assert first.json()["answer"]["content"] == state["adapter_answers"][1]
        events = stream_events(c, {"content": follow_up, "conversation_id": conv, "stream": True, "temperature": 0.0,
                                   "max_new_tokens": 900, "attributes": {"verbosity": 4, "complexity": 4}},
                               kill_on_first_delta)
        if events[-1]["type"] != "done":
            return conv, events
        vllm_server.restart()
    pytest.fail(f"each of {len(FOLLOW_UPS)} answers finished before vLLM was killed; ask for longer ones")


@pytest.mark.timeout(900)  # up to four vLLM starts on a loaded 2-core box; a hang guard only
def test_vllm_killed_mid_answer_then_back(svc, vllm_server, state):
    needs(state, "release", "adapter_answers")
    # The adapter release goes live again, so the restarted server must get it back.
    with svc.admin() as admin:
        assert admin.post(f"/api/admin/releases/{state['release']}/promote").json()["serving"] == state["release"]
    with svc.client() as c:
        conv, events = _killed_mid_answer(c, vllm_server, state)
        kinds = [e["type"] for e in events]
        assert kinds[0] == "start" and "delta" in kinds and kinds[-1] == "error", kinds
        message = events[-1]["error"]["message"]
        assert "not available" in message and "Traceback" not in message and "File \"" not in message

        # While vLLM is down: a clear 503, the question kept, health says degraded.
        down = ask(c, "Are you still there?", conv)
        assert down.status_code == 503 and "not available" in down.json()["error"]["message"]
        health = c.get("/healthz")
        assert health.status_code == 503 and health.json()["backend"]["ok"] is False

        thread = svc.store.conversations.get_messages(conv)
        assert [(m.role, m.status) for m in thread] == [
            ("user", "complete"), ("assistant", "complete"),
            ("user", "complete"), ("assistant", "error"),
            ("user", "complete"), ("assistant", "error"),
        ]
        assert thread[1].content == state["adapter_answers"][1]  # the earlier turn is intact
        interrupted = thread[3].generation
        assert interrupted.error and interrupted.release_id == state["release"]
        assert thread[3].content == "".join(e["text"] for e in events if e["type"] == "delta")  # the partial answer

        # vLLM comes back on the same port; the advisor service was never restarted.
        vllm_server.restart()
        assert served_adapters(vllm_server.base_url) == {}  # a fresh server forgot the adapter
        again = ask(c, PROMPTS[2])  # the first request puts the live adapter back
        assert again.status_code == 200, again.text
        assert again.json()["answer"]["content"] == state["adapter_answers"][2]
        g = svc.store.conversations.get_message(again.json()["answer"]["id"]).generation
        assert (g.release_id, g.adapter) == (state["release"], state["release"])
        assert state["release"] in served_adapters(vllm_server.base_url)
        more = ask(c, "Thanks, what first?", conv)  # the interrupted conversation goes on
        assert more.status_code == 200 and more.json()["answer"]["status"] == "complete"

        # The health check re-loads it too (here after it was dropped behind the service's back).
        unload_adapter(vllm_server.base_url, state["release"])
        health = c.get("/healthz").json()
        assert health["status"] == "ok" and health["backend"]["reloaded"] == state["release"]
        assert state["release"] in health["backend"]["adapters"]


def test_serving_panel_shows_vllm(svc, vllm_server):
    from deploy.operator.serving import serving_markdown, serving_state

    s = serving_state(svc.services)
    assert s["health"]["ok"] and s["release"] == svc.services.release_id
    text = serving_markdown(s)
    assert "openai" in text and vllm_server.openai_url in text and "ok" in text
    assert svc.services.release_id in text  # the live release's adapter is listed as loaded
