"""The desk on a conversation with a worktree: its branch shown, merged with a click."""

from __future__ import annotations

import re
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Browser, expect

from tests.conftest import RunningServer, start_server
from tests.test_desk_access import signin_link
from tests.test_isolation import git


@pytest.fixture(scope="module")
def repo_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[RunningServer, Path]]:
    tmp = tmp_path_factory.mktemp("desk-worktree")
    repo = tmp / "workspace"
    repo.mkdir()
    git(repo, "init", "-q", "-b", "main")
    (repo / "README.md").write_text("a project\n")
    git(repo, "add", "-A")
    git(repo, "-c", "user.name=Dev", "-c", "user.email=dev@example.com", "commit", "-qm", "start")
    server = start_server(tmp, "--tailscale-socket", str(tmp / "none.sock"))
    yield server, repo
    server.stop()


def test_the_page_shows_the_branch_and_merges_it(
    repo_server: tuple[RunningServer, Path], browser: Browser
) -> None:
    server, repo = repo_server
    page = browser.new_context().new_page()
    page.goto(signin_link(server))
    page.fill("#text", "edit:notes.txt from the page")
    page.click("form.send button")
    page.wait_for_url(re.compile(r"/desk/tasks/[0-9a-f-]+$"))
    expect(page.locator(".task-head .state")).to_have_text("completed")
    worktree = page.locator(".task-head .worktree")
    expect(worktree).to_contain_text("1 ahead of, 0 behind main · notes.txt")
    page.locator(".task-head details.confirm summary").click()  # a merge asks first
    page.get_by_role("button", name="Yes, merge into main").click()
    expect(page.locator(".outcome")).to_contain_text("merged (squash) into main")
    assert (repo / "notes.txt").read_text() == "edit:notes.txt from the page\n"
    assert "Requested-by: token:local" in git(repo, "log", "-1", "--format=%B", "main")
