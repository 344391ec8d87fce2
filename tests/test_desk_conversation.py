"""The desk as a person reads it: the list answers questions, a task reads as a conversation.

Issue 33, sections 2 and 3, checked in a real Chromium against the real `tailagent serve`
with the echo agent, people reached through their own `tailscale serve` stand-ins, at a
phone's 390×844 and on a desktop. What the page did is checked through A2A too.
`TAILAGENT_SCREENSHOTS=<dir>` keeps the phone screenshots there.
"""

from __future__ import annotations

import os
import re
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, BrowserContext, FloatRect, Locator, Page, expect

from tailagent.web.views import markdown
from tests.browser import PHONE
from tests.conftest import RunningServer
from tests.test_desk import OWNER, Tailnet, context, put_back_answer_form, start_task, tailnet
from tests.test_desk_access import owner_link
from tests.test_desk_worktree import repo_server
from tests.test_isolation import git

__all__ = ["context", "repo_server", "tailnet"]  # fixtures shared with their modules
SCREENSHOTS = os.environ.get("TAILAGENT_SCREENSHOTS")
# What the page must never show a person: the protocol's own words for an answer.
RAW = re.compile(r"option:|permission_response|requestId|allow_once|reject_once")


@pytest.fixture
def phone(browser: Browser) -> Iterator[BrowserContext]:
    made = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    yield made
    made.close()


def shot(page: Page, name: str, tmp_path: Path) -> None:
    """A phone screenshot, kept where TAILAGENT_SCREENSHOTS says (else the test's dir)."""
    folder = Path(SCREENSHOTS or tmp_path)
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{name}.png"), full_page=True)


def send_as(tailnet: Tailnet, person: str, text: str) -> str:
    """SendMessage over A2A as a tailnet person (whois names them); the new task's id."""
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "SendMessage",
        "params": {"message": message, "configuration": {"returnImmediately": True}},
    }
    reply = httpx.post(
        tailnet.url(person, "/"), json=body, headers={"A2A-Version": "1.0"}, timeout=30
    )
    return str(reply.json()["result"]["task"]["id"])


def visible_text(page: Page) -> str:
    return str(page.locator("main").inner_text())


# --- 2. the list ------------------------------------------------------------------------


def test_a_waiting_permission_is_answered_from_the_list_on_a_phone(
    tailnet: Tailnet, phone: BrowserContext, tmp_path: Path
) -> None:
    page = phone.new_page()
    task_id = start_task(page, tailnet, "alice", "ask")
    expect(page.locator("section.ask")).to_be_visible()
    page.goto(tailnet.url("alice"))
    row = page.locator(f".row[data-task='{task_id}']")
    expect(row).to_have_class(re.compile(r"\bwaiting\b"))
    expect(row.locator(".asked")).to_have_text("Asks to run rm -rf build")
    expect(row.locator(".asked code")).to_have_text("rm -rf build")
    expect(page.locator(".list-title .count")).to_have_text(re.compile(r"^\d+ waiting for you$"))
    allow = row.get_by_role("button", name="Allow", exact=True)
    deny = row.get_by_role("button", name="Deny", exact=True)
    for button in (allow, deny):
        box = settled_box(button)
        assert box["x"] + box["width"] <= PHONE["width"]
        assert box["height"] >= 44, "a tap target a thumb can hit"
    shot(page, "list-waiting-permission", tmp_path)
    allow.tap()
    page.wait_for_url(tailnet.url("alice"))  # the answer keeps the person on the list
    tailnet.wait_state(task_id, "TASK_STATE_COMPLETED")
    expect(page.locator(f".row.waiting[data-task='{task_id}']")).to_have_count(0)
    status = tailnet.get_task(task_id)["history"]
    assert any(m.get("metadata", {}).get("decision") == "allow" for m in status)


def test_a_waiting_question_shows_what_it_asks_and_leads_to_its_choices(
    tailnet: Tailnet, context: BrowserContext
) -> None:
    page = context.new_page()
    task_id = start_task(page, tailnet, "alice", "question")
    expect(page.locator("section.ask legend")).to_be_visible()
    page.goto(tailnet.url("alice"))
    row = page.locator(f".row[data-task='{task_id}']")
    expect(row.locator(".asked")).to_have_text("Asks: “Which colour do you prefer?”")
    assert row.get_by_role("button", name="Allow").count() == 0
    row.get_by_role("link", name="Answer").click()
    ask = page.locator("section.ask")
    expect(ask.locator("input[type=radio]")).to_have_count(2)
    expect(ask.locator("input:checked")).to_have_count(0)  # nothing chosen for the person
    ask.get_by_role("button", name="Answer").click()  # the browser asks for a choice first
    assert tailnet.state(task_id) == "TASK_STATE_INPUT_REQUIRED"
    ask.get_by_label("red").check()
    ask.get_by_role("button", name="Answer").click()
    answered = "You answered “Which colour do you prefer?”: red"
    expect(page.locator(".decision")).to_contain_text(answered)
    tailnet.wait_state(task_id, "TASK_STATE_COMPLETED")


def settled_box(locator: Locator) -> FloatRect:
    """The element's box once the page's live stream has settled it: the list's first
    update replaces its rows, and a box read at that moment is of no element."""
    deadline = time.monotonic() + 10
    while (box := locator.bounding_box()) is None and time.monotonic() < deadline:
        time.sleep(0.1)
    assert box is not None, f"{locator} never showed"
    return box


def test_a_huge_one_line_prompt_is_cut_for_display_and_whole_on_a_tap(
    tailnet: Tailnet, phone: BrowserContext
) -> None:
    prompt = "fix " + "x" * 2_500_000  # 2.5 MB on one line
    task_id = send_as(tailnet, "alice", prompt)
    tailnet.wait_state(task_id, "TASK_STATE_COMPLETED", seconds=30)
    page = phone.new_page()
    page.goto(tailnet.url("alice"))
    row = page.locator(f".row[data-task='{task_id}']")
    box = settled_box(row)
    assert box["height"] < 200, box
    assert page.evaluate("document.documentElement.scrollHeight") < 20_000
    row.locator("a.open").click()
    page.wait_for_url(re.compile(f"/desk/tasks/{task_id}$"))
    head = settled_box(page.locator(".task-head h1"))
    assert head["height"] < 200, head
    assert page.evaluate("document.documentElement.scrollHeight") < 20_000
    assert page.evaluate("document.documentElement.scrollWidth") <= PHONE["width"]
    asked = page.locator(".item.person")
    full = asked.locator("details.full")
    expect(full.locator("summary")).to_have_text("Show all 2.5 MB")
    full.locator("summary").tap()
    length = full.locator("pre").evaluate("el => el.textContent.length")
    assert length == len(prompt)
    expect(asked.locator("pre.short")).to_be_hidden()


def test_older_tasks_page_on_past_the_first_fifty(
    tailnet: Tailnet, context: BrowserContext
) -> None:
    sent = [send_as(tailnet, "bob", f"page test {n}") for n in range(55)]
    tailnet.wait_state(sent[-1], "TASK_STATE_COMPLETED")
    page = context.new_page()
    page.goto(tailnet.url("bob"))
    first = page.locator(".row").evaluate_all("els => els.map(e => e.dataset.task)")
    assert len(first) == 50
    assert sent[-1] in first and sent[0] not in first
    page.get_by_role("link", name="Older tasks").click()
    expect(page.locator(".list-title")).to_contain_text("Older tasks")
    second = page.locator(".row").evaluate_all("els => els.map(e => e.dataset.task)")
    assert sent[0] in second and not set(first) & set(second)
    assert set(sent) <= set(first) | set(second)
    expect(page.get_by_role("link", name="Newest tasks")).to_be_visible()


def test_the_new_task_box_is_one_line_until_tapped(tailnet: Tailnet, phone: BrowserContext) -> None:
    page = phone.new_page()
    page.goto(tailnet.url("alice"))
    box = page.locator("form.send.new").bounding_box()
    assert box is not None and box["height"] < 60, box
    page.locator("#text").tap()
    grown = page.locator("#text").bounding_box()
    assert grown is not None and grown["height"] > 100, grown


# --- 3. the task page -------------------------------------------------------------------


def test_a_task_reads_as_a_conversation_with_decisions_in_words(
    tailnet: Tailnet, phone: BrowserContext, tmp_path: Path
) -> None:
    page = phone.new_page()
    task_id = start_task(page, tailnet, "alice", "think plan tool edit ask")
    ask = page.locator("section.ask")
    expect(ask.locator("h2")).to_have_text("The agent asks to run rm -rf build")
    started = page.locator(".task-head time").first.get_attribute("datetime")
    shot(page, "task-waiting", tmp_path)
    ask.get_by_role("button", name="Allow", exact=True).tap()
    expect(page.locator(".task-head .state")).to_have_text("completed")
    page.reload()  # what is stored reads the same as what came live

    expect(page.locator(".item.person .speaker")).to_have_text("You asked")
    expect(page.locator(".item.asked")).to_have_text("The agent asked to run rm -rf build")
    decision = page.locator(".decision")
    expect(decision).to_have_text(re.compile(r"^You allowed rm -rf build · \d{1,2}:\d{2}\s?[AP]M$"))
    expect(decision.locator("code")).to_have_text("rm -rf build")
    assert not RAW.search(visible_text(page)), visible_text(page)

    keys = page.locator(".section-timeline > [data-key]").evaluate_all(
        "els => els.map(e => e.dataset.key)"
    )
    assert keys[1] == "thinking", keys  # right after the prompt, where the agent began
    expect(page.locator("details.thinking")).not_to_have_attribute("open", "")
    expect(page.locator(".plan h2")).to_have_text("Plan")
    expect(page.locator(".plan .step-completed")).to_have_count(1)  # as the agent left it
    expect(page.locator(".answer h2")).to_have_text("The agent's answer")

    head_times = page.locator(".task-head time")
    assert head_times.first.get_attribute("datetime") == started
    stored = tailnet.get_task(task_id)["metadata"]["tailagentStartedAt"]
    assert started == stored
    assert str(started) <= str(head_times.last.get_attribute("datetime"))
    expect(page.locator(".task-head .meta")).not_to_contain_text("UTC")  # the reader's clock
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the page scrolls sideways: {width}px"
    shot(page, "task-finished-with-diff", tmp_path)


def test_agent_markdown_renders_as_code_and_no_html_passes(
    tailnet: Tailnet, context: BrowserContext
) -> None:
    page = context.new_page()
    prompt = "run `ls -la` **now** <b id=raw>x</b> [site](javascript:alert(1))"
    start_task(page, tailnet, "alice", prompt)
    answer = page.locator(".answer")
    expect(answer.locator("code")).to_have_text("ls -la")
    expect(answer.locator("strong")).to_have_text("now")
    expect(answer).to_contain_text("<b id=raw>x</b>")
    assert page.locator("#raw").count() == 0
    assert answer.locator("a").count() == 0
    expect(answer).to_contain_text("site (javascript:alert(1))")


def test_a_denial_reads_as_words_with_the_agents_notice_in_code(
    tailnet: Tailnet, context: BrowserContext
) -> None:
    page = context.new_page()
    task_id = start_task(page, tailnet, "alice", "ask")
    page.locator("section.ask").get_by_role("button", name="Deny", exact=True).click()
    expect(page.locator(".decision")).to_contain_text("You denied rm -rf build")
    notice = page.locator(".item.notice").last
    expect(notice.locator("code")).to_have_text("rm -rf build")
    tailnet.wait_state(task_id, "TASK_STATE_COMPLETED")
    assert not RAW.search(visible_text(page)), visible_text(page)


def test_one_person_is_named_alike_everywhere_and_you_to_themself(
    tailnet: Tailnet, browser: Browser
) -> None:
    carol, alice = browser.new_context(), browser.new_context()
    mine = carol.new_page()
    task_id = start_task(mine, tailnet, "carol", "ask")
    mine.locator("section.ask").get_by_role("button", name="Allow", exact=True).click()
    expect(mine.locator(".decision")).to_contain_text("You allowed")
    expect(mine.locator(".task-head .who")).to_have_text("You")
    name = "carol@example.com from carol-phone"
    expect(mine.locator(".bar .viewer")).to_have_text(name)
    admin = alice.new_page()  # the tailnet's owner sees every task
    admin.goto(tailnet.url("alice", f"/desk/tasks/{task_id}"))
    expect(admin.locator(".task-head .who")).to_have_text(name)
    expect(admin.locator(".item.person .speaker")).to_have_text(f"{name} asked")
    expect(admin.locator(".decision .who")).to_have_text(name)
    admin.goto(tailnet.url("alice"))
    expect(admin.locator(f".row[data-task='{task_id}'] .meta")).to_contain_text(name)
    carol.close()
    alice.close()


def test_the_top_bar_stays_one_line_when_the_connection_drops(
    tailnet: Tailnet, browser: Browser, tmp_path: Path
) -> None:
    phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = phone.new_page()
    start_task(page, tailnet, "carol", "slow 8")  # the longest name, and an approver's badge
    expect(page.locator(".answer")).to_contain_text("tick 1/8")
    bar = page.locator("nav.bar")
    before = bar.bounding_box()
    assert tailnet.proxies["carol"].drop() >= 1
    expect(page.locator("#live")).to_contain_text("connection lost")
    after = bar.bounding_box()
    assert before is not None and after is not None
    assert after["height"] == before["height"] and after["height"] < 60, after
    you = page.locator(".bar .you").bounding_box()
    assert you is not None and you["height"] < 30, "the identity stays one line"
    live = page.locator("#live").bounding_box()
    assert live is not None and live["x"] + live["width"] <= PHONE["width"]
    shot(page, "connection-lost", tmp_path)
    expect(page.locator("#live")).to_have_text("reconnected", timeout=10_000)
    phone.close()


# --- a conversation with a worktree: its directory, its merge ------------------------------


def local_task(page: Page, text: str) -> str:
    page.goto(page.url.split("/desk/")[0] + "/desk/")
    page.fill("#text", text)
    page.click("form.send button")
    page.wait_for_url(re.compile(r"/desk/tasks/[0-9a-f-]+$"))
    return page.url.rsplit("/", 1)[1]


def test_a_permission_shows_the_worktree_it_runs_in(
    repo_server: tuple[RunningServer, Path], browser: Browser
) -> None:
    server, repo = repo_server
    page = browser.new_context().new_page()
    page.goto(owner_link(server))
    local_task(page, "ask")
    cwd = page.locator("section.ask .cwd")
    expect(cwd).to_contain_text(str(server.state_dir / "worktrees"))
    shown = Path(cwd.inner_text())
    assert shown != repo and (shown / "README.md").is_file()
    page.locator("section.ask").get_by_role("button", name="Allow", exact=True).click()
    expect(page.locator(".task-head .state")).to_have_text("completed")


def test_a_merge_asks_first_then_shows_merged_and_a_conflict_offers_the_follow_up(
    repo_server: tuple[RunningServer, Path], browser: Browser
) -> None:
    server, repo = repo_server
    page = browser.new_context().new_page()
    page.goto(owner_link(server))
    first = local_task(page, "edit:shared.txt one")
    expect(page.locator(".task-head .state")).to_have_text("completed")
    second = local_task(page, "edit:shared.txt two")
    expect(page.locator(".task-head .state")).to_have_text("completed")

    page.goto(page.url.replace(second, first))
    merge = page.locator(".task-head details.confirm")
    merge.locator("summary").click()
    confirm = merge.get_by_role("button", name="Yes, merge into main")
    expect(confirm).to_be_visible()
    assert "shared.txt" not in git(repo, "ls-files")  # nothing happened on the first tap
    confirm.click()
    expect(page.locator(".outcome")).to_contain_text("merged (squash) into main")
    expect(page.locator(".bar .viewer")).to_be_visible()  # the result page keeps the bar
    page.get_by_role("link", name="Back").click()
    expect(page.locator(".task-head .worktree .merged")).to_contain_text("merged (squash)")
    expect(page.locator(".task-head details.confirm")).to_have_count(0)

    page.goto(page.url.replace(first, second))
    page.locator(".task-head details.confirm summary").click()
    page.get_by_role("button", name="Yes, merge into main").click()
    expect(page.locator("h1")).to_have_text("Merge conflict")
    expect(page.locator("blockquote")).to_contain_text("resolve the conflicts in shared.txt")
    page.get_by_role("button", name="Ask the agent to resolve it").click()
    page.wait_for_url(re.compile(r"/desk/tasks/[0-9a-f-]+$"))
    follow = page.url.rsplit("/", 1)[1]
    assert follow != second
    expect(page.locator(".item.person pre")).to_contain_text("rebase your branch onto main")
    assert git(repo, "show", "main:shared.txt").strip() == "edit:shared.txt one"
    assert same_context(server, second, follow)


def same_context(server: RunningServer, one: str, other: str) -> bool:
    def context_of(task_id: str) -> Any:
        body = {"jsonrpc": "2.0", "id": 1, "method": "GetTask", "params": {"id": task_id}}
        headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {server.token}"}
        return httpx.post(server.url + "/", json=body, headers=headers).json()["result"][
            "contextId"
        ]

    return bool(context_of(one) == context_of(other))


def test_a_stale_answer_page_names_who_came_first_in_local_time(
    tailnet: Tailnet, context: BrowserContext
) -> None:
    page = context.new_page()
    task_id = start_task(page, tailnet, "alice", "ask")
    form = page.locator("section.ask form")
    token = form.locator("input[name=token]").get_attribute("value")
    request_id = form.locator("input[name=requestId]").get_attribute("value")
    page.locator("section.ask").get_by_role("button", name="Allow", exact=True).click()
    expect(page.locator(".decision")).to_contain_text("You allowed")
    # The same form, sent again from a tab that still shows the question.
    put_back_answer_form(page, task_id, token, request_id, "deny")
    with page.expect_navigation():
        page.locator("#stale button").click()
    expect(page.locator(".bar .viewer")).to_have_text(f"{OWNER} from pixel-7")
    refusal = page.locator(".refusal")
    expect(refusal).to_contain_text("This request was answered already")
    expect(refusal.locator(".decision")).to_contain_text("You allowed rm -rf build")
    expect(refusal.locator("time")).to_have_text(re.compile(r"^\d{1,2}:\d{2}\s?[AP]M$"))
    assert request_id and request_id not in refusal.inner_text()
    tailnet.wait_state(task_id, "TASK_STATE_COMPLETED")


# --- the Markdown renderer on its own ------------------------------------------------------

OUR_TAGS = {"p", "code", "pre", "strong", "em", "ul", "ol", "li", "h4", "h5", "h6"}


@pytest.mark.parametrize(
    "text",
    [
        '<script>alert(1)</script><img src=x onerror="alert(2)">',
        "`<b>` **<i>x</i>** _<a href='javascript:alert(3)'>y</a>_",
        "```\n</pre><script>alert(4)</script>\n```",
        "# <h1>title</h1>\n- <li onclick=alert(5)>\n1. [x](javascript:alert(6))",
        "`unclosed <em> **also <u>",
    ],
)
def test_the_markdown_renderer_lets_no_tag_of_the_input_through(text: str) -> None:
    html = str(markdown.render(text))
    assert set(re.findall(r"</?([a-zA-Z0-9]+)", html)) <= OUR_TAGS, html
    assert set(re.findall(r"<[a-z0-9]+(\s[^>]*)?>", html)) <= {"", ' class="code"'}, html


def test_the_markdown_renderer_renders_what_agents_write() -> None:
    html = str(markdown.render("## Done\nRan `ls -la` and **all** tests\n\n- one\n- `two`"))
    assert html == (
        "<h5>Done</h5>\n<p>Ran <code>ls -la</code> and <strong>all</strong> tests</p>\n"
        "<ul><li>one</li><li><code>two</code></li></ul>"
    )
    assert str(markdown.inline("snake_case_name and *it*")) == "snake_case_name and <em>it</em>"
