"""The chat UI in a real browser: Playwright driving Debian's headless Chromium against the real
service (tiny random model, so answers are gibberish but streamed and stored for real).

Every test uses its own browser context, i.e. its own cookie jar and so its own anonymous user.
Screenshots of the main screens go to the test output directory.
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable

import pytest
from prereqs import CHROMIUM, requires
from service_helpers import ADMIN_TOKEN, CHROMIUM_ARGS, start_service, tiny_settings
from store_peek import peek

from deploy.service.auth import COOKIE_NAME

pytestmark = [
    pytest.mark.browser,
    requires(CHROMIUM.exists(), "needs Debian's Chromium at /usr/bin/chromium (apt-get install -y chromium)"),
]

WAIT_MS = 60_000


@pytest.fixture(scope="module")
def live(tiny_model_dir, tmp_path_factory):
    service = start_service(tiny_settings(tmp_path_factory.mktemp("browser"), tiny_model_dir,
                                          **{"backend.max_new_tokens": 48}))
    yield service
    service.stop()


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture
def context(browser):
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    yield ctx
    ctx.close()


@pytest.fixture
def page(context, live):
    return open_app(context, live.url)


# --------------------------------------------------------------------------- helpers


def open_app(context, url: str):
    page = context.new_page()
    page.dialogs = []  # any alert() would be an XSS: record and dismiss
    page.on("dialog", lambda d: (page.dialogs.append(d.message), d.dismiss()))
    page.goto(url + "/")
    page.wait_for_selector("#input textarea", timeout=WAIT_MS)
    page.wait_for_function("() => document.querySelector('#who') && document.querySelector('#who').innerText.length > 0",
                           timeout=WAIT_MS)
    return page


def user_id(live, context) -> str:
    cookie = next(c for c in context.cookies() if c["name"] == COOKIE_NAME)
    return live.services.auth.from_cookies({COOKIE_NAME: cookie["value"]}).user_id


def wait_until(predicate: Callable[[], bool], timeout: float = 60, what: str = "condition") -> None:
    deadline = time.monotonic() + timeout
    while not predicate():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def wait_ui_idle(page) -> None:
    """The answer finished and the UI shows the stored result (send button back, no cursor)."""
    page.wait_for_function(
        """() => {
            const send = document.querySelector('#send');
            const stop = document.querySelector('#stop');
            const text = document.querySelector('#chatbot').innerText;
            return send && send.offsetParent !== null && (!stop || stop.offsetParent === null)
                && !text.includes('▍') && !text.includes('…');
        }""", timeout=WAIT_MS)


def assistant_messages(live, uid: str) -> list:
    out = []
    for conv in live.store.conversations.list(uid):
        out += [m for m in live.store.conversations.get_messages(conv.id) if m.role == "assistant"]
    return out


def send(page, live, context, text: str) -> None:
    uid = user_id(live, context)
    before = len(assistant_messages(live, uid))
    page.fill("#input textarea", text)
    page.click("#send")
    wait_until(lambda: len(assistant_messages(live, uid)) == before + 1, what="the answer to be stored")
    wait_ui_idle(page)


def bot_texts(page) -> list[str]:
    return page.eval_on_selector_all("#chatbot [data-testid='bot']", "els => els.map(e => e.innerText)")


def alnum(text: str) -> str:
    return re.sub(r"[^A-Za-z0-9]", "", text)


def last_bot(page):
    return page.locator("#chatbot [data-testid='bot']").last


def hover_buttons(page, label: str):
    return page.locator(f"#chatbot button[aria-label='{label}']")


# --------------------------------------------------------------------------- tests


def test_send_streams_the_answer_and_stores_it(page, live, context, output_dir):
    page.evaluate("""() => {
        window.__seen = [];
        new MutationObserver(() => {
            const bots = document.querySelectorAll('#chatbot [data-testid="bot"]');
            if (bots.length) window.__seen.push(bots[bots.length - 1].innerText);
        }).observe(document.querySelector('#chatbot'), {subtree: true, childList: true, characterData: true});
    }""")
    send(page, live, context, "My flatmate never cleans the kitchen. How do I raise it?")
    seen = page.evaluate("window.__seen")
    stored = assistant_messages(live, user_id(live, context))[0]
    assert stored.status == "complete" and stored.content
    partial = [s for s in seen if "▍" in s or s.strip() == "…"]
    assert partial, "the answer never appeared in pieces"
    assert len(set(seen)) >= 2
    assert alnum(stored.content) in alnum(bot_texts(page)[-1])
    convs = page.inner_text("#conversations")
    assert "My flatmate never cleans" in convs
    page.screenshot(path=str(output_dir / "ui-chat.png"), full_page=True)


def open_steering(page) -> None:
    """The sliders live in the right-hand drawer: one tap on its toggle opens it."""
    if not page.locator("#steering.open").count():  # a closed drawer is off screen, not hidden
        page.click("#steering > .toggle-button")
        page.wait_for_selector("#steering.open", timeout=WAIT_MS)


def test_slider_value_is_stored_with_the_next_answer(page, live, context):
    open_steering(page)
    page.fill("#verbosity input[type='number']", "0")
    page.press("#verbosity input[type='number']", "Enter")
    page.fill("#complexity input[type='number']", "4")
    page.press("#complexity input[type='number']", "Enter")
    # The two previews update independently (each its own event): wait for both.
    for preview, text in (("#verbosity-preview", "one or two sentences"), ("#complexity-preview", "expert")):
        page.wait_for_function(f"() => document.querySelector('{preview}').innerText.includes('{text}')",
                               timeout=WAIT_MS)
    page.click("#more")
    page.fill("#helpfulness input[type='number']", "1")
    page.press("#helpfulness input[type='number']", "Enter")
    send(page, live, context, "Is it rude to leave a party early?")
    attrs = assistant_messages(live, user_id(live, context))[0].generation.attributes
    assert (attrs.verbosity, attrs.complexity, attrs.helpfulness) == (0, 4, 1)


def test_like_with_reason_and_comment_stays_visible(page, live, context, output_dir):
    send(page, live, context, "How do I keep a plant alive?")
    answer = assistant_messages(live, user_id(live, context))[0]
    last_bot(page).hover()
    hover_buttons(page, "Like").last.click()
    page.wait_for_selector("#rating-panel", state="visible", timeout=WAIT_MS)
    wait_until(lambda: bool(live.store.conversations.ratings(answer.id)), what="the like to be stored")
    page.locator("#reasons").get_by_label("practical").check()
    page.fill("#rating-comment textarea", "Helped, thanks")
    page.screenshot(path=str(output_dir / "ui-rating.png"), full_page=True)
    page.click("#rating-save")
    wait_until(lambda: live.store.conversations.ratings(answer.id)[-1].reasons == ("practical",), what="the reasons")
    rating = live.store.conversations.ratings(answer.id)[-1]
    assert rating.value == 1 and rating.comment == "Helped, thanks"
    page.wait_for_function("() => document.querySelector('#chatbot').innerText.includes('Liked: practical')",
                           timeout=WAIT_MS)
    # A dislike on the same answer opens the negative chips.
    last_bot(page).hover()
    hover_buttons(page, "Dislike").last.click()
    page.wait_for_function("() => document.querySelector('#rating-panel') && "
                           "document.querySelector('#rating-panel').innerText.includes('too long')", timeout=WAIT_MS)
    page.locator("#reasons").get_by_label("too long").check()
    page.click("#rating-save")
    wait_until(lambda: live.store.conversations.ratings(answer.id)[-1].reasons == ("too long",), what="the dislike's reasons")
    assert live.store.conversations.ratings(answer.id)[-1].value == -1
    page.wait_for_function("() => document.querySelector('#chatbot').innerText.includes('Disliked: too long')",
                           timeout=WAIT_MS)


def test_regenerate_keeps_both_and_records_the_kept_one(page, live, context, output_dir):
    send(page, live, context, "Should I tell my friend her partner is cheating?")
    uid = user_id(live, context)
    last_bot(page).hover()
    hover_buttons(page, "Retry").last.click()
    wait_until(lambda: len(assistant_messages(live, uid)) == 2, what="the second answer")
    wait_ui_idle(page)
    first, second = sorted(assistant_messages(live, uid), key=lambda m: m.seq)
    assert first.parent_id == second.parent_id
    page.wait_for_function("() => document.querySelector('#branch-label').innerText.includes('Answer 2 / 2')",
                           timeout=WAIT_MS)
    assert "‹ 2 / 2 ›" in bot_texts(page)[-1]
    page.screenshot(path=str(output_dir / "ui-siblings.png"), full_page=True)
    page.click("#branch-prev")
    page.wait_for_function("() => document.querySelector('#branch-label').innerText.includes('Answer 1 / 2')",
                           timeout=WAIT_MS)
    assert alnum(first.content) in alnum(bot_texts(page)[-1])
    page.click("#branch-next")
    page.wait_for_function("() => document.querySelector('#branch-label').innerText.includes('Answer 2 / 2')",
                           timeout=WAIT_MS)
    kept = peek(live.store,
        "SELECT arg_max(message_id, created_at) FROM sibling_choices WHERE parent_id = ?", [second.parent_id])[0][0]
    assert kept == second.id
    assert live.store.conversations.thread(second.conversation_id)[-1].id == second.id


def test_edit_a_question_starts_a_branch(page, live, context):
    send(page, live, context, "How do I ask for a raise?")
    uid = user_id(live, context)
    page.locator("#chatbot [data-testid='user']").last.hover()
    hover_buttons(page, "Edit").last.click()
    page.fill("#chatbot textarea.edit-textarea", "How do I ask for a raise after a great year?")
    hover_buttons(page, "Submit").click()
    wait_until(lambda: len(assistant_messages(live, uid)) == 2, what="the answer to the edit")
    wait_ui_idle(page)
    conv = live.store.conversations.list(uid)[0].id
    questions = [m for m in live.store.conversations.get_messages(conv) if m.role == "user"]
    assert [q.content for q in questions] == ["How do I ask for a raise?", "How do I ask for a raise after a great year?"]
    assert questions[0].parent_id == questions[1].parent_id is None
    page.wait_for_function("() => document.querySelector('#branch-label').innerText.includes('version 2 / 2')",
                           timeout=WAIT_MS)
    assert "after a great year" in page.inner_text("#chatbot")
    page.click("#branch-prev")
    page.wait_for_function("() => !document.querySelector('#chatbot').innerText.includes('great year')",
                           timeout=WAIT_MS)
    assert "How do I ask for a raise?" in page.inner_text("#chatbot")


def test_reopen_a_past_conversation(page, live, context, output_dir):
    send(page, live, context, "First topic: learning the guitar at 40")
    page.click("#new-chat")
    page.wait_for_function("() => !document.querySelector('#chatbot').innerText.includes('guitar')", timeout=WAIT_MS)
    send(page, live, context, "Second topic: choosing a running shoe")
    page.wait_for_function("() => document.querySelector('#conversations').innerText.includes('Second topic')",
                           timeout=WAIT_MS)
    page.locator("#conversations").get_by_text("First topic").click()
    page.wait_for_function("() => document.querySelector('#chatbot').innerText.includes('guitar')", timeout=WAIT_MS)
    assert "running shoe" not in page.inner_text("#chatbot")
    page.screenshot(path=str(output_dir / "ui-sidebar.png"), full_page=True)
    # Continuing the reopened conversation appends to it.
    send(page, live, context, "And how often should I practise?")
    convs = live.store.conversations.list(user_id(live, context))
    guitar = next(c for c in convs if "guitar" in c.title)
    assert [m.role for m in live.store.conversations.thread(guitar.id)] == ["user", "assistant", "user", "assistant"]


def test_stop_generation_stores_an_interrupted_answer(page, live, context):
    backend = live.services.settings.backend
    backend.max_new_tokens, old = 900, backend.max_new_tokens
    try:
        page.fill("#input textarea", "Tell me everything about moving to another country.")
        page.click("#send")
        page.wait_for_function("() => document.querySelector('#chatbot').innerText.includes('▍')", timeout=WAIT_MS)
        # The button re-renders with every streamed chunk (never "stable" for a pointer click): click it
        # where it is now.
        page.evaluate("document.querySelector('#stop').click()")
        uid = user_id(live, context)
        wait_until(lambda: len(assistant_messages(live, uid)) == 1, what="the stopped answer")
        wait_ui_idle(page)
    finally:
        backend.max_new_tokens = old
    answer = assistant_messages(live, uid)[0]
    assert answer.status == "interrupted" and answer.generation.finish_reason == "cancelled"
    assert answer.generation.completion_tokens < 900
    assert "stopped" in bot_texts(page)[-1]


def test_bad_input_gets_a_notice_and_nothing_changes(page, live, context):
    send(page, live, context, "A normal question first")
    before = live.store.stats()["rows"]
    page.fill("#input textarea", "   ")
    page.click("#send")
    page.wait_for_selector("#notice", state="visible", timeout=WAIT_MS)
    assert "empty" in page.inner_text("#notice")
    huge = "too long " * 25_000  # ~225 KB
    page.fill("#input textarea", huge)
    page.click("#send")
    page.wait_for_function("() => document.querySelector('#notice').innerText.includes('limit')", timeout=WAIT_MS)
    assert len(page.input_value("#input textarea")) == len(huge)  # what the user typed is kept
    assert live.store.stats()["rows"] == before
    assert "Traceback" not in page.content()


def test_script_and_onerror_payloads_show_as_text_and_never_run(page, live, context, output_dir):
    payload = ('<img src=x onerror="window.__xss=1;alert(1)"> <script>window.__xss=2;alert(2)</script> '
               '[click me](javascript:window.__xss=3) <b>bold?</b>')
    send(page, live, context, payload)
    uid = user_id(live, context)
    conv = live.store.conversations.list(uid)[0].id
    # The other side: an answer carrying the same payload (as a model or API client could produce).
    parent = live.store.conversations.thread(conv)[-1].id
    live.store.conversations.add_message(conv, "user", "again", parent_id=parent)
    live.store.conversations.add_message(conv, "assistant", "Answer: " + payload, parent_id=live.store.conversations.thread(conv)[-1].id)
    page.click("#new-chat")
    page.locator("#conversations").get_by_text("<img src=x").first.click()
    page.wait_for_function("() => document.querySelector('#chatbot').innerText.includes('Answer:')", timeout=WAIT_MS)
    text = page.inner_text("#chatbot")
    assert text.count('<img src=x onerror="window.__xss=1;alert(1)">') == 2
    assert text.count("<script>window.__xss=2;alert(2)</script>") == 2
    assert page.evaluate("window.__xss") is None and page.dialogs == []
    assert page.locator("#chatbot img[src='x']").count() == 0
    assert page.locator("#chatbot script").count() == 0
    assert page.locator("#chatbot a[href^='javascript']").count() == 0
    links = page.locator("#chatbot a", has_text="click me")
    if links.count():
        links.first.click()
        time.sleep(0.3)
    assert page.evaluate("window.__xss") is None and page.dialogs == []
    page.screenshot(path=str(output_dir / "ui-xss-as-text.png"), full_page=True)


def test_two_users_never_see_each_other(browser, live, output_dir):
    ctx_a = browser.new_context(viewport={"width": 1400, "height": 900})
    ctx_b = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        a = open_app(ctx_a, live.url)
        send(a, live, ctx_a, "Alice's secret: I am planning to quit in May")
        conv_a = live.store.conversations.list(user_id(live, ctx_a))[0].id
        # The UI and the API resolve the same user from the same cookie.
        assert ctx_a.request.get(f"{live.url}/api/conversations/{conv_a}").status == 200
        b = open_app(ctx_b, live.url)
        assert user_id(live, ctx_b) != user_id(live, ctx_a)
        assert "Alice" not in b.inner_text("#conversations") and "Alice" not in b.inner_text("#chatbot")
        r = ctx_b.request.get(f"{live.url}/api/conversations/{conv_a}")
        assert r.status == 404 and "Alice" not in r.text()
        assert ctx_b.request.get(f"{live.url}/api/conversations").json()["conversations"] == []
        answer_a = assistant_messages(live, user_id(live, ctx_a))[0].id
        rr = ctx_b.request.post(f"{live.url}/api/messages/{answer_a}/rating", data={"value": -1})
        assert rr.status == 404 and live.store.conversations.ratings(answer_a) == []
        send(b, live, ctx_b, "Bob's own question")
        assert "Alice" not in b.inner_text("#conversations")
        a.reload()
        a.wait_for_selector("#conversations", timeout=WAIT_MS)
        a.wait_for_function("() => document.querySelector('#conversations').innerText.includes('Alice')",
                            timeout=WAIT_MS)
        assert "Bob" not in a.inner_text("#conversations")
    finally:
        ctx_a.close()
        ctx_b.close()


def test_delete_my_data_after_confirmation(page, live, context, output_dir):
    send(page, live, context, "Something I will want deleted")
    uid = user_id(live, context)
    answer = assistant_messages(live, uid)[0]
    page.click("#delete-data")
    page.wait_for_selector("#delete-confirm", state="visible", timeout=WAIT_MS)
    page.screenshot(path=str(output_dir / "ui-delete-confirm.png"), full_page=True)
    page.click("#delete-no")
    page.wait_for_selector("#delete-confirm", state="hidden", timeout=WAIT_MS)
    assert live.store.conversations.list(uid)
    page.click("#delete-data")
    page.click("#delete-yes")
    wait_until(lambda: live.store.users.is_forgotten(uid), what="the deletion")
    assert not live.store.conversations.list(uid)
    assert peek(live.store, "SELECT count(*) FROM messages WHERE id = ?", [answer.id])[0][0] == 0
    # The page reloads into a fresh anonymous session with an empty sidebar.
    wait_until(lambda: user_id_or_none(live, context) not in (None, uid), what="a new session")
    page.wait_for_selector("#input textarea", timeout=WAIT_MS)
    assert "Something I will want" not in page.inner_text("#conversations")


def user_id_or_none(live, context):
    try:
        return user_id(live, context)
    except (StopIteration, AttributeError):
        return None


def test_operator_screen_needs_admin_and_shows_the_loop(browser, live, output_dir):
    ctx = browser.new_context(viewport={"width": 1400, "height": 1000})
    try:
        page = open_app(ctx, live.url)
        send(page, live, ctx, "A question for the operator's table")
        send(page, live, ctx, "Thanks, that <b>worked</b> perfectly!")
        from feedback.extract import make_extractor
        from feedback.extract.runner import run_extraction

        assert run_extraction(live.store, make_extractor("fast"), lock=threading.Lock(), trigger="test").new_events >= 1
        assert "Operator screen" not in page.inner_text("#who")
        page.goto(live.url + "/operator/")
        page.wait_for_function("() => document.body.innerText.includes('This page is for operators')", timeout=WAIT_MS)
        assert "Conversations" not in page.inner_text("#operator-summary")
        page.goto(live.url + "/signin")
        page.screenshot(path=str(output_dir / "ui-signin.png"))
        page.fill("#token", ADMIN_TOKEN)
        page.click("button[type='submit']")
        page.wait_for_selector("#input textarea", timeout=WAIT_MS)
        page.wait_for_function("() => document.querySelector('#who').innerText.includes('Operator screen')",
                               timeout=WAIT_MS)
        assert page.locator("#who a[href='/operator']").count() == 1
        page.goto(live.url + "/operator/")
        for selector, text in (("#operator-summary", "Conversations"), ("#operator-turns", "operator")):
            page.wait_for_function(f"() => {{ const e = document.querySelector('{selector}'); "
                                   f"return e && e.innerText.includes('{text}'); }}", timeout=WAIT_MS)
        assert page.locator("#operator-counts").is_visible() and page.locator("#operator-reasons").is_visible()
        # The mined feedback sample: the span is marked, the user's HTML stays text.
        page.wait_for_selector("#operator-feedback-sample mark", timeout=WAIT_MS)
        # Other tests' turns on this service may be mined too (a bare "again" reads as a re-ask),
        # and events mined in one run have no fixed order: the thanks is one of the marks.
        marks = page.locator("#operator-feedback-sample mark").all_inner_texts()
        assert any("Thanks" in m for m in marks), marks
        assert page.locator("#operator-feedback-sample b").count() == 0
        assert "<b>worked</b>" in page.inner_text("#operator-feedback-sample")
        assert page.locator("#operator-prevalence").is_visible()
        time.sleep(1)  # let the plots draw before the screenshot
        page.screenshot(path=str(output_dir / "ui-operator.png"), full_page=True)
    finally:
        ctx.close()


def test_model_down_shows_a_friendly_notice(browser, tmp_path, output_dir):
    from service_helpers import down_settings

    down = start_service(down_settings(tmp_path))
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = open_app(ctx, down.url)
        page.fill("#input textarea", "Is the model there?")
        page.click("#send")
        page.wait_for_function("() => document.querySelector('#notice') && "
                               "document.querySelector('#notice').innerText.includes('not available')",
                               timeout=WAIT_MS)
        wait_ui_idle(page)
        assert "could not answer" in page.inner_text("#chatbot")
        assert "Traceback" not in page.content()
        uid = user_id(down, ctx)
        conv = down.store.conversations.list(uid)[0].id
        assert [m.status for m in down.store.conversations.get_messages(conv)] == ["complete", "error"]
        page.screenshot(path=str(output_dir / "ui-model-down.png"), full_page=True)
    finally:
        ctx.close()
        down.stop()
