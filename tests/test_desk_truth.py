"""The desk tells the truth and reads as a conversation (issue 56, the desk's items).

Each in a real Chromium at a phone's 390×844 against the real `tailagent serve` with the
echo agent in a git workspace (so each conversation has a repository of its own), signed
in as the box's owner; another person's reach through a `tailscale serve` stand-in.
Screenshots go where TAILAGENT_SCREENSHOTS says, else the test's tmp dir.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.browser import PHONE
from tests.conftest import RunningServer
from tests.test_desk import Tailnet, start_task, tailnet
from tests.test_desk_access import owner_link
from tests.test_desk_conversation import local_task, shot
from tests.test_desk_worktree import repo_server

__all__ = ["repo_server", "tailnet"]  # fixtures shared with their modules
TASK_URL = re.compile(r"/desk/tasks/[0-9a-f-]+$")


@pytest.fixture(scope="module")
def owner(repo_server: tuple[RunningServer, Path], browser: Browser) -> Iterator[BrowserContext]:
    """The box's owner (an admin) on a phone, signed in once for the module."""
    made = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    made.new_page().goto(owner_link(repo_server[0]))
    yield made
    made.close()


@pytest.fixture
def page(owner: BrowserContext, repo_server: tuple[RunningServer, Path]) -> Iterator[Page]:
    """A new tab of the owner's, on the list."""
    made = owner.new_page()
    made.goto(repo_server[0].url + "/desk/")
    yield made
    made.close()


def finished(page: Page, text: str) -> str:
    task_id = local_task(page, text)
    # A conversation's first turn makes its repository: seconds on a loaded box.
    expect(page.locator(".task-head .state")).to_have_text("completed", timeout=30_000)
    return task_id


def test_plan_steps_show_as_the_agent_left_them(page: Page, tmp_path: Path) -> None:
    finished(page, "think plan tool edit")
    steps = page.locator(".plan li")
    expect(steps).to_have_count(3)
    expect(steps.nth(0)).to_have_class(re.compile(r"\bstep-completed\b"))
    expect(steps.nth(1)).to_have_class(re.compile(r"\bstep-in_progress\b"))
    expect(steps.nth(1)).to_contain_text("Fix the bug left running")
    expect(steps.nth(2)).to_have_class(re.compile(r"\bstep-pending\b"))
    expect(steps.nth(2)).to_contain_text("Run the tests not done")
    marker = steps.nth(2).evaluate("e => getComputedStyle(e, '::marker').content")
    assert "✓" not in marker, "a step left pending is not ticked"
    shot(page, "plan-as-left", tmp_path)


def test_a_turn_that_changed_nothing_says_nothing_of_merging(page: Page, tmp_path: Path) -> None:
    task_id = finished(page, "hello")
    main = page.locator("main")
    expect(page.locator(".answer")).to_contain_text("hello")
    for untrue in ("discarded", "nothing to merge", "merged"):
        assert untrue not in main.inner_text()
    expect(page.locator(".task-head .worktree")).to_have_count(0)
    shot(page, "changed-nothing", tmp_path)
    page.goto(page.url.split("/desk/")[0] + "/desk/")
    row = page.locator(f".row[data-task='{task_id}']")
    expect(row.locator(".state")).to_have_text("completed")
    expect(row.locator(".change")).to_have_count(0)


def test_follow_up_only_when_it_can_be_sent_and_a_question_answered_in_words(
    page: Page, tmp_path: Path
) -> None:
    local_task(page, "question")
    expect(page.locator("section.ask legend")).to_be_visible()
    expect(page.locator("form.follow")).to_have_count(0)
    expect(page.locator(".follow-up")).to_contain_text("waits for the answer above")
    ask = page.locator("section.ask")
    ask.locator("details.in-words summary").click()
    ask.locator("details.in-words textarea").fill("green, like the tests")
    shot(page, "question-in-words", tmp_path)
    ask.get_by_role("button", name="Send this answer").click()
    answered = "You answered “Which colour do you prefer?”: green, like the tests"
    expect(page.locator(".decision")).to_contain_text(answered)
    expect(page.locator(".answer")).to_contain_text("You chose green, like the tests.")
    # Offered once the task has ended, on the page already open (no reload).
    expect(page.locator("form.follow")).to_be_visible()

    local_task(page, "slow 3")
    expect(page.locator(".follow-up")).to_contain_text("The agent is working")
    expect(page.locator("form.follow")).to_have_count(0)
    expect(page.locator("form.follow")).to_be_visible(timeout=15_000)


def test_ahead_and_behind_are_read_when_the_page_is_drawn(
    page: Page, repo_server: tuple[RunningServer, Path]
) -> None:
    first = finished(page, "edit:ahead-a.txt one")
    standing = page.locator(".task-head .worktree .standing")
    expect(standing).to_have_text("1 ahead of, 0 behind main · ahead-a.txt")
    finished(page, "edit:ahead-b.txt two")  # another conversation, merged into main
    page.locator(".task-head details.confirm summary").click()
    page.get_by_role("button", name="Yes, merge into main").click()
    expect(page.locator(".outcome")).to_contain_text("merged (squash) into main")
    page.goto(page.url.split("/desk/")[0] + f"/desk/tasks/{first}")
    expect(standing).to_have_text("1 ahead of, 1 behind main · ahead-a.txt")
    expect(page.locator(".task-head .worktree .when")).to_have_count(0)


def test_a_conversation_reads_as_a_chat_and_replies_from_it(page: Page, tmp_path: Path) -> None:
    finished(page, "edit:chat.txt first words")
    page.locator("#follow").fill("question")
    page.locator("form.follow button").click()
    page.wait_for_url(TASK_URL)
    expect(page.locator("section.ask legend")).to_be_visible()
    page.get_by_role("link", name="The whole conversation").click()
    page.wait_for_url(re.compile(r"/conversation$"))

    turns = page.locator(".turn")
    expect(turns).to_have_count(2)
    first = turns.nth(0)
    expect(first.locator(".item.person")).to_contain_text("edit:chat.txt first words")
    expect(first.locator(".item.said")).to_contain_text("edit:chat.txt first words")
    expect(first.locator(".item.commit")).to_contain_text("chat.txt +1 -0")
    expect(turns.nth(1).locator(".item.asked")).to_contain_text("Which colour do you prefer?")
    expect(page.locator("form.follow")).to_have_count(0)  # busy with the question
    ask = page.locator("section.ask")
    ask.locator("details.in-words summary").click()
    ask.locator("details.in-words textarea").fill("teal")
    ask.get_by_role("button", name="Send this answer").click()
    page.wait_for_url(re.compile(r"/conversation$"))
    answered = "You answered “Which colour do you prefer?”: teal"
    expect(turns.nth(1).locator(".decision")).to_contain_text(answered)
    expect(page.locator("form.follow")).to_be_visible(timeout=10_000)
    shot(page, "conversation", tmp_path)

    page.locator("#follow").fill("and now hello")
    page.locator("form.follow button").click()
    page.wait_for_url(re.compile(r"/conversation$"))
    expect(turns).to_have_count(3)
    expect(turns.nth(2).locator(".item.person")).to_contain_text("and now hello")
    expect(turns.nth(2).locator(".item.said")).to_contain_text("and now hello", timeout=10_000)
    box = page.locator(".turns").bounding_box()
    assert box is not None and box["x"] + box["width"] <= PHONE["width"]


def test_another_persons_conversation_is_not_found(tailnet: Tailnet, browser: Browser) -> None:
    alice = browser.new_context().new_page()
    task_id = start_task(alice, tailnet, "alice", "hello")
    alice.goto(tailnet.url("alice", f"/desk/tasks/{task_id}/conversation"))
    expect(alice.locator(".turn")).to_have_count(1)
    bob = browser.new_context().new_page()
    reply = bob.goto(tailnet.url("bob", f"/desk/tasks/{task_id}/conversation"))
    assert reply is not None and reply.status == 404
    expect(bob.locator(".refusal")).to_contain_text("no task")
    assert "hello" not in bob.locator("main").inner_text()
    alice.context.close()
    bob.context.close()


def test_the_whole_diff_reads_on_a_phone_and_stays_plain_for_curl(
    page: Page, tmp_path: Path
) -> None:
    task_id = finished(page, "edit:diffs/one.txt a line")
    page.locator("#follow").fill("edit:diffs/two.txt another line")
    page.locator("form.follow button").click()
    page.wait_for_url(TASK_URL)
    expect(page.locator(".task-head .state")).to_have_text("completed")
    page.locator(".task-head .diff-link").click()
    expect(page.locator("h1")).to_have_text("The whole diff")
    files = page.locator(".whole-diff .diff")
    expect(files).to_have_count(2)
    expect(files.nth(0).locator(".path")).to_have_text("diffs/one.txt")
    added = files.nth(0).locator(".add").first
    expect(added).to_have_text("+edit:diffs/one.txt a line")
    assert added.evaluate("e => getComputedStyle(e).backgroundColor") == "rgb(220, 252, 231)"
    size = float(added.evaluate("e => getComputedStyle(e).fontSize").removesuffix("px"))
    assert size >= 13, "readable on a phone"
    box = files.nth(0).bounding_box()
    assert box is not None and box["x"] + box["width"] <= PHONE["width"]
    shot(page, "whole-diff", tmp_path)
    plain = page.request.get(page.url, headers={"Accept": "*/*"})  # as curl asks
    assert plain.headers["content-type"].startswith("text/plain")
    assert plain.text().startswith("diff --git a/diffs/one.txt b/diffs/one.txt")
    asked = page.request.get(page.url + "?plain", headers={"Accept": "text/html"})
    assert asked.text() == plain.text()
    page.get_by_role("link", name="← The task").first.click()
    page.wait_for_url(TASK_URL)
    assert task_id not in page.url  # the follow-up's page, where the link was


def test_the_phone_header_shows_the_role_whole(
    page: Page, repo_server: tuple[RunningServer, Path], tmp_path: Path
) -> None:
    page.goto(repo_server[0].url + "/desk/")
    role = page.locator(".bar .role")
    expect(role).to_have_text("admin")
    you = page.locator(".bar .you").bounding_box()
    shown = role.bounding_box()
    assert you is not None and shown is not None
    assert shown["x"] + shown["width"] <= you["x"] + you["width"] + 0.5, "admin is cut off"
    assert shown["x"] + shown["width"] <= PHONE["width"]
    assert you["height"] < 30, "the bar stays one line"
    shot(page, "phone-header", tmp_path)


def test_the_conversation_and_the_diff_read_on_a_desktop(
    page: Page, browser: Browser, tmp_path: Path
) -> None:
    finished(page, "edit:desktop.txt on a wide screen")
    wide = browser.new_context(
        viewport={"width": 1280, "height": 800}, storage_state=page.context.storage_state()
    )
    desk = wide.new_page()
    desk.goto(page.url + "/conversation")
    expect(desk.locator(".turn")).to_have_count(1)
    expect(desk.locator(".item.commit")).to_contain_text("desktop.txt +1 -0")
    main = desk.locator("main").bounding_box()
    assert main is not None and main["width"] <= 60 * 16 + 1, "a column a person can read"
    shot(desk, "conversation-desktop", tmp_path)
    desk.goto(page.url + "/diff")
    expect(desk.locator(".whole-diff .diff .path")).to_have_text("desktop.txt")
    shot(desk, "whole-diff-desktop", tmp_path)
    wide.close()
