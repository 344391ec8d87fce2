"""The approval desk, used as people use it: a real Chromium on the page, real clicks.

The server is the real `tailagent serve` with the echo agent. Each tailnet person
reaches it through their own stand-in for `tailscale serve` (tests/serve_proxy.py),
which sets X-Forwarded-For to their tailnet IP; the fake tailscaled says who that
is. So the page names people exactly as it would on a tailnet, with no sign-in.
What the page did is checked through A2A (`GetTask`), not only on the page.
"""

from __future__ import annotations

import http.server
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.browser import PHONE
from tests.conftest import RunningServer, start_server
from tests.serve_proxy import ServeProxy
from tests.tailnet import NODE_DNS, OWNER, FakeTailscaled, whois
from tests.warm_start import cli_run

CAP = "example.com/cap/tailagent"
CONFIG = f"""
[access]
allowed_logins = ["bob@example.com"]
login_roles = ["caller"]
capability = "{CAP}"
"""
PEOPLE = {
    "alice": whois(OWNER, name="pixel-7", ip="100.64.0.2"),
    "bob": whois("bob@example.com", name="bob-laptop", ip="100.64.0.3"),
    "carol": whois(
        "carol@example.com",
        name="carol-phone",
        ip="100.64.0.4",
        caps={CAP: [{"roles": ["caller", "approver"]}]},
    ),
}
# The README's picture: `TAILAGENT_SCREENSHOTS=docs python -m pytest tests/test_desk.py`
# writes it there; otherwise each run's screenshot stays in the test's temporary dir.
SCREENSHOTS = os.environ.get("TAILAGENT_SCREENSHOTS")


@dataclass
class Tailnet:
    server: RunningServer
    proxies: dict[str, ServeProxy]

    def url(self, person: str, path: str = "/desk/") -> str:
        return self.proxies[person].url + path

    def get_task(self, task_id: str) -> dict[str, Any]:
        """A2A GetTask, as this box's owner (the local token) asks it."""
        body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}
        headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {self.server.token}"}
        reply = httpx.post(self.server.url + "/", json=body, headers=headers, timeout=10)
        result: dict[str, Any] = reply.json()["result"]
        return result

    def state(self, task_id: str) -> str:
        return str(self.get_task(task_id)["status"]["state"])

    def wait_state(self, task_id: str, wanted: str, seconds: float = 10) -> None:
        deadline = time.monotonic() + seconds
        while (state := self.state(task_id)) != wanted and time.monotonic() < deadline:
            time.sleep(0.1)
        assert state == wanted


@pytest.fixture(scope="module")
def tailnet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tailnet]:
    tmp = tmp_path_factory.mktemp("desk")
    fake = FakeTailscaled(tmp / "tailscaled").start()
    for person in PEOPLE.values():
        ip = person["Node"]["Addresses"][0].split("/")[0]
        fake.peers[ip] = person
    fake.write()
    config = tmp / "tailagent.toml"
    config.write_text(CONFIG)
    server = start_server(tmp, "--config", str(config), "--tailscale-socket", str(fake.socket))
    port = int(server.url.rsplit(":", 1)[1])
    proxies = {
        name: ServeProxy(port, person["Node"]["Addresses"][0].split("/")[0]).start()
        for name, person in PEOPLE.items()
    }
    yield Tailnet(server, proxies)
    for proxy in proxies.values():
        proxy.stop()
    server.stop()
    fake.stop()


@pytest.fixture
def context(browser: Browser) -> Iterator[BrowserContext]:
    made = browser.new_context()
    yield made
    made.close()


def start_task(page: Page, tailnet: Tailnet, person: str, text: str) -> str:
    """Sends a task from the desk's own form; returns its id (from the page it lands on)."""
    page.goto(tailnet.url(person))
    page.fill("#text", text)
    page.click("form.send button")
    page.wait_for_url(re.compile(r"/desk/tasks/[0-9a-f-]+$"))
    return page.url.rsplit("/", 1)[1]


def test_the_page_names_the_tailnet_person_with_no_sign_in(
    tailnet: Tailnet, context: BrowserContext
) -> None:
    page = context.new_page()
    page.goto(tailnet.url("alice", "/"))  # what people type: the root
    assert page.url.endswith("/desk/")
    expect(page.locator(".viewer")).to_have_text(f"{OWNER} from pixel-7")


def buggy_calc(tailnet: Tailnet) -> None:
    """The workspace's calc.py with the bug the echo agent's `edit` fixes (an earlier
    test's edit fixed it already, and a fixed file is left alone)."""
    workspace = tailnet.server.state_dir.parent / "workspace"
    (workspace / "calc.py").write_text("def add(a, b):\n    return a - b\n")


def test_the_transcript_arrives_live_without_a_reload(
    tailnet: Tailnet, context: BrowserContext
) -> None:
    buggy_calc(tailnet)
    page = context.new_page()
    task_id = start_task(page, tailnet, "alice", "think plan tool edit slow 3")
    page.evaluate("window.sameDocument = true")
    expect(page.locator(".answer")).to_contain_text("tick 1/3")
    expect(page.locator(".answer")).to_contain_text("echo: think plan tool edit slow 3")
    expect(page.locator(".task-head .state")).to_have_text("completed")
    assert page.evaluate("window.sameDocument") is True  # no reload happened
    # As the agent left it: "Fix the bug" in progress, "Run the tests" never started.
    expect(page.locator(".plan .step-completed")).to_have_count(1)
    expect(page.locator(".plan .step-in_progress")).to_contain_text("left running")
    expect(page.locator(".plan .step-pending")).to_contain_text("not done")
    expect(page.locator("[data-key='tool:tool-1'] .tool-status")).to_have_text("completed")
    diff = page.locator("article.diff")
    expect(diff.locator(".path")).to_have_text("calc.py")
    expect(diff.locator(".added")).to_have_text("+1")
    expect(diff.locator(".del")).to_have_text("-    return a - b")
    # A shared workspace leaves no commit: the agent's own account, said to be one.
    expect(diff.locator(".source")).to_have_text("reported by the agent")
    expect(page.locator("details.thinking")).not_to_have_attribute("open", "")
    assert tailnet.state(task_id) == "TASK_STATE_COMPLETED"


def test_approving_from_the_page_completes_the_task_and_says_who(
    tailnet: Tailnet, context: BrowserContext
) -> None:
    page = context.new_page()
    task_id = start_task(page, tailnet, "alice", "ask")
    ask = page.locator("section.ask")
    expect(ask.locator("pre.input")).to_contain_text('"command": "rm -rf build"')
    expect(ask.locator(".why")).to_have_text("The echo agent asks before every command.")
    expect(page.locator(".task-head .who")).to_have_text("You")
    ask.get_by_role("button", name="Allow", exact=True).click()
    decision = page.locator(".decision")
    expect(decision).to_contain_text("You allowed rm -rf build")
    expect(page.locator("section.ask")).to_have_count(0)
    tailnet.wait_state(task_id, "TASK_STATE_COMPLETED")
    audit = cli_run(
        [sys.executable, "-m", "tailagent", "audit", "--json",
         "--state-dir", str(tailnet.server.state_dir)],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    row = [line for line in audit.splitlines() if task_id in line][-1]
    assert "pixel-7" in row and "via web" in row and '"allow"' in row


def test_deny_with_a_message_gives_the_agent_the_persons_words(
    tailnet: Tailnet, context: BrowserContext
) -> None:
    page = context.new_page()
    task_id = start_task(page, tailnet, "alice", "ask")
    ask = page.locator("section.ask")
    ask.get_by_text("Deny with a message").click()
    ask.locator("textarea[name=message]").fill("not on the shared box")
    ask.get_by_role("button", name="Deny with this message").click()
    expect(page.locator(".decision")).to_contain_text(
        "You denied rm -rf build: not on the shared box"
    )
    expect(page.locator(".item.notice")).to_contain_text("not on the shared box")
    tailnet.wait_state(task_id, "TASK_STATE_COMPLETED")


def test_a_question_shows_its_options_as_choices(tailnet: Tailnet, context: BrowserContext) -> None:
    page = context.new_page()
    task_id = start_task(page, tailnet, "alice", "question")
    ask = page.locator("section.ask")
    expect(ask.locator("legend")).to_have_text("Which colour do you prefer?")
    ask.get_by_label("blue").check()
    ask.get_by_role("button", name="Answer").click()
    expect(page.locator(".answer")).to_contain_text("You chose blue.")
    tailnet.wait_state(task_id, "TASK_STATE_COMPLETED")


def put_back_answer_form(
    page: Page, task_id: str, token: str | None, request_id: str | None, choice: str
) -> None:
    """Adds to the page, as `#stale`, an answer form as it was when the page showed the
    question (its live view has taken the question away since)."""
    page.evaluate(
        """([action, token, requestId, choice]) => {
            const form = document.createElement("form");
            form.id = "stale"; form.method = "post"; form.action = action;
            for (const [name, value] of [["token", token], ["requestId", requestId]]) {
                const input = document.createElement("input");
                input.type = "hidden"; input.name = name; input.value = value;
                form.appendChild(input);
            }
            const button = document.createElement("button");
            button.name = "choice"; button.value = choice; button.textContent = choice;
            form.appendChild(button);
            document.body.appendChild(form);
        }""",
        [f"/desk/tasks/{task_id}/answer", token, request_id, choice],
    )


def test_a_second_answer_is_refused_and_names_who_answered_first(
    tailnet: Tailnet, context: BrowserContext
) -> None:
    first, second = context.new_page(), context.new_page()
    task_id = start_task(first, tailnet, "alice", "ask slow 2")
    second.goto(tailnet.url("alice", f"/desk/tasks/{task_id}"))
    form = second.locator("section.ask form")
    token = form.locator("input[name=token]").get_attribute("value")
    request_id = form.locator("input[name=requestId]").get_attribute("value")
    first.locator("section.ask").get_by_role("button", name="Allow", exact=True).click()
    expect(first.locator(".decision")).to_contain_text("You allowed")
    # The other tab answers the same prompt a moment later. Its live view has taken the
    # question away by now, so put its form back as it was when the tab rendered it.
    put_back_answer_form(second, task_id, token, request_id, "allow")
    with second.expect_navigation():
        second.locator("#stale button").click()
    refusal = second.locator(".refusal")
    expect(refusal).to_contain_text("answered already")
    expect(refusal.locator(".decision")).to_contain_text("You allowed rm -rf build")
    expect(second.locator(".bar .viewer")).to_have_text(f"{OWNER} from pixel-7")
    tailnet.wait_state(task_id, "TASK_STATE_COMPLETED")


def test_cross_site_and_tokenless_and_replayed_posts_change_nothing(
    tailnet: Tailnet, browser: Browser
) -> None:
    alice = browser.new_context()
    carol = browser.new_context()
    page = alice.new_page()
    task_id = start_task(page, tailnet, "alice", "ask")
    expect(page.locator("section.ask")).to_be_visible()
    token = page.locator("section.ask input[name=token]").get_attribute("value") or ""
    request_id = page.locator("section.ask input[name=requestId]").get_attribute("value") or ""
    action = tailnet.url("alice", f"/desk/tasks/{task_id}/answer")

    # 1. Another site's page, open in alice's own browser, posts alice's valid form.
    evil = EvilSite(
        f'<form method="post" action="{action}"><input name="token" value="{token}">'
        f'<input name="requestId" value="{request_id}">'
        '<button name="choice" value="allow">win a prize</button></form>'
    )
    try:
        other = alice.new_page()
        other.goto(evil.url)
        with other.expect_navigation():
            other.click("button")
        assert "may not change anything here" in other.content()
    finally:
        evil.stop()
    assert tailnet.state(task_id) == "TASK_STATE_INPUT_REQUIRED"

    # 2. The page's own form without its token.
    page.locator("section.ask input[name=token]").evaluate("el => el.remove()")
    page.locator("section.ask").get_by_role("button", name="Allow", exact=True).click()
    expect(page.locator(".refusal")).to_contain_text("token is not valid")
    assert tailnet.state(task_id) == "TASK_STATE_INPUT_REQUIRED"

    # 3. carol (an approver) replays alice's token from her own browser.
    carol_page = carol.new_page()
    carol_page.goto(tailnet.url("carol"))
    replay = carol_page.request.post(
        tailnet.url("carol", f"/desk/tasks/{task_id}/answer"),
        form={"token": token, "choice": "allow", "requestId": request_id},
        headers={"Origin": tailnet.proxies["carol"].url},
    )
    assert replay.status == 403
    assert "not valid for you" in replay.text()
    assert tailnet.state(task_id) == "TASK_STATE_INPUT_REQUIRED"
    alice.close()
    carol.close()


class EvilSite:
    """A page on another origin (localhost, not 127.0.0.1): another site to the browser."""

    def __init__(self, body: str) -> None:
        payload = f"<!doctype html><title>prize</title>{body}".encode()

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)

            def log_message(self, *_: object) -> None:
                return

        self._server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.url = f"http://localhost:{self._server.server_address[1]}/"
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def stop(self) -> None:
        self._server.shutdown()


def test_a_caller_without_the_approver_role_cannot_approve(
    tailnet: Tailnet, context: BrowserContext
) -> None:
    page = context.new_page()
    task_id = start_task(page, tailnet, "bob", "ask")
    allow = page.locator("section.ask").get_by_role("button", name="Allow", exact=True)
    expect(allow).to_be_disabled()
    expect(page.locator("section.ask .note")).to_contain_text("approver role")
    allow.evaluate("el => { el.disabled = false; }")  # whatever the page sends
    allow.click()
    expect(page.locator(".refusal")).to_contain_text("lacks the approver role")
    assert tailnet.state(task_id) == "TASK_STATE_INPUT_REQUIRED"


def test_a_dropped_connection_resumes_with_no_gap_and_no_duplicate(
    tailnet: Tailnet, context: BrowserContext
) -> None:
    page = context.new_page()
    streams: list[str] = []
    page.on("request", lambda r: streams.append(r.url) if "/events" in r.url else None)
    task_id = start_task(page, tailnet, "alice", "tool slow 6 tool")
    expect(page.locator(".answer")).to_contain_text("tick 2/6")
    assert tailnet.proxies["alice"].drop() >= 1
    expect(page.locator("#live")).to_contain_text("connection lost")
    expect(page.locator("#live")).to_have_text("reconnected", timeout=10_000)
    expect(page.locator(".task-head .state")).to_have_text("completed", timeout=15_000)
    answer = page.locator(".answer").inner_text()
    assert [f"tick {n}/6" for n in range(1, 7)] == re.findall(r"tick \d/6", answer)
    keys = page.locator(".task [data-key]").evaluate_all("els => els.map(e => e.dataset.key)")
    assert len(keys) == len(set(keys))
    assert keys.count("tool:tool-1") == 1 and keys.count("tool:tool-2") == 1
    assert len([u for u in streams if task_id in u]) >= 2  # it really reconnected
    assert tailnet.state(task_id) == "TASK_STATE_COMPLETED"


def test_a_phone_taken_offline_and_back_shows_every_event_once(
    tailnet: Tailnet, browser: Browser
) -> None:
    """The phone loses its network mid-turn (Chromium offline, its open stream cut)
    while the agent goes on; back online, the page shows what it missed, each once,
    with no reload."""
    phone = browser.new_context(viewport={"width": 390, "height": 844})
    try:
        page = phone.new_page()
        task_id = start_task(page, tailnet, "alice", "tool slow 6 tool")
        expect(page.locator(".answer")).to_contain_text("tick 1/6")
        loads = page.evaluate("performance.getEntriesByType('navigation').length")
        phone.set_offline(True)
        tailnet.proxies["alice"].drop()  # the network goes, and the open stream with it
        expect(page.locator("#live")).to_contain_text("connection lost", timeout=10_000)
        tailnet.wait_state(task_id, "TASK_STATE_COMPLETED")  # the rest said while away
        phone.set_offline(False)
        expect(page.locator(".task-head .state")).to_have_text("completed", timeout=15_000)
        answer = page.locator(".answer").inner_text()
        assert [f"tick {n}/6" for n in range(1, 7)] == re.findall(r"tick \d/6", answer)
        keys = page.locator(".task [data-key]").evaluate_all("els => els.map(e => e.dataset.key)")
        assert len(keys) == len(set(keys))
        assert page.evaluate("performance.getEntriesByType('navigation').length") == loads
        if SCREENSHOTS:
            page.screenshot(path=f"{SCREENSHOTS}/desk-back-online.png")
    finally:
        phone.close()


def test_cancel_and_follow_up_from_the_page(tailnet: Tailnet, context: BrowserContext) -> None:
    page = context.new_page()
    task_id = start_task(page, tailnet, "alice", "slow 20")
    expect(page.locator(".answer")).to_contain_text("tick 1/20")
    page.get_by_role("button", name="Cancel task").click()
    expect(page.locator(".task-head .state")).to_have_text("canceled")
    tailnet.wait_state(task_id, "TASK_STATE_CANCELED")
    page.fill("#follow", "and now: edit")
    page.click("form.follow button")
    page.wait_for_url(re.compile(r"/desk/tasks/[0-9a-f-]+$"))
    follow_id = page.url.rsplit("/", 1)[1]
    assert follow_id != task_id
    expect(page.locator(".answer")).to_contain_text("echo: and now: edit")
    first, follow = tailnet.get_task(task_id), tailnet.get_task(follow_id)
    assert first["contextId"] == follow["contextId"]


def test_agent_output_with_html_is_shown_as_text(tailnet: Tailnet, context: BrowserContext) -> None:
    page = context.new_page()
    hostile = '<script>window.pwned = 1</script><img src=x onerror="window.pwned = 2">'
    task_id = start_task(page, tailnet, "alice", hostile)
    expect(page.locator(".answer")).to_contain_text("echo: " + hostile)
    assert page.evaluate("window.pwned") is None
    assert page.locator("main img").count() == 0
    assert page.locator("main script").count() == 0
    page.goto(tailnet.url("alice"))
    expect(page.locator(f".row[data-task='{task_id}'] .title")).to_have_text(hostile)


def test_a_task_that_starts_waiting_raises_a_badge_and_a_notification(
    tailnet: Tailnet, browser: Browser
) -> None:
    """With notifications allowed but no push subscription, the open page itself tells
    of a task that starts waiting, through its service worker (as Android requires)."""
    watcher = browser.new_context()
    watcher.grant_permissions(["notifications"], origin=tailnet.proxies["alice"].url)
    listing = watcher.new_page()
    listing.goto(tailnet.url("alice"))
    expect(listing.locator("#rows")).to_be_visible()
    deadline = time.monotonic() + 10  # the page's service worker controls it
    while not listing.evaluate("navigator.serviceWorker.controller !== null"):
        assert time.monotonic() < deadline, "no service worker took the page"
        listing.wait_for_timeout(50)
    listing.wait_for_timeout(300)  # the list's stream is open
    other = watcher.new_page()
    task_id = start_task(other, tailnet, "alice", "ask")
    expect(listing).to_have_title(re.compile(r"^\(\d+\) tailagent"))
    row = listing.locator(f".row.waiting[data-task='{task_id}']")
    expect(row.locator(".meta")).to_contain_text("You")
    expect(row.locator(".asked")).to_have_text("Asks to run rm -rf build")
    shown = listing.evaluate(
        "navigator.serviceWorker.ready.then((r) => r.getNotifications())"
        ".then((notes) => notes.map((n) => [n.title, n.tag, n.data.url]))"
    )
    assert ["tailagent: a task waits for you", task_id, f"/desk/tasks/{task_id}#ask"] in shown
    other.locator("section.ask").get_by_role("button", name="Deny", exact=True).click()
    expect(listing.locator(f".row.waiting[data-task='{task_id}']")).to_have_count(0)
    watcher.close()


def test_on_a_phone_a_person_drives_a_whole_task(
    tailnet: Tailnet, browser: Browser, tmp_path: Path
) -> None:
    """Start, watch, approve, read the diff, follow up and cancel, at 390×844, by taps."""
    buggy_calc(tailnet)
    phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = phone.new_page()
    start_task(page, tailnet, "alice", "think plan tool edit ask")
    ask = page.locator("section.ask")
    expect(ask).to_be_visible()
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the page scrolls sideways: {width}px"
    for button in ask.locator("button").all():
        box = button.bounding_box()
        assert box is not None and box["x"] >= 0 and box["x"] + box["width"] <= PHONE["width"]
    lines = page.locator("article.diff .lines")
    assert lines.evaluate("el => getComputedStyle(el).overflowX") == "auto"
    shot = Path(SCREENSHOTS or tmp_path) / "desk-phone.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    ask.get_by_role("button", name="Allow", exact=True).tap()
    expect(page.locator(".task-head .state")).to_have_text("completed")
    page.fill("#follow", "slow 30")
    page.locator("form.follow button").tap()
    page.wait_for_url(re.compile(r"/desk/tasks/[0-9a-f-]+$"))
    expect(page.locator(".answer")).to_contain_text("tick 1/30")
    page.get_by_role("button", name="Cancel task").tap()
    expect(page.locator(".task-head .state")).to_have_text("canceled")
    assert tailnet.state(page.url.rsplit("/", 1)[1]) == "TASK_STATE_CANCELED"
    phone.close()


def test_the_short_magicdns_name_names_this_server(tailnet: Tailnet) -> None:
    short = NODE_DNS.split(".")[0]
    ok = httpx.get(tailnet.url("alice", "/desk/"), headers={"Host": short})
    assert ok.status_code == 200
    other = httpx.get(tailnet.url("alice", "/desk/"), headers={"Host": "evil.example.com"})
    assert other.status_code == 403
