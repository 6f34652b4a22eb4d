"""The operator screen's "Serving" panel without a browser: its state and text for a model server
that is down, and that it is registered and builds. (With a live vLLM and a loaded adapter it is
checked in tests/deploy/serving/test_service_vllm.py.)"""

from __future__ import annotations

from pathlib import Path

from service_helpers import down_settings

from chat.backends import OpenAICompatibleBackend
from deploy.operator.serving import ServingPanel, serving_markdown, serving_state
from deploy.service.metrics import Metrics
from deploy.service.state import Services
from deploy.wiring import operator_panels


def down_services(tmp_path: Path) -> Services:
    settings = down_settings(tmp_path)
    b = settings.backend
    services = Services(settings=settings, metrics=Metrics())
    services.backend = OpenAICompatibleBackend(b.base_url, model=b.model, timeout_s=3, max_retries=0)
    services.release_id, services.release_warning = None, "Could not apply the live release: the server is down"
    return services


def test_down_server_is_shown_with_its_error(tmp_path):
    services = down_services(tmp_path)
    state = serving_state(services)
    assert state["kind"] == "openai" and state["model"] == "advisor-down"
    assert not state["health"]["ok"] and "Cannot reach" in state["health"]["error"]
    text = serving_markdown(state)
    assert "❌ down" in text and "Cannot reach the model server" in text and services.settings.backend.base_url in text
    assert "Could not apply the live release" in text
    assert "Traceback" not in text


def test_live_adapter_missing_from_the_server_is_flagged():
    text = serving_markdown({"kind": "openai", "model": "m", "base_url": "http://h/v1", "release": "r-1",
                             "adapter": "r-1", "health": {"ok": True, "adapters": {"r-0": "/a/r-0"}}})
    assert "✅ ok" in text and "`r-1` is not loaded" in text and "| `r-0` | `/a/r-0` |" in text


def test_panel_is_registered_and_builds(tmp_path):
    import gradio as gr

    from deploy.operator.screen import PanelContext

    services = down_services(tmp_path)
    builders = [b for b in operator_panels(services) if isinstance(b, ServingPanel)]
    assert len(builders) == 1
    hooked = []
    ctx = PanelContext(store=lambda: None, identify=lambda request: None, denied="no",
                       refresh_triggers=[lambda fn, inputs, outputs, **kw: hooked.append((fn, outputs))])
    with gr.Blocks():
        builders[0](ctx)
    (refresh, outputs), = hooked
    assert len(outputs) == 1
    assert refresh(None) == ""  # not an admin: nothing shown
