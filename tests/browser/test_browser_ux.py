"""The chat as people use it, in real Chromium, on a phone-sized and a desktop window:
Enter sends and Shift+Enter adds a line; on a phone the conversation and the input come first and
each drawer is one tap away; a guest's conversation follows them into their account; a like can be
taken back (and the operator stops counting it); one conversation can be deleted; each answer names
its steering; no serious accessibility violation (axe-core). Screenshots go to the test output.
"""

from __future__ import annotations

import pytest
from prereqs import AXE, CHROMIUM, requires
from service_helpers import ADMIN_TOKEN, start_service, tiny_settings
from test_browser_chat import (
    WAIT_MS,
    assistant_messages,
    browser,  # noqa: F401
    hover_buttons,
    last_bot,
    open_app,
    open_steering,
    send,
    user_id,
    wait_ui_idle,
    wait_until,
)

SIZES = {"phone": (390, 844), "desktop": (1400, 900)}

pytestmark = [
    pytest.mark.browser,
    requires(CHROMIUM.exists(), "needs Debian's Chromium at /usr/bin/chromium (apt-get install -y chromium)"),
]


@pytest.fixture(scope="module")
def live(tiny_model_dir, tmp_path_factory):
    service = start_service(tiny_settings(tmp_path_factory.mktemp("ux"), tiny_model_dir,
                                          **{"backend.max_new_tokens": 16}))
    yield service
    service.stop()


@pytest.fixture(params=list(SIZES))
def sized(request, browser):  # noqa: F811
    width, height = SIZES[request.param]
    ctx = browser.new_context(viewport={"width": width, "height": height})
    yield request.param, ctx
    ctx.close()


def open_drawer(page, which: str) -> None:
    if not page.locator(f"#{which}.open").count():
        page.click(f"#{which} > .toggle-button")
        page.wait_for_selector(f"#{which}.open", timeout=WAIT_MS)


def close_drawer(page, which: str) -> None:
    if page.locator(f"#{which}.open").count():
        page.click(f"#{which} > .toggle-button")
        page.wait_for_selector(f"#{which}:not(.open)", timeout=WAIT_MS)


def test_enter_sends_and_shift_enter_adds_a_line(sized, live, output_dir):
    size, ctx = sized
    page = open_app(ctx, live.url)
    box = page.locator("#input textarea")
    box.click()
    page.keyboard.type("First line")
    page.keyboard.press("Shift+Enter")
    page.keyboard.type("second line")
    assert box.input_value() == "First line\nsecond line"
    uid = user_id(live, ctx)
    assert assistant_messages(live, uid) == []  # Shift+Enter sent nothing
    page.keyboard.press("Enter")
    wait_until(lambda: len(assistant_messages(live, uid)) == 1, what="the answer to be stored")
    wait_ui_idle(page)
    conv = live.store.conversations.list(uid)[0]
    assert live.store.conversations.get_messages(conv.id)[0].content == "First line\nsecond line"
    page.screenshot(path=str(output_dir / f"ux-chat-{size}.png"))


def test_phone_shows_the_conversation_first_and_drawers_one_tap_away(browser, live, output_dir):  # noqa: F811
    ctx = browser.new_context(viewport={"width": 390, "height": 844})
    try:
        page = open_app(ctx, live.url)
        send(page, live, ctx, "How do I tell my flatmate to stop borrowing my things?")
        box = page.locator("#input textarea").bounding_box()
        assert box is not None and box["y"] + box["height"] <= 844, "the input is below the screen"
        assert page.locator("#chatbot").bounding_box()["y"] < box["y"]
        for drawer in ("sidebar", "steering"):
            assert not page.locator(f"#{drawer}.open").count()  # closed: the chat comes first
        open_drawer(page, "sidebar")
        assert page.locator("#conversations").is_visible() and "borrowing" in page.inner_text("#conversations")
        page.screenshot(path=str(output_dir / "ux-phone-conversations.png"))
        close_drawer(page, "sidebar")
        open_drawer(page, "steering")
        assert page.locator("#verbosity").is_visible()
        page.screenshot(path=str(output_dir / "ux-phone-steering.png"))
    finally:
        ctx.close()


def test_each_answer_names_its_steering_and_a_regenerate_shows_what_changed(browser, live):  # noqa: F811
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = open_app(ctx, live.url)
        send(page, live, ctx, "Should I lend my car to my cousin?")
        assert "verbosity 2 · complexity 2" in last_bot(page).inner_text()
        open_steering(page)
        page.fill("#verbosity input[type='number']", "4")
        page.press("#verbosity input[type='number']", "Enter")
        uid = user_id(live, ctx)
        last_bot(page).hover()
        hover_buttons(page, "Retry").last.click()
        wait_until(lambda: len(assistant_messages(live, uid)) == 2, what="the regenerated answer")
        wait_ui_idle(page)
        # Stored is not yet shown: the page swaps the regenerated answer in after the store has it.
        page.wait_for_function("""() => {
            const bots = document.querySelectorAll('#chatbot [data-testid="bot"]');
            return bots.length && bots[bots.length - 1].innerText.includes('verbosity 4');
        }""", timeout=WAIT_MS)
        html = last_bot(page).inner_html()
        assert "verbosity 4" in html and ("<strong>verbosity 4</strong>" in html or "<b>verbosity 4</b>" in html)
    finally:
        ctx.close()


def test_a_guests_conversation_is_there_after_signing_up(browser, live):  # noqa: F811
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = open_app(ctx, live.url)
        send(page, live, ctx, "A question I asked before I had an account")
        page.goto(live.url + "/signin")
        page.fill("#name", "ux-newcomer")
        page.fill("#password", "a long enough password")
        page.check("input[name='create']")
        page.click("button[type='submit']")
        page.wait_for_selector("#input textarea", timeout=WAIT_MS)
        page.wait_for_function("() => document.querySelector('#who').innerText.includes('ux-newcomer')",
                               timeout=WAIT_MS)
        open_drawer(page, "sidebar")
        page.wait_for_function("() => document.querySelector('#conversations').innerText.includes('before I had')",
                               timeout=WAIT_MS)
    finally:
        ctx.close()


def test_a_taken_back_like_is_no_longer_counted(browser, live):  # noqa: F811
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = open_app(ctx, live.url)
        send(page, live, ctx, "How do I stop checking my phone at night?")
        uid = user_id(live, ctx)
        answer = assistant_messages(live, uid)[0]
        last_bot(page).hover()
        hover_buttons(page, "Like").last.click()
        wait_until(lambda: [r.value for r in live.store.conversations.ratings(answer.id)] == [1], what="the like")
        page.wait_for_selector("#rating-panel", state="visible", timeout=WAIT_MS)
        page.click("#rating-close")
        last_bot(page).hover()
        hover_buttons(page, "Liked").last.click()  # clicking the active like again takes it back
        wait_until(lambda: [r.value for r in live.store.conversations.ratings(answer.id)] == [1, 0], what="the withdrawal")
        with live.admin() as admin:
            likes = admin.get("/api/admin/turns", params={"limit": 50}).json()["turns"]
        assert next(t for t in likes if t["message_id"] == answer.id)["rating"] in (0, None)
        op = browser.new_context(viewport={"width": 1400, "height": 1000})
        try:
            op_page = op.new_page()
            op_page.goto(live.url + "/signin")
            op_page.fill("#token", ADMIN_TOKEN)
            op_page.click("button[type='submit']")
            op_page.goto(live.url + "/operator/")
            op_page.wait_for_function("() => { const e = document.querySelector('#operator-summary'); "
                                      "return e && e.innerText.includes('likes'); }", timeout=WAIT_MS)
            assert "likes 0" in op_page.inner_text("#operator-summary")
        finally:
            op.close()
    finally:
        ctx.close()


def test_delete_one_conversation_after_confirming(browser, live):  # noqa: F811
    ctx = browser.new_context(viewport={"width": 1400, "height": 900})
    try:
        page = open_app(ctx, live.url)
        send(page, live, ctx, "A conversation I will delete")
        uid = user_id(live, ctx)
        conv = live.store.conversations.list(uid)[0].id
        page.locator("#chatbot button[aria-label='Clear']").first.click()
        page.wait_for_selector("#conv-delete-confirm", state="visible", timeout=WAIT_MS)
        page.click("#conv-delete-no")  # kept: nothing is deleted, the thread is back
        page.wait_for_selector("#conv-delete-confirm", state="hidden", timeout=WAIT_MS)
        assert live.store.conversations.list(uid) and "delete" in page.inner_text("#chatbot")
        page.locator("#chatbot button[aria-label='Clear']").first.click()
        page.click("#conv-delete-yes")
        wait_until(lambda: live.store.conversations.list(uid) == [], what="the conversation to be deleted")
        page.wait_for_function("() => !document.querySelector('#conversations').innerText.includes('will delete')",
                               timeout=WAIT_MS)
        with live.client(cookies={c["name"]: c["value"] for c in ctx.cookies()}) as api:
            assert api.get(f"/api/conversations/{conv}").status_code == 404
    finally:
        ctx.close()


@requires(AXE.exists(), f"needs axe-core at {AXE} (scripts/setup_test_deps.sh installs it with npm)")
def test_no_serious_accessibility_violations(sized, live):
    size, ctx = sized
    page = open_app(ctx, live.url)
    send(page, live, ctx, "Is it fine to skip a friend's birthday party?")
    for drawer in ("sidebar", "steering"):  # check what is inside the drawers too
        open_drawer(page, drawer)
        # Check the settled page: colours caught mid-transition (a drawer sliding, a status fading
        # in) are not what anyone reads, and made this check flaky. Endless animations (spinners)
        # never settle, so they do not count.
        page.wait_for_function("""() => document.getAnimations().every(
            a => a.playState !== 'running' || a.effect.getTiming().iterations === Infinity)""", timeout=WAIT_MS)
        page.add_script_tag(path=str(AXE))
        found = page.evaluate("""async () => (await axe.run(document, {resultTypes: ['violations']})).violations
            .filter(v => v.impact === 'serious' || v.impact === 'critical')
            .map(v => v.id + ': ' + v.nodes.map(n => n.target.join(' ')).join(', '))""")
        assert found == [], f"{size}, {drawer} open: {found}"
        if size == "phone":
            close_drawer(page, drawer)
