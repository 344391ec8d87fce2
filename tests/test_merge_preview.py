"""A merge shows the change it merges, read from git: `tailagent merge` says the stat and
asks (on a terminal; `--yes` otherwise), the desk's confirmation shows the stat and the
diff, a merge takes only the tip it showed, and a finished turn's CHANGES are its commit.

The project's calc.py has a function the echo agent's `edit` must leave alone (`mul`):
what its turn commits is what it reports, a one-line fix.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from playwright.sync_api import Browser, expect

from tests.browser import PHONE
from tests.conftest import RunningServer, start_server
from tests.terminal import in_pty, plain
from tests.test_desk_access import signin_link
from tests.test_isolation import git
from tests.test_worktree_newcomer import completed, send_turn
from tests.warm_start import cli_run

CALC = "def add(a, b):\n    return a - b\n\n\ndef mul(a, b):\n    return a * b\n"
FIXED = CALC.replace("a - b", "a + b")
SCREENSHOTS = os.environ.get("TAILAGENT_SCREENSHOTS", "")


@pytest.fixture(scope="module")
def project(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, Path]]:
    tmp = tmp_path_factory.mktemp("merge-preview")
    repo = tmp / "workspace"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "calc.py").write_text(CALC)
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "-qm", "start")
    server = start_server(tmp, "--tailscale-socket", str(tmp / "none.sock"))
    yield server, repo
    server.stop()


def tailagent(server: RunningServer, *args: str) -> subprocess.CompletedProcess[str]:
    """A command of the person's, piped (no terminal)."""
    return cli_run(
        [sys.executable, "-m", "tailagent", *args, "--state-dir", str(server.state_dir)],
        capture_output=True, text=True, timeout=60, stdin=subprocess.DEVNULL,
    )  # fmt: skip


def answering(server: RunningServer, answer: str, *args: str) -> str:
    """A command of the person's on a terminal, answering `answer` to its question."""
    argv = [sys.executable, "-m", "tailagent", *args, "--state-dir", str(server.state_dir)]
    return plain(in_pty(argv, answer=answer))


def call(server: RunningServer, text: str, context: str) -> None:
    """A turn that makes a change to look at (an A2A client's: no test here reads what
    `tailagent call` prints, and its process costs ~0.5 s of CPU)."""
    completed(server, text, context)


def rpc_merge(server: RunningServer, context: str, request: dict[str, Any]) -> dict[str, Any]:
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "contextId": context,
               "parts": [{"data": request}]}  # fmt: skip
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": {"message": message}}
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {server.token}"}
    answer: dict[str, Any] = httpx.post(server.url + "/", json=body, headers=headers).json()
    return answer


def test_the_echo_edit_commits_the_one_line_it_reports(
    project: tuple[RunningServer, Path],
) -> None:
    server, repo = project
    context = f"fix-{uuid.uuid4().hex[:6]}"
    call(server, "edit", context)
    diff = tailagent(server, "diff", context).stdout
    changed = [line for line in diff.splitlines()
               if line.startswith(("+", "-")) and not line.startswith(("+++", "---"))]  # fmt: skip
    assert changed == ["-    return a - b", "+    return a + b"], diff
    assert (repo / "calc.py").read_text() == CALC  # nothing reaches main before a merge
    send_turn(server, context=context, data={"kind": "discard"})


def test_merge_says_what_it_brings_and_asks_first(project: tuple[RunningServer, Path]) -> None:
    server, repo = project
    context = f"cli-{uuid.uuid4().hex[:6]}"
    call(server, "edit:a.txt alpha", context)
    call(server, "edit:notes/todo.txt write the docs", context)
    main = git(repo, "rev-parse", "main")

    piped = tailagent(server, "merge", context)
    assert piped.returncode == 2
    assert "nothing merged: add --yes to merge it" in piped.stderr
    assert f"tailagent/{context[:8]} (2 commits) would bring into main:" in piped.stdout
    assert re.search(r"^ a\.txt +\+1 -0$", piped.stdout, re.M), piped.stdout
    assert re.search(r"^ notes/todo\.txt +\+1 -0$", piped.stdout, re.M), piped.stdout
    assert " 2 files changed, +2 -0" in piped.stdout
    assert git(repo, "rev-parse", "main") == main

    declined = answering(server, "n", "merge", context)
    assert "2 files changed, +2 -0" in declined and "Merge it into main? [y/N]" in declined
    assert declined.rstrip().endswith("nothing merged")
    assert git(repo, "rev-parse", "main") == main

    accepted = answering(server, "y", "merge", context)
    assert "merged (squash) into main" in accepted, accepted
    assert (repo / "a.txt").read_text() == "edit:a.txt alpha\n"
    assert (repo / "notes/todo.txt").read_text() == "edit:notes/todo.txt write the docs\n"


def test_a_merge_takes_only_the_tip_it_was_shown(project: tuple[RunningServer, Path]) -> None:
    server, repo = project
    context = f"tip-{uuid.uuid4().hex[:6]}"
    call(server, "edit:tip.txt one", context)
    shown = rpc_merge(server, context, {"kind": "merge", "dryRun": True})
    data = shown["result"]["message"]["parts"][1]["data"]
    assert [f["path"] for f in data["files"]] == ["tip.txt"]
    assert "+edit:tip.txt one" in data["diff"] and data["cut"] is False
    call(server, "edit:tip.txt two", context)  # the branch moves after it was shown
    main = git(repo, "rev-parse", "main")
    stale = rpc_merge(server, context, {"kind": "merge", "expect": data["tip"]})
    assert "changed since its change was shown" in stale["error"]["message"], stale
    assert git(repo, "rev-parse", "main") == main
    assert tailagent(server, "merge", context, "--yes").returncode == 0
    assert (repo / "tip.txt").read_text() == "edit:tip.txt two\n"


def test_the_desk_shows_the_commit_and_what_a_merge_brings_on_a_phone(
    project: tuple[RunningServer, Path], browser: Browser, tmp_path: Path
) -> None:
    server, repo = project
    phone = browser.new_context(viewport=PHONE, is_mobile=True, has_touch=True)
    page = phone.new_page()
    page.goto(signin_link(server))
    page.fill("#text", "edit")
    page.click("form.send button")
    page.wait_for_url(re.compile(r"/desk/tasks/[0-9a-f-]+$"))
    task_url = page.url
    expect(page.locator(".task-head .state")).to_have_text("completed")
    # CHANGES: the turn's commit, one line, mul untouched.
    change = page.locator(".section-diffs article.diff")
    expect(change).to_have_count(1)
    expect(change.locator(".source")).to_contain_text("committed in ")
    expect(change.locator(".added")).to_have_text("+1")
    expect(change.locator(".removed")).to_have_text("-1")
    expect(change.locator(".del")).to_have_text(["-    return a - b"])  # mul kept

    merge = page.locator(".task-head details.confirm")
    merge.locator("summary").tap()
    form = merge.locator("form")
    expect(form.locator(".stat li")).to_have_count(1)
    expect(form.locator(".stat li")).to_contain_text("calc.py +1 -1")
    expect(form.locator(".totals")).to_have_text("1 file changed, +1 -1")
    shown = merge.locator(".merge-diff article.diff")
    expect(shown.locator(".add")).to_have_text("+    return a + b")
    expect(shown.locator(".del")).to_have_text("-    return a - b")
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= PHONE["width"], f"the page scrolls sideways: {width}px"
    shot = Path(SCREENSHOTS or tmp_path) / "desk-merge-confirm.png"
    page.screenshot(path=str(shot), full_page=True)
    assert shot.stat().st_size > 10_000
    whole = merge.get_by_role("link", name="The whole diff").get_attribute("href")
    assert whole is not None
    text = page.request.get(page.url.split("/desk/")[0] + whole).text()
    assert "+    return a + b" in text
    assert (repo / "calc.py").read_text() == CALC  # looking merged nothing

    form.get_by_role("button", name="Yes, merge into main").tap()
    expect(page.locator(".outcome")).to_contain_text("merged (squash) into main")
    assert (repo / "calc.py").read_text() == FIXED
    page.goto(task_url)
    expect(page.locator(".task-head .worktree .merged")).to_contain_text("merged (squash)")
    expect(page.locator(".task-head details.confirm")).to_have_count(0)
    phone.close()


def test_the_page_of_a_discarded_conversation_says_so_and_offers_no_merge(
    project: tuple[RunningServer, Path], browser: Browser
) -> None:
    server, _ = project
    page = browser.new_context().new_page()
    page.goto(signin_link(server))
    page.fill("#text", "edit:dropped.txt dropped")
    page.click("form.send button")
    page.wait_for_url(re.compile(r"/desk/tasks/[0-9a-f-]+$"))
    expect(page.locator(".task-head .state")).to_have_text("completed")
    expect(page.locator(".task-head details.confirm")).to_have_count(1)
    branch = page.locator(".task-head .worktree code").first.inner_text()
    assert tailagent(server, "discard", branch.removeprefix("tailagent/"), "--yes").returncode == 0
    page.reload()
    expect(page.locator(".task-head .worktree")).to_contain_text("discarded")
    expect(page.locator(".task-head details.confirm")).to_have_count(0)
