"""The desk on a phone, where a newcomer first meets it (issue 43, item 6): the page that
says how to sign in, an answer given with JavaScript off, and "Notify me" while the
browser's registration never answers. Each through a real server, the real `tailagent
web`, and Chromium at 390×844; the screenshots are kept in the test's tmp dir.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, Page, expect

from tests.browser import PHONE
from tests.conftest import RunningServer, start_server
from tests.test_desk_access import signin_link


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("desk-phone")
    server = start_server(tmp, "--tailscale-socket", str(tmp / "no-tailscaled.sock"))
    yield server
    server.stop()


def test_the_sign_in_page_looks_like_the_desk_and_says_how_in_plain_words(
    local: RunningServer, browser: Browser, tmp_path: Path
) -> None:
    page = browser.new_context(viewport=PHONE).new_page()
    reply = page.goto(f"{local.url}/desk/")
    assert reply is not None and reply.status == 401
    expect(page.locator("h1")).to_have_text("Sign in to the approval desk")
    words = page.locator(".refusal.signin")
    expect(words).to_contain_text("switch Tailscale on")
    expect(words).to_contain_text("run tailagent web in a terminal")
    for jargon in ("LocalAPI", "bearer", "tailscaled"):
        assert jargon not in words.inner_text()
    # The desk's own look: its stylesheet applied (the dark top bar), not the browser's.
    bar = page.locator("nav.bar").evaluate("e => getComputedStyle(e).backgroundColor")
    assert bar == "rgb(28, 25, 23)"
    details = page.locator("details.why")
    assert not details.locator("p").is_visible()
    details.locator("summary").click()
    expect(details).to_contain_text("LocalAPI unreachable")
    page.screenshot(path=str(tmp_path / "signin-needed.png"), full_page=True)
    # The stylesheet is all the sign-in page opens up: the desk's script is not.
    assert httpx.get(f"{local.url}/desk/static/desk.css").status_code == 200
    assert httpx.get(f"{local.url}/desk/static/desk.js").status_code == 401


def signed_in_page(browser: Browser, server: RunningServer, javascript: bool = True) -> Page:
    context = browser.new_context(viewport=PHONE, java_script_enabled=javascript)
    page = context.new_page()
    page.goto(signin_link(server))
    expect(page.locator(".viewer")).to_have_text("this box's owner")
    return page


def wait_for_question(page: Page, text: str) -> None:
    """Sends `text` from the page's form and reloads (no live view without JavaScript)
    until the agent's question is on it."""
    page.fill("#text", text)
    page.click("form.send button")
    page.wait_for_url(re.compile(r"/desk/tasks/[0-9a-f-]+$"))
    for _ in range(100):
        if page.locator("section.ask").count():
            return
        page.wait_for_timeout(100)
        page.reload()
    raise AssertionError(page.content())


@pytest.mark.parametrize(
    ("text", "answer", "shown"),
    [
        ("question", "blue", "You answered “Which colour do you prefer?”: blue"),
        ("ask", "Allow", "You allowed rm -rf build"),
    ],
)
def test_an_answer_with_javascript_off_lands_on_the_answered_page(
    local: RunningServer, browser: Browser, tmp_path: Path, text: str, answer: str, shown: str
) -> None:
    page = signed_in_page(browser, local, javascript=False)
    expect(page.locator("#notify")).to_be_hidden()  # a button that could do nothing
    wait_for_question(page, text)
    ask = page.locator("section.ask")
    if answer == "Allow":
        ask.get_by_role("button", name="Allow", exact=True).click()
    else:
        ask.get_by_label(answer).check()
        ask.get_by_role("button", name="Answer").click()
    # The page the form's redirect loads, with no script to bring it up to date.
    page.wait_for_load_state()
    assert page.locator("section.ask").count() == 0
    expect(page.locator(".decision")).to_contain_text(shown)
    page.screenshot(path=str(tmp_path / f"no-js-{text}-answered.png"), full_page=True)
    page.context.close()


HANGING_REGISTRATION = """
Object.defineProperty(navigator, "serviceWorker", {
  value: { register: () => new Promise(() => {}) }, configurable: true,
});
"""


def test_notify_me_says_it_waits_for_a_hanging_registration_and_then_why_it_stopped(
    local: RunningServer, browser: Browser, tmp_path: Path
) -> None:
    context = browser.new_context(viewport=PHONE)
    context.grant_permissions(["notifications"], origin=local.url)
    context.add_init_script(HANGING_REGISTRATION)
    page = context.new_page()
    page.clock.install()
    page.goto(signin_link(local))
    button, status = page.locator("#notify"), page.locator("#notify-status")
    expect(button).to_have_text("Notify me")  # shown though the registration never ends
    button.click()
    expect(status).to_have_text("Waiting for this browser to set up notifications…")
    expect(button).to_be_disabled()
    page.screenshot(path=str(tmp_path / "notify-waiting.png"))
    page.clock.run_for(14_000)
    expect(status).to_have_text("Waiting for this browser to set up notifications…")
    page.clock.run_for(2_000)
    expect(status).to_contain_text("Notifications could not be turned on")
    expect(status).to_contain_text("did not set up the desk's service worker within 15 seconds")
    expect(status).to_contain_text("reload the page and tap Notify me again.")
    expect(button).to_be_enabled()  # a second tap tries again
    page.screenshot(path=str(tmp_path / "notify-timed-out.png"))
    context.close()
