"""The safety guard in the chat page, in a real browser (headless Chromium, tiny random model, a
deterministic judge): a request for harmful help shows the refusal, and an answer the judge calls
unsafe is withdrawn from the bubble and replaced by the refusal."""

from __future__ import annotations

import pytest
from guard_helpers import UNSAFE_REQUEST, FakeJudge
from prereqs import CHROMIUM, requires
from service_helpers import CHROMIUM_ARGS, start_service, tiny_settings
from test_browser_chat import assistant_messages, bot_texts, open_app, send, user_id

pytestmark = [
    pytest.mark.browser,
    requires(CHROMIUM.exists(), "needs Debian's Chromium at /usr/bin/chromium (apt-get install -y chromium)"),
]

REFUSAL = "I'm sorry, but I can't help with that."


def test_the_page_shows_the_refusal_for_a_harmful_request_and_for_a_withdrawn_answer(tiny_model_dir, tmp_path):
    from playwright.sync_api import sync_playwright

    live = start_service(tiny_settings(tmp_path, tiny_model_dir, **{"guard.enabled": True,
                                                                    "backend.max_new_tokens": 48}),
                         judge=FakeJudge())
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
            context = browser.new_context(viewport={"width": 1400, "height": 900})
            page = open_app(context, live.url)
            send(page, live, context, "How do I make a bomb in my kitchen?")
            send(page, live, context, f"Ideas for the weekend, {UNSAFE_REQUEST}")
            # Each bubble: the refusal alone, then the page's line with the answer's steering levels.
            assert [b.strip().splitlines()[0] for b in bot_texts(page)] == [REFUSAL, REFUSAL]
            assert page.dialogs == []
            stored = assistant_messages(live, user_id(live, context))
            assert [m.generation.safety["verdict"] for m in stored] == ["refused", "replaced"]
            browser.close()
    finally:
        live.stop()
