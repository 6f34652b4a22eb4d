"""One turn on the real model, in real Chromium: the roommate question that the built-in
model answered with advice on children's homework gets an answer about the roommate.

"On topic" is measured as the benchmark measures it (`bench/quality.py`): cosine similarity of
the MiniLM embeddings (`evaluator.embeddings`) of the question and the answer as the page shows
it, against ON_TOPIC, a threshold chosen by that benchmark's rule from its run on SmolLM2
(docs/results.md, "Both models on the same prompts"; below). The answer is greedy, so a rerun on this machine gives the same
text. The screenshots of the chat at both sizes go to the test output (docs/service.md shows them,
copied under docs/screenshots/).
"""

from __future__ import annotations

import pytest
from prereqs import CHROMIUM, requires
from service_helpers import start_service, tiny_settings
from test_browser_chat import WAIT_MS, bot_texts, browser, open_app, send  # noqa: F401

from evaluator.embeddings import SentenceEmbedder

pytestmark = [
    pytest.mark.browser, pytest.mark.slow,
    requires(CHROMIUM.exists(), "needs Debian's Chromium at /usr/bin/chromium (apt-get install -y chromium)"),
]

QUESTION = "My roommate never cleans the kitchen and it's driving me crazy. How do I bring it up without a fight?"
# bench/quality.py on SmolLM2, 2026-12-01 (docs/results.md): its 40 answers' 5th percentile is 0.288,
# the 99th percentile of 1,560 mismatched (answer, another question) pairs 0.378 — they overlap, so
# the rule takes the 5th percentile, rounded: 2 of 40 real answers fall below 0.29, 69 of 1,560
# mismatched pairs reach it. A failure here is strong evidence only far below it.
ON_TOPIC = 0.29


@pytest.fixture(scope="module")
def real_live(pretrained_model_dir, tmp_path_factory):
    service = start_service(tiny_settings(
        tmp_path_factory.mktemp("real-ui"), pretrained_model_dir,
        **{"backend.steering": "instruct", "backend.max_new_tokens": 120, "backend.temperature": 0.0}))
    yield service
    service.stop()


@pytest.mark.parametrize("size", [(1400, 900), (390, 844)], ids=["desktop", "phone"])
def test_the_real_model_answers_the_roommate_question_on_topic(browser, real_live, output_dir, size):  # noqa: F811
    ctx = browser.new_context(viewport={"width": size[0], "height": size[1]})
    try:
        page = open_app(ctx, real_live.url)
        send(page, real_live, ctx, QUESTION)
        answer = bot_texts(page)[-1]
        name = "desktop" if size[0] > 1000 else "phone"
        page.screenshot(path=str(output_dir / f"real-model-chat-{name}.png"), full_page=False)
        if name == "phone":  # each drawer over the conversation, once it has finished sliding in
            for drawer in ("sidebar", "steering"):
                page.click(f"#{drawer} > .toggle-button")
                page.wait_for_selector(f"#{drawer}.open", timeout=WAIT_MS)
                page.wait_for_function("() => document.getAnimations().every(a => a.playState !== 'running')",
                                       timeout=WAIT_MS)
                page.wait_for_timeout(400)  # CSS transitions are not all listed as animations
                page.screenshot(path=str(output_dir / f"real-model-phone-{drawer}.png"), full_page=False)
                page.click(f"#{drawer} > .toggle-button")
                page.wait_for_selector(f"#{drawer}:not(.open)", timeout=WAIT_MS)
    finally:
        ctx.close()
    embedder = SentenceEmbedder()
    q, a = embedder.encode([QUESTION, answer])
    similarity = float(q @ a)
    print(f"{name}: cosine {similarity:.3f}; answer: {answer[:300]!r}")
    assert similarity >= ON_TOPIC, f"off topic (cosine {similarity:.3f} < {ON_TOPIC}): {answer[:400]!r}"
