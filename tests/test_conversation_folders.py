"""Where a conversation starts and where its files are, as a person is told (issue 56):
a real `tailagent serve` in a throwaway git repository with an uncommitted edit and an
untracked file, the real CLI at 80 columns, git itself, and the desk in Chromium at
390×844 (screenshots kept in the test's tmp dir).
"""

from __future__ import annotations

import os
import re
from pathlib import Path

from playwright.sync_api import Browser, expect

from tests.conftest import start_server
from tests.test_desk_phone import signed_in_page, wait_for_question
from tests.test_isolation import git, make_project
from tests.test_litter import wait_for_one_made_ahead
from tests.test_worktree_newcomer import completed, context_of, run


def flat(text: str) -> str:
    """`text` without its whitespace: what the terminal wrapped at 80 columns (a path
    too) compares whole."""
    return "".join(text.split())


def test_the_start_says_its_commit_and_the_uncommitted_changes_it_leaves_out(
    tmp_path: Path,
) -> None:
    repo = tmp_path / "workspace"
    make_project(repo, {".gitignore": ".env\n"})
    (repo / "README.md").write_text("a project, edited and not committed\n")
    (repo / "new.txt").write_text("not tracked\n")
    (repo / ".env").write_text("TOKEN=ignored by git, never counted or copied\n")
    commit = git(repo, "rev-parse", "main").strip()
    server = start_server(tmp_path, "--isolation", "worktree")
    try:
        called = run(server, "call", "edit:notes.txt the agent's note")
        assert called.returncode == 0, called.stdout + called.stderr
        short = context_of(called)[:8]
        folder = server.state_dir / "worktrees" / short
        said = (
            f"! Started from main at {commit[:12]} in {folder}: its last commit, without "
            f"the 2 uncommitted changes in {repo} (README.md, new.txt). To give them to "
            "the agent, commit, then start a new conversation."
        )
        assert flat(said) in flat(called.stdout), called.stdout
        assert called.stdout.index("! Started from") < called.stdout.index("notes.txt")
        assert ".env" not in called.stdout
        # What it said is what happened: the conversation has the commit, not the edits.
        assert (folder / "README.md").read_text() == "a project\n"
        assert not (folder / "new.txt").exists() and not (folder / ".env").exists()
        assert (folder / "notes.txt").exists()

        again = run(server, "call", "--context", short, "edit:more.txt and more")
        assert again.returncode == 0 and "Started from" not in again.stdout, again.stdout

        git(repo, "add", "-A")
        git(repo, "commit", "-q", "-m", "the person's own work")
        committed = git(repo, "rev-parse", "main").strip()
        fresh = run(server, "call", "edit:notes.txt from the new commit")
        other = server.state_dir / "worktrees" / context_of(fresh)[:8]
        assert flat(f"! Started from main at {committed[:12]} in {other}.") in flat(fresh.stdout)
        assert "uncommitted" not in fresh.stdout, fresh.stdout
        assert (other / "new.txt").read_text() == "not tracked\n"
    finally:
        server.stop()


def test_a_conversations_folder_is_its_short_id_and_is_printed(tmp_path: Path) -> None:
    repo = tmp_path / "workspace"
    make_project(repo)
    server = start_server(tmp_path, "--isolation", "worktree")
    root = server.state_dir / "worktrees"
    try:
        ahead = wait_for_one_made_ahead(server.state_dir, repo)
        assert len(ahead) == 1 and Path(ahead[0]).name.startswith("+ready-")
        short = completed(server, "edit:notes.txt a note")["contextId"][:8]  # an A2A client's
        # It took the directory made ahead (its name kept): its own name is a link to it.
        link = root / short
        assert link.is_symlink() and os.readlink(link) == Path(ahead[0]).name
        assert (link / "notes.txt").exists()
        assert git(link, "branch", "--show-current").strip() == f"tailagent/{short}"

        listed = run(server, "conversations")
        assert listed.returncode == 0, listed.stderr
        assert flat(f"folders: {short} {link}") in flat(listed.stderr), listed.stderr

        doctor = run(server, "doctor").stdout.splitlines()
        at = next(i for i, line in enumerate(doctor) if line.startswith("✓ worktrees:"))
        # The running server's worktree made ahead is counted, not listed: its own.
        assert doctor[at].startswith("✓ worktrees: 1 conversation")
        assert doctor[at + 1] == f"  in {root}:"
        assert doctor[at + 2] == f"    {short} tailagent/{short}: a conversation's, on its branch"
        assert all(len(line) <= 80 for line in (doctor[at], doctor[at + 2]))

        # A link no record names (left by a stop between two steps): listed, and `clean`
        # takes the link alone; the conversation's link and directory stay.
        (root / "stray").symlink_to("+ready-gone", target_is_directory=True)
    finally:
        server.stop()
    doctor = run(server, "doctor").stdout.splitlines()
    at = next(i for i, line in enumerate(doctor) if line.startswith("✓ worktrees:"))
    assert doctor[at : at + 5] == [
        "✓ worktrees: 1 conversation, 1 link",
        "  1 no conversation's: `tailagent clean` removes them",
        f"  in {root}:",
        f"    {short} tailagent/{short}: a conversation's, on its branch",
        "    stray: a link no record names",
    ], doctor
    cleaned = run(server, "clean", "--yes")
    assert cleaned.returncode == 0 and cleaned.stdout.endswith("removed 1\n"), cleaned.stdout
    assert not os.path.lexists(root / "stray")
    assert link.is_symlink() and (link / "notes.txt").exists()

    server = start_server(tmp_path, "--isolation", "worktree")
    try:
        dropped = run(server, "discard", short, "--yes")
        assert dropped.returncode == 0, dropped.stdout + dropped.stderr
        assert not os.path.lexists(link) and not Path(ahead[0]).exists()
    finally:
        server.stop()


def test_the_desk_says_where_a_conversation_starts_and_works(
    tmp_path: Path, browser: Browser
) -> None:
    repo = tmp_path / "workspace"
    make_project(repo)
    (repo / "README.md").write_text("edited, not committed\n")
    commit = git(repo, "rev-parse", "main").strip()
    server = start_server(
        tmp_path, "--isolation", "worktree", "--tailscale-socket", str(tmp_path / "none.sock")
    )
    try:
        page = signed_in_page(browser, server)
        wait_for_question(page, "ask")
        note = page.locator(".item.notice").first
        expect(note).to_contain_text(f"Started from main at {commit[:12]}")
        expect(note).to_contain_text(f"without the 1 uncommitted change in {repo} (README.md)")
        folder = page.locator("section.ask .cwd")
        expect(folder).to_have_text(re.compile(r"/worktrees/[0-9a-f]{8}$"))
        shown = folder.inner_text()
        assert "+ready-" not in shown and Path(shown).is_symlink()
        page.screenshot(path=str(tmp_path / "start-and-folder.png"), full_page=True)
    finally:
        server.stop()
