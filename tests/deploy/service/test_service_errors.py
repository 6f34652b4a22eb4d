"""When the model is down: clear errors in the API, the question kept, the failure stored."""

from __future__ import annotations

import openai
import pytest
from service_helpers import down_settings, start_service


@pytest.fixture(scope="module")
def down(tmp_path_factory):
    service = start_service(down_settings(tmp_path_factory.mktemp("down")))
    yield service
    service.stop()


def test_model_down_is_a_clear_503_and_the_question_is_kept(down):
    with down.client() as c:
        health = c.get("/healthz")
        assert health.status_code == 503 and health.json()["status"] == "degraded"
        r = c.post("/api/messages", json={"content": "Is anyone there?"})
        assert r.status_code == 503
        message = r.json()["error"]["message"]
        assert "not available" in message and "Traceback" not in message
        conv = c.get("/api/conversations").json()["conversations"][0]["id"]
        msgs = c.get(f"/api/conversations/{conv}").json()["messages"]
        assert [m["role"] for m in msgs] == ["user", "assistant"]
        assert msgs[0]["content"] == "Is anyone there?"
        assert msgs[1]["status"] == "error" and msgs[1]["generation"]["error"]
        with c.stream("POST", f"/api/conversations/{conv}/messages",
                      json={"content": "Still there?", "stream": True}) as s:
            body = s.read().decode()
        assert '"type": "error"' in body and "not available" in body
        metrics = c.get("/metrics").text
        assert 'advisor_turns_total{source="api",status="error"}' in metrics


def test_model_down_through_the_openai_client(down):
    client = openai.OpenAI(base_url=f"{down.url}/v1", api_key="sk-down", max_retries=0)
    assert [m.id for m in client.models.list()][0] == "advisor"
    with pytest.raises(openai.APIStatusError) as err:
        client.chat.completions.create(model="advisor", messages=[{"role": "user", "content": "hello?"}])
    assert err.value.status_code == 503 and "not available" in str(err.value)
