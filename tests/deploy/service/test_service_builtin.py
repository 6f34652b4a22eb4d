"""End to end on the real built-in model, where the content matters: the steering sliders'
values reach the model through the service and change the answer."""

from __future__ import annotations

import openai
import pytest
from service_helpers import start_service, tiny_settings

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def builtin_live(builtin_model_dir, tmp_path_factory):
    from chat.backends.transformers_backend import TransformersBackend

    backend = TransformersBackend(builtin_model_dir, device="cpu", kind="builtin", name=builtin_model_dir.name,
                                  local_files_only=True)
    settings = tiny_settings(tmp_path_factory.mktemp("builtin"), builtin_model_dir,
                             **{"backend.kind": "builtin", "backend.max_new_tokens": 160})
    service = start_service(settings, backend=backend)
    yield service
    service.stop()
    backend.close()


def test_verbosity_reaches_the_model_through_the_api(builtin_live):
    client = openai.OpenAI(base_url=f"{builtin_live.url}/v1", api_key="sk-builtin", max_retries=0, timeout=300)
    question = "My coworker takes credit for my work. What should I do?"
    answers = {}
    for level in (0, 4):
        r = client.chat.completions.create(
            model="advisor", messages=[{"role": "user", "content": question}], temperature=0, max_tokens=160,
            extra_body={"attributes": {"verbosity": level}})
        answers[level] = r.choices[0].message.content
        stored = builtin_live.store.conversations.get_message(r.model_extra["message_id"])
        assert stored.content == answers[level] and stored.generation.attributes.verbosity == level
        assert stored.generation.backend == "builtin"
    assert len(answers[4].split()) > len(answers[0].split())
    assert sum(w.isalpha() for w in answers[4].split()) > 0.7 * len(answers[4].split())  # words, not noise
