"""A repository and branch per conversation, against throwaway git repositories.

Every test runs with an empty HOME and no system git config, so no git identity is
configured anywhere unless a test sets one (tailagent must commit anyway). The person's
own commits in these repositories name an identity on the command line.

A conversation's branch and commits live in its own directory's repository (`sh(path,
...)` finds it there), not in the person's (`sh(repo, ...)`): the person's repository
gains none of them until a merge, which the tests check where they used to look for a
`tailagent/*` branch there.
"""

from __future__ import annotations

import asyncio
import hashlib
import json
import os
import shutil
import subprocess
from collections.abc import AsyncIterator
from dataclasses import asdict
from pathlib import Path

import pytest

from tailagent.workspace import (
    ConversationRepos,
    DiscardResult,
    GitError,
    MergeConflict,
    MergeRefused,
    NoWorktree,
    WorktreeDeleted,
    git,
    probe,
)

PERSON = ("-c", "user.name=Person", "-c", "user.email=person@example.com")
TRAILERS = [
    ("Requested-by", "alice@example.com (laptop)"),
    ("Approved-by", "alice@example.com (laptop): Bash"),
    ("A2A-Task", "task-1"),
    ("A2A-Context", "ctx-aaaa-1"),
]


@pytest.fixture(autouse=True)
def no_identity(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("XDG_CONFIG_HOME", str(home / ".config"))
    monkeypatch.setenv("GIT_CONFIG_NOSYSTEM", "1")
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    for name in (
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "EMAIL",
        "GIT_DIR",
        "GIT_WORK_TREE",
        "GIT_INDEX_FILE",
    ):
        monkeypatch.delenv(name, raising=False)


def sh(repo: Path, *args: str, check: bool = True, env: dict[str, str] | None = None) -> str:
    result = subprocess.run(
        ["git", "-C", str(repo), *args],
        capture_output=True,
        text=True,
        check=False,
        env={**os.environ, "GIT_OPTIONAL_LOCKS": "0", "GIT_EDITOR": "true", **(env or {})},
    )
    if check and result.returncode != 0:
        raise AssertionError(f"git {' '.join(args)}: {result.stderr}")
    return result.stdout


def write(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)


def read(path: Path) -> str:
    return path.read_text()


def commit_all(repo: Path, message: str) -> str:
    sh(repo, "add", "-A")
    sh(repo, *PERSON, "commit", "-q", "-m", message)
    return sh(repo, "rev-parse", "HEAD").strip()


def lines(n: int, changed: dict[int, str] | None = None) -> str:
    changed = changed or {}
    return "".join(f"{changed.get(i, f'line {i}')}\n" for i in range(n))


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    repo = tmp_path / "repo"
    sh(tmp_path, "init", "-q", "-b", "main", str(repo))
    write(repo / "a.txt", lines(10))
    write(repo / "b.txt", "b\n")
    write(repo / ".gitignore", "*.log\n")
    commit_all(repo, "first")
    write(repo / "src" / "c.txt", "c\n")
    commit_all(repo, "second")
    return repo


@pytest.fixture
async def wts(repo: Path, tmp_path: Path) -> AsyncIterator[ConversationRepos]:
    worktrees = ConversationRepos(repo, tmp_path / "state" / "worktrees")
    yield worktrees
    await worktrees.aclose()  # retired worktrees are deleted in the background


def snapshot(repo: Path) -> dict[str, str]:
    """Everything a person could notice: every file in the checkout, the index's bytes,
    every ref, HEAD, `git status` and the worktree list."""
    state: dict[str, str] = {}
    for directory, folders, names in os.walk(repo):
        # Not into .git: a retired worktree's git dir may be going away meanwhile.
        folders[:] = [folder for folder in folders if folder != ".git"]
        for name in set(names) - {".git"}:  # a linked worktree's .git is a file
            path = Path(directory, name)
            state[str(path.relative_to(repo))] = hashlib.sha256(path.read_bytes()).hexdigest()
    gitdir = Path(sh(repo, "rev-parse", "--absolute-git-dir").strip())
    state["<index>"] = hashlib.sha256((gitdir / "index").read_bytes()).hexdigest()
    state["<HEAD>"] = (gitdir / "HEAD").read_text()
    state["<refs>"] = sh(repo, "for-each-ref", "--format=%(refname) %(objectname)")
    state["<status>"] = sh(repo, "status", "--porcelain", "--untracked-files=all")
    state["<worktrees>"] = sh(repo, "worktree", "list", "--porcelain")
    return state


def log(repo: Path, *args: str) -> list[str]:
    return sh(repo, "log", "--format=%s", *args).splitlines()


def has(repo: Path, sha: str) -> bool:
    """Whether the repository at `repo` can read the object `sha`."""
    return subprocess.run(["git", "-C", str(repo), "cat-file", "-e", sha]).returncode == 0


async def two_turns(wts: ConversationRepos, context: str = "ctx-aaaa-1") -> Path:
    """A conversation with two committed turns: one edits a.txt, one adds d.txt."""
    worktree = await wts.ensure(context)
    write(worktree.path / "a.txt", lines(10, {2: "agent line 2"}))
    assert await wts.commit_turn(context, "Change line 2", TRAILERS)
    write(worktree.path / "d.txt", "new file\n")
    assert await wts.commit_turn(
        context, "Add d.txt", [("Requested-by", "bob@example.com (phone)"), *TRAILERS[2:]]
    )
    return worktree.path


# ---- worktrees and turns ----------------------------------------------------------


async def test_two_conversations_are_separate(repo: Path, wts: ConversationRepos) -> None:
    before = snapshot(repo)
    one = await wts.ensure("11111111-aaaa")
    two = await wts.ensure("22222222-bbbb")
    assert one.path != two.path
    assert (one.branch, two.branch) == ("tailagent/11111111", "tailagent/22222222")
    assert one.base_branch == "main"
    assert one.base_commit == sh(repo, "rev-parse", "main").strip()
    assert one.path == wts.root.resolve() / "11111111"  # its short id: a person finds it
    assert (wts.root / "11111111-aaaa.json").stat().st_mode & 0o777 == 0o600

    write(one.path / "a.txt", "one's version\n")
    write(two.path / "a.txt", "two's version\n")
    assert read(one.path / "a.txt") == "one's version\n"
    assert read(two.path / "a.txt") == "two's version\n"
    await wts.commit_turn("11111111-aaaa", "one", [])
    await wts.commit_turn("22222222-bbbb", "two", [])
    assert read(one.path / "a.txt") == "one's version\n"
    assert read(repo / "a.txt") == lines(10)

    again = await wts.ensure("11111111-aaaa")
    assert again == one
    assert await wts.get("11111111-aaaa") == one
    assert await wts.get("33333333") is None

    # The person's repository did not change at all: no worktree, branch or object more.
    assert snapshot(repo) == before
    for path in (one.path, two.path):
        assert sh(path, "branch", "--show-current").strip().startswith("tailagent/")
        tip = sh(path, "rev-parse", "HEAD").strip()
        assert not has(repo, tip)


async def test_commit_turn_writes_trailers(repo: Path, wts: ConversationRepos) -> None:
    worktree = await wts.ensure("ctx-aaaa-1")
    assert await wts.commit_turn("ctx-aaaa-1", "nothing yet", TRAILERS) is None

    write(worktree.path / "a.txt", "changed\n")
    write(worktree.path / "new" / "file.txt", "untracked\n")
    write(worktree.path / "build.log", "ignored\n")
    prompt = "#12 fix " + "x" * 100 + "\nsecond line of the prompt"
    sha = await wts.commit_turn("ctx-aaaa-1", prompt, TRAILERS)
    assert sha == sh(worktree.path, "rev-parse", "HEAD").strip()

    own = worktree.path  # the commit is in the conversation's own repository only
    assert not has(repo, sha)
    subject = sh(own, "log", "-1", "--format=%s", sha).strip()
    assert subject.startswith("#12 fix xxx") and subject.endswith("…")
    assert len(subject) == 72
    trailers = sh(own, "log", "-1", "--format=%(trailers)", sha).strip()
    assert trailers.splitlines() == [f"{key}: {value}" for key, value in TRAILERS]
    assert sh(own, "log", "-1", "--format=%an <%ae>|%cn <%ce>", sha).strip() == (
        "tailagent <tailagent@localhost>|tailagent <tailagent@localhost>"
    )
    files = sh(own, "show", "--name-only", "--format=", sha).split()
    assert sorted(files) == ["a.txt", "new/file.txt"]
    assert (worktree.path / "build.log").exists()
    assert await wts.commit_turn("ctx-aaaa-1", "again", TRAILERS) is None

    # The agent's own commits stay as they are.
    write(worktree.path / "b.txt", "agent\n")
    sh(worktree.path, "add", "b.txt")
    sh(worktree.path, *PERSON, "commit", "-q", "-m", "agent's own commit")
    assert await wts.commit_turn("ctx-aaaa-1", "", TRAILERS) is None
    assert log(own, "-2", "tailagent/ctx-aaaa") == ["agent's own commit", subject]


async def test_commits_as_the_configured_user(repo: Path, wts: ConversationRepos) -> None:
    sh(repo, "config", "user.name", "Alice")
    sh(repo, "config", "user.email", "alice@example.com")
    worktree = await wts.ensure("ctx")
    write(worktree.path / "a.txt", "changed\n")
    sha = await wts.commit_turn("ctx", "   \n  change it  ", [])
    assert sha is not None
    assert sh(worktree.path, "log", "-1", "--format=%an <%ae>|%s", sha).strip() == (
        "Alice <alice@example.com>|change it"
    )


async def test_status_and_diff(repo: Path, wts: ConversationRepos) -> None:
    path = await two_turns(wts)
    write(repo / "e.txt", "on main\n")
    commit_all(repo, "main moves on")
    write(path / "b.txt", "uncommitted\n")
    write(path / "u.txt", "untracked\n")
    index_before = sh(path, "ls-files", "--stage")

    status = await wts.status("ctx-aaaa-1")
    assert (status.branch, status.base_branch) == ("tailagent/ctx-aaaa", "main")
    assert (status.ahead, status.behind) == (2, 1)
    assert status.files == ["a.txt", "b.txt", "d.txt", "u.txt"]

    diff = await wts.diff("ctx-aaaa-1")
    committed, _, pending = diff.partition("# Not committed yet")
    assert "+agent line 2" in committed and "+new file" in committed
    assert "e.txt" not in diff  # main's own progress is not the conversation's
    assert "+uncommitted" in pending and "+untracked" in pending
    assert "b.txt" not in committed
    assert sh(path, "ls-files", "--stage") == index_before
    assert sh(path, "status", "--porcelain") == " M b.txt\n?? u.txt\n"


# ---- merging ------------------------------------------------------------------------


async def test_squash(repo: Path, wts: ConversationRepos) -> None:
    path = await two_turns(wts)
    old_main = sh(repo, "rev-parse", "main").strip()

    result = await wts.merge("ctx-aaaa-1")
    assert result.strategy == "squash" and result.base_branch == "main" and result.removed
    assert result.commit == sh(repo, "rev-parse", "main").strip()
    assert sh(repo, "rev-parse", "main^").strip() == old_main
    assert sh(repo, "rev-list", "--count", f"{old_main}..main").strip() == "1"
    message = sh(repo, "log", "-1", "--format=%B", "main")
    assert message.startswith("tailagent: Change line 2\n\n- Change line 2\n- Add d.txt\n\n")
    trailers = sh(repo, "log", "-1", "--format=%(trailers)", "main").strip().splitlines()
    assert trailers == [
        "Requested-by: alice@example.com (laptop)",
        "Approved-by: alice@example.com (laptop): Bash",
        "A2A-Task: task-1",
        "A2A-Context: ctx-aaaa-1",
        "Requested-by: bob@example.com (phone)",
    ]
    # The main checkout (clean, on main) was fast-forwarded.
    assert read(repo / "a.txt") == lines(10, {2: "agent line 2"})
    assert read(repo / "d.txt") == "new file\n"
    assert sh(repo, "status", "--porcelain") == ""
    # And the conversation is gone.
    assert not path.exists()
    assert sh(repo, "branch", "--list", "tailagent/*") == ""
    assert await wts.get("ctx-aaaa-1") is None
    assert "tailagent" not in sh(repo, "worktree", "list")


async def test_merge_commit_and_keep(repo: Path, wts: ConversationRepos) -> None:
    path = await two_turns(wts)
    old_main = sh(repo, "rev-parse", "main").strip()
    tip = sh(path, "rev-parse", "tailagent/ctx-aaaa").strip()
    assert not has(repo, tip)

    result = await wts.merge("ctx-aaaa-1", "merge", keep=True)
    assert not result.removed
    parents = sh(repo, "log", "-1", "--format=%P", "main").split()
    assert parents == [old_main, tip]
    assert log(repo, "-1", "main") == ["Merge branch 'tailagent/ctx-aaaa' into main"]
    assert path.is_dir() and await wts.get("ctx-aaaa-1") is not None
    assert sh(path, "rev-parse", "tailagent/ctx-aaaa").strip() == tip
    assert sh(repo, "branch", "--list", "tailagent/*") == ""  # the commits came, no branch

    with pytest.raises(MergeRefused, match="nothing to merge"):
        await wts.merge("ctx-aaaa-1", "merge")


async def test_rebase(repo: Path, wts: ConversationRepos) -> None:
    await two_turns(wts)
    write(repo / "e.txt", "on main\n")
    moved = commit_all(repo, "main moves on")

    result = await wts.merge("ctx-aaaa-1", "rebase")
    assert result.removed
    assert log(repo, "-4", "main") == ["Add d.txt", "Change line 2", "main moves on", "second"]
    assert sh(repo, "rev-list", "--merges", "main") == ""
    assert sh(repo, "rev-parse", "main~2").strip() == moved
    # The turn commits keep their trailers.
    assert "A2A-Task: task-1" in sh(repo, "log", "-1", "--format=%(trailers)", "main")
    assert read(repo / "d.txt") == "new file\n"
    assert sh(repo, "status", "--porcelain") == ""


async def test_base_not_checked_out_moves_the_ref(repo: Path, tmp_path: Path) -> None:
    sh(repo, "switch", "-q", "-c", "dev")
    wts = ConversationRepos(repo, tmp_path / "state" / "worktrees", base="main")
    worktree = await wts.ensure("ctx")
    assert worktree.base_branch == "main"
    write(worktree.path / "a.txt", "agent\n")
    await wts.commit_turn("ctx", "edit a", [])
    files_before = {k: v for k, v in snapshot(repo).items() if not k.startswith("<")}

    result = await wts.merge("ctx")
    assert sh(repo, "rev-parse", "main").strip() == result.commit
    assert sh(repo, "show", "main:a.txt") == "agent\n"
    assert sh(repo, "branch", "--show-current").strip() == "dev"
    assert read(repo / "a.txt") == lines(10)
    assert {k: v for k, v in snapshot(repo).items() if not k.startswith("<")} == files_before


async def test_dirty_base_is_refused(repo: Path, wts: ConversationRepos) -> None:
    await two_turns(wts)
    write(repo / "b.txt", "the person's unsaved work\n")
    write(repo / "src" / "c.txt", "staged work\n")
    sh(repo, "add", "src/c.txt")
    write(repo / "notes.txt", "untracked, not in the way\n")
    before = snapshot(repo)

    for strategy in ("squash", "merge", "rebase"):
        with pytest.raises(MergeRefused) as refused:
            await wts.merge("ctx-aaaa-1", strategy)  # type: ignore[arg-type]
        message = str(refused.value)
        assert "\n" not in message
        assert "b.txt" in message and "src/c.txt" in message and "notes.txt" not in message
        assert "uncommitted changes" in message
        assert snapshot(repo) == before
    assert await wts.get("ctx-aaaa-1") is not None


async def test_untracked_file_in_the_way_is_refused(repo: Path, wts: ConversationRepos) -> None:
    await two_turns(wts)
    write(repo / "d.txt", "the person's own d.txt\n")
    path = (await wts.ensure("ctx-aaaa-1")).path
    before = snapshot(repo)
    branch_tip = sh(path, "rev-parse", "tailagent/ctx-aaaa").strip()
    for strategy in ("squash", "rebase"):
        with pytest.raises(MergeRefused, match=r"overwrite .*\(d\.txt\)"):
            await wts.merge("ctx-aaaa-1", strategy)  # type: ignore[arg-type]
        assert snapshot(repo) == before
        assert sh(path, "rev-parse", "tailagent/ctx-aaaa").strip() == branch_tip
    assert read(repo / "d.txt") == "the person's own d.txt\n"


async def test_base_checked_out_elsewhere_is_refused(repo: Path, tmp_path: Path) -> None:
    sh(repo, "switch", "-q", "-c", "dev")
    other = tmp_path / "persons-worktree"
    sh(repo, "worktree", "add", "-q", str(other), "main")
    wts = ConversationRepos(repo, tmp_path / "state" / "worktrees", base="main")
    await two_turns(wts)
    before, before_other = snapshot(repo), snapshot(other)

    with pytest.raises(MergeRefused) as refused:
        await wts.merge("ctx-aaaa-1")
    assert f"main is checked out in another worktree, {other}" in str(refused.value)
    assert snapshot(repo) == before and snapshot(other) == before_other


async def test_conflict_aborts_then_follow_up_resolves(repo: Path, wts: ConversationRepos) -> None:
    path = await two_turns(wts)
    write(repo / "a.txt", lines(10, {2: "person's line 2"}))
    commit_all(repo, "person edits line 2")
    before = snapshot(repo)
    branch_tip = sh(path, "rev-parse", "tailagent/ctx-aaaa").strip()

    for strategy in ("squash", "merge", "rebase"):
        with pytest.raises(MergeConflict) as conflict:
            await wts.merge("ctx-aaaa-1", strategy)  # type: ignore[arg-type]
        assert conflict.value.paths == ["a.txt"]
        message = str(conflict.value)
        assert "\n" not in message
        assert message.endswith(
            'ask the agent: "rebase your branch onto main and resolve the conflicts in a.txt"'
        )
        assert snapshot(repo) == before
        assert sh(path, "status", "--porcelain") == ""
        assert sh(path, "rev-parse", "tailagent/ctx-aaaa").strip() == branch_tip
        assert not has(repo, branch_tip)  # a conflict brings none of its objects over

    # The agent follows up: rebases onto main, resolves, continues.
    sh(path, "rebase", "main", check=False)
    write(path / "a.txt", lines(10, {2: "both line 2"}))
    sh(path, "add", "a.txt")
    sh(path, *PERSON, "rebase", "--continue")
    result = await wts.merge("ctx-aaaa-1")
    assert read(repo / "a.txt") == lines(10, {2: "both line 2"})
    assert sh(repo, "rev-parse", "main").strip() == result.commit
    assert sh(repo, "status", "--porcelain") == ""


async def test_rebase_conflict_leaves_the_conversation_as_it_was(
    repo: Path, wts: ConversationRepos
) -> None:
    """A conflict merge-tree cannot see (the branch's history conflicts, its sum does not)
    is met by `git rebase`, which is aborted."""
    worktree = await wts.ensure("ctx")
    write(worktree.path / "a.txt", lines(10, {2: "agent line 2"}))
    await wts.commit_turn("ctx", "change line 2", [])
    write(worktree.path / "a.txt", lines(10))
    write(worktree.path / "d.txt", "new file\n")
    await wts.commit_turn("ctx", "change it back, add d.txt", [])
    write(repo / "a.txt", lines(10, {2: "person's line 2"}))
    commit_all(repo, "person")
    before, tip = snapshot(repo), sh(worktree.path, "rev-parse", "tailagent/ctx").strip()
    # The conversation's index is rewritten by `rebase --abort` (same entries, new stat
    # data), so its entries are compared rather than its bytes.
    worktree_before = snapshot(worktree.path) | {"<index>": sh(worktree.path, "ls-files", "-s")}

    with pytest.raises(MergeConflict) as conflict:
        await wts.merge("ctx", "rebase")
    assert conflict.value.paths == ["a.txt"]
    assert snapshot(repo) == before
    worktree_after = snapshot(worktree.path) | {"<index>": sh(worktree.path, "ls-files", "-s")}
    # But for its view of main, now where the conflict is (what it is asked to rebase onto).
    main = sh(repo, "rev-parse", "main").strip()
    assert f"refs/heads/main {main}\n" in worktree_after["<refs>"]
    worktree_before.pop("<refs>"), worktree_after.pop("<refs>")
    assert worktree_after == worktree_before
    assert sh(worktree.path, "rev-parse", "tailagent/ctx").strip() == tip


async def test_refusals_before_anything_happens(repo: Path, wts: ConversationRepos) -> None:
    with pytest.raises(NoWorktree, match=r"^no worktree for conversation nope$"):
        await wts.merge("nope")
    worktree = await wts.ensure("ctx")
    with pytest.raises(MergeRefused, match="nothing to merge"):
        await wts.merge("ctx")
    write(worktree.path / "a.txt", "uncommitted\n")
    with pytest.raises(MergeRefused, match=r"not committed yet \(a\.txt\)"):
        await wts.merge("ctx")
    await wts.commit_turn("ctx", "edit", [])
    sh(worktree.path, "switch", "-q", "--detach")
    with pytest.raises(GitError, match="not on its branch tailagent/ctx"):
        await wts.merge("ctx")
    with pytest.raises(GitError, match="unknown merge strategy"):
        await wts.merge("ctx", "octopus")  # type: ignore[arg-type]


# ---- discard and prune ------------------------------------------------------------


async def test_discard_says_what_is_lost(repo: Path, wts: ConversationRepos) -> None:
    path = await two_turns(wts)
    write(path / "z.txt", "never committed\n")
    before = snapshot(repo)

    lost = await wts.would_lose("ctx-aaaa-1")
    assert [line.split(" ", 1)[1] for line in lost.commits_lost] == ["Add d.txt", "Change line 2"]
    assert lost.files_uncommitted == ["z.txt"]
    assert path.is_dir()

    assert await wts.discard("ctx-aaaa-1") == lost
    assert not path.exists()
    assert await wts.get("ctx-aaaa-1") is None
    assert snapshot(repo) == before  # it never had anything in the person's repository
    with pytest.raises(NoWorktree):
        await wts.discard("ctx-aaaa-1")


async def test_prune_only_touches_tailagents_own(
    repo: Path, wts: ConversationRepos, tmp_path: Path
):
    live = await two_turns(wts, "live-conversation")  # with commits: its branch stays
    gone = await wts.ensure("gone-conversation")
    # A person's branch and worktree under a tailagent-looking name, with no record.
    persons = tmp_path / "persons"
    sh(repo, "worktree", "add", "-q", "-b", "tailagent/mine", str(persons), "main")
    sh(repo, "branch", "tailagent/other", "main")
    write(wts.root / "stray" / "file.txt", "not a worktree\n")

    assert await wts.prune({"live-conversation"}) == ["gone-conversation"]
    assert not gone.path.exists()
    assert await wts.get("gone-conversation") is None
    assert await wts.get("live-conversation") is not None
    branches = sh(repo, "branch", "--list", "--format=%(refname:short)", "tailagent/*").split()
    assert branches == ["tailagent/mine", "tailagent/other"]  # the person's, untouched
    assert sh(live, "branch", "--show-current") == "tailagent/live-con\n"  # in its own
    assert persons.is_dir() and str(persons) in sh(repo, "worktree", "list")
    assert (wts.root / "stray" / "file.txt").exists()
    assert await wts.prune({"live-conversation"}) == []


async def test_deleted_by_hand(repo: Path, wts: ConversationRepos) -> None:
    """Its branch and commits went with its directory (they were in its repository): a
    merge, a diff or a status says so; the conversation's next turn starts it again."""
    path = await two_turns(wts)
    shutil.rmtree(path)
    for attempt in (wts.status, wts.diff, wts.merge):
        with pytest.raises(WorktreeDeleted) as deleted:
            await attempt("ctx-aaaa-1")
        assert str(deleted.value) == (
            f"the worktree of conversation ctx-aaaa-1 ({path}) was deleted by hand, and its "
            "repository with it (its branch tailagent/ctx-aaaa and commits): run `tailagent "
            "discard ctx-aaaa-1` to drop what is left"
        )
    assert not path.exists()
    assert await wts.would_lose("ctx-aaaa-1") == DiscardResult([], [])
    again = await wts.ensure("ctx-aaaa-1")
    assert again.path == path and sh(path, "status", "--porcelain") == ""
    assert sh(path, "rev-parse", "HEAD") == sh(repo, "rev-parse", "main")
    await wts.discard("ctx-aaaa-1")
    assert "tailagent" not in sh(repo, "worktree", "list") + sh(repo, "branch")


# ---- names, bases and probes --------------------------------------------------------


async def test_names_are_safe_and_distinct(repo: Path, wts: ConversationRepos) -> None:
    one = await wts.ensure("session-1")
    two = await wts.ensure("session-2")
    assert (one.branch, two.branch) == ("tailagent/session-", "tailagent/session-2")
    odd = await wts.ensure("../../escape me")
    assert odd.path.parent == wts.root.resolve()
    assert odd.branch == "tailagent/------es"
    assert (await wts.get("../../escape me")) == odd


async def test_a_branch_name_is_unique_among_its_owners_conversations_only(
    wts: ConversationRepos,
) -> None:
    """Another person's `tailagent/session-` says nothing to the next person whose id
    starts alike: theirs gets the same name; their own second one gets a longer one, as
    does a conversation whose owner is not known (every name is avoided for it)."""
    owners = {"session-1": "carol", "session-2": "bob", "session-3": "bob", "session-4": "carol"}

    async def owner_of(context_id: str) -> str | None:
        return owners.get(context_id)

    wts.know_owners(owner_of)
    made = [await wts.ensure(f"session-{n}") for n in (1, 2, 3, 4, 5)]
    assert [worktree.branch for worktree in made] == [
        "tailagent/session-",  # carol's
        "tailagent/session-",  # bob's: carol's is no clash for him
        "tailagent/session-3",  # bob's second: his first has the short one
        "tailagent/session-4",  # carol's second
        "tailagent/session-5",  # nobody's known: avoids every name
    ]
    assert await wts.release("session-2")  # idle: bob's keeps its name, his next avoids it
    owners["session-6"] = "bob"
    assert (await wts.ensure("session-6")).branch == "tailagent/session-6"
    assert (await wts.ensure("session-2")).branch == "tailagent/session-"  # woken, still his


async def test_missing_base_is_refused(repo: Path, tmp_path: Path) -> None:
    wts = ConversationRepos(repo, tmp_path / "state" / "worktrees", base="release")
    with pytest.raises(GitError, match="base branch release does not exist"):
        await wts.ensure("ctx")
    assert await wts.get("ctx") is None
    sh(repo, "switch", "-q", "--detach")
    with pytest.raises(GitError, match="detached HEAD"):
        await ConversationRepos(repo, tmp_path / "w").ensure("ctx")


async def test_probe(repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    assert await probe(repo) is None

    plain = tmp_path / "plain"
    plain.mkdir()
    assert await probe(plain) == "not a git repository"
    assert await probe(repo / "src") == (
        f"a subdirectory of the git repository at {repo} (isolation needs its top level)"
    )

    bare = tmp_path / "bare.git"
    sh(tmp_path, "clone", "-q", "--bare", str(repo), str(bare))
    assert await probe(bare) == "a bare repository (no work tree to branch from)"

    empty = tmp_path / "empty"
    sh(tmp_path, "init", "-q", "-b", "main", str(empty))
    assert await probe(empty) == "no commits yet on main (nothing to branch from)"

    sh(repo, "switch", "-q", "--detach")
    assert await probe(repo) == "detached HEAD (no branch to merge back into)"
    sh(repo, "switch", "-q", "main")

    sh(repo, "switch", "-q", "-c", "topic", "HEAD~1")
    write(repo / "src" / "c.txt", "topic\n")
    commit_all(repo, "topic")
    sh(repo, *PERSON, "rebase", "main", check=False)
    assert await probe(repo) == "a rebase in progress in the repository (finish or abort it first)"
    sh(repo, "rebase", "--abort")

    monkeypatch.setenv("PATH", str(tmp_path / "nowhere"))
    assert await probe(repo) == "git is not installed (tailagent needs it for worktree isolation)"


# ---- races and strays ---------------------------------------------------------------


@pytest.mark.parametrize("checked_out", [True, False])
@pytest.mark.parametrize("strategy", ["squash", "rebase"])
async def test_base_moved_meanwhile_is_refused(
    repo: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch, checked_out: bool, strategy: str
) -> None:
    if not checked_out:
        sh(repo, "switch", "-q", "-c", "dev")
    wts = ConversationRepos(repo, tmp_path / "state" / "worktrees", base="main")
    path = await two_turns(wts)
    tip = sh(path, "rev-parse", "tailagent/ctx-aaaa").strip()
    build = wts._merging.merged_tree

    async def person_commits_meanwhile(*args: object) -> str:
        tree = await build(*args)  # type: ignore[arg-type]
        sh(repo, *PERSON, "commit", "-q", "--allow-empty", "-m", "meanwhile")
        if not checked_out:
            sh(repo, "update-ref", "refs/heads/main", "HEAD")
        return tree

    monkeypatch.setattr(wts._merging, "merged_tree", person_commits_meanwhile)
    with pytest.raises(MergeRefused, match="main moved while merging"):
        await wts.merge("ctx-aaaa-1", strategy)  # type: ignore[arg-type]
    assert log(repo, "-1", "main") == ["meanwhile"]
    assert sh(path, "rev-parse", "tailagent/ctx-aaaa").strip() == tip
    assert sh(repo, "status", "--porcelain") == ""


async def test_concurrent_conversations(repo: Path, wts: ConversationRepos) -> None:
    contexts = [f"conversation-{n}" for n in range(4)]
    made = await asyncio.gather(*(wts.ensure(context) for context in contexts))
    assert len({worktree.branch for worktree in made}) == 4
    for worktree in made:
        write(worktree.path / "a.txt", f"{worktree.context_id}\n")
    shas = await asyncio.gather(*(wts.commit_turn(context, "edit", []) for context in contexts))
    assert len(set(shas)) == 4
    assert read(repo / "a.txt") == lines(10)


async def test_git_never_wanders_out_of_a_broken_worktree(repo: Path, tmp_path: Path) -> None:
    """The state dir inside another repository (a home directory kept in git): a worktree
    that lost its `.git` must not make tailagent commit to that repository."""
    home = tmp_path / "home-repo"
    sh(tmp_path, "init", "-q", "-b", "main", str(home))
    write(home / "dotfile", "x\n")
    commit_all(home, "dotfiles")
    wts = ConversationRepos(repo, home / ".local" / "state" / "worktrees")
    worktree = await wts.ensure("ctx")
    shutil.rmtree(worktree.path / ".git")
    write(worktree.path / "a.txt", "changed\n")
    for attempt in (lambda ctx: wts.commit_turn(ctx, "edit", []), wts.status, wts.diff):
        with pytest.raises(GitError, match=r"the \.git of the worktree .* was changed"):
            await attempt("ctx")
    # Its repository went with its .git: nothing is read there, the home's least of all.
    assert await wts.would_lose("ctx") == DiscardResult([], [])
    assert log(home) == ["dotfiles"]
    assert sh(home, "status", "--porcelain") == "?? .local/\n"


async def test_records_decide_what_is_tailagents(
    repo: Path, wts: ConversationRepos, tmp_path: Path
):
    # A creation cut short (record written, worktree never made) is simply made again.
    worktree = await wts.ensure("ctx")
    await wts.discard("ctx")
    record = wts.root / "ctx.json"
    record.write_text(
        json.dumps(
            {**asdict(worktree), "path": str(worktree.path), "repository": str(repo / ".git")}
        )
    )
    assert (await wts.ensure("ctx")).path.is_dir()

    # A directory where a worktree would go, but no record: left alone, another name taken.
    write(wts.root / "squatter" / "file.txt", "someone's\n")
    assert (await wts.ensure("squatter")).path == wts.root.resolve() / "squatter-2"
    assert read(wts.root / "squatter" / "file.txt") == "someone's\n"

    # The same state dir used with another repository: its records are not this one's.
    other = tmp_path / "other"
    sh(tmp_path, "clone", "-q", str(repo), str(other))
    elsewhere = ConversationRepos(other, wts.root)
    with pytest.raises(GitError, match="belongs to the repository at"):
        await elsewhere.discard("ctx")
    assert await elsewhere.prune(set()) == []
    assert (await wts.get("ctx")) is not None and "tailagent/ctx" in sh(worktree.path, "branch")


async def test_git_errors_are_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    with pytest.raises(GitError) as failed:
        await git(tmp_path, "log")
    assert str(failed.value).startswith(f"git log failed in {tmp_path}: not a git repository")
    assert "\n" not in str(failed.value)
    assert (await git(tmp_path, "log", ok=(0, 128))).code == 128
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(GitError, match=r"^git is not installed \(tailagent needs it"):
        await git(tmp_path, "status")


# ---- made ahead, retired in the background ------------------------------------------


def registered(repo: Path) -> list[str]:
    """The person's repository's worktrees, as `git worktree list` says: a conversation's
    directory is a repository of its own now, and never one of them."""
    listing = sh(repo, "worktree", "list", "--porcelain")
    return [line.removeprefix("worktree ") for line in listing.splitlines() if "worktree " in line]


async def test_the_next_conversation_takes_the_worktree_made_ahead(
    repo: Path, wts: ConversationRepos
) -> None:
    ahead = await wts.prepare()
    assert wts.ready() == [ahead] and ahead.name.startswith("+ready-")
    assert sh(ahead, "branch", "--show-current").strip() == ""  # detached: no branch yet
    assert sh(repo, "branch", "--list", "tailagent/*") == ""
    write(repo / "b.txt", "b moved on\n")
    tip = commit_all(repo, "main moved on after the worktree was made")

    worktree = await wts.ensure("ctx-ahead-1")
    assert worktree.path == ahead and worktree.base_commit == tip
    assert sh(ahead, "rev-parse", "HEAD").strip() == tip  # brought to the base's tip
    assert read(ahead / "b.txt") == "b moved on\n"
    assert sh(ahead, "branch", "--show-current").strip() == "tailagent/ctx-ahea"
    assert wts.ready() == [] and (await wts.get("ctx-ahead-1")) == worktree
    assert not list(wts.root.glob("+ready-*.json"))
    write(ahead / "e.txt", "e\n")
    assert await wts.commit_turn("ctx-ahead-1", "Add e", TRAILERS)
    merged = await wts.merge("ctx-ahead-1")
    assert read(repo / "e.txt") == "e\n" and merged.removed and not ahead.exists()


async def test_a_worktree_made_ahead_that_someone_wrote_in_is_not_given(
    repo: Path, wts: ConversationRepos
) -> None:
    ahead = await wts.prepare()
    write(ahead / "stray.txt", "written before any conversation took it\n")
    worktree = await wts.ensure("ctx-fresh-1")
    assert worktree.path != ahead and not (worktree.path / "stray.txt").exists()
    assert not ahead.exists() and wts.ready() == []
    await wts.aclose()
    assert registered(repo) == [str(repo)] and list((wts.root / ".trash").iterdir()) == []


async def test_prune_removes_worktrees_made_ahead_and_finishes_cut_adoptions(
    repo: Path, wts: ConversationRepos
) -> None:
    left, cut, adopted = await asyncio.gather(wts.prepare(), wts.prepare(), wts.prepare())
    shutil.rmtree(cut)  # a creation cut short: its directory never came
    # An adoption cut short after the conversation's record was written: the worktree
    # is the conversation's; only the record of it as made ahead is left over.
    record = json.loads((wts.root / f"{adopted.name}.json").read_text())
    record |= {"context_id": "ctx-adopted"}
    (wts.root / "ctx-adopted.json").write_text(json.dumps(record))
    assert await wts.prune({"ctx-adopted"}) == []
    assert wts.ready() == [] and not left.exists()  # a killed server's: a start removes it
    assert (await wts.get("ctx-adopted")) is not None and adopted.is_dir()
    assert str(cut) not in registered(repo)


async def test_a_merged_worktree_goes_at_once_and_its_files_in_the_background(
    repo: Path, wts: ConversationRepos
) -> None:
    path = await two_turns(wts)
    await wts.merge("ctx-aaaa-1")
    assert not path.exists()  # out of the way at once, under .trash until deleted
    assert "tailagent/ctx-aaaa" not in sh(repo, "branch")
    await wts.aclose()
    assert registered(repo) == [str(repo)]
    assert list((wts.root / ".trash").iterdir()) == []
    # A stop in the middle leaves a retired directory in .trash: the next start sweeps it.
    other = await wts.ensure("ctx-bbbb-2")
    other.path.rename(wts.root / ".trash" / "left")
    later = ConversationRepos(repo, wts.root)
    await later.prune({"ctx-bbbb-2"})
    await later.aclose()
    assert not (wts.root / ".trash" / "left").exists()


async def test_a_new_conversation_waits_for_the_worktree_being_made_ahead(
    repo: Path, tmp_path: Path
) -> None:
    """Rather than start a second checkout beside the one under way (a slow one here: the
    person's post-checkout hook, let run, takes half a second)."""
    hook = repo / ".git" / "hooks" / "post-checkout"
    write(hook, "#!/bin/sh\nsleep 0.5\n")
    hook.chmod(0o755)
    wts = ConversationRepos(repo, tmp_path / "state" / "worktrees", git_programs=True)
    making = asyncio.create_task(wts.prepare())
    for _ in range(500):  # until its record is written and its checkout under way
        if wts.root.is_dir() and list(wts.root.glob("+ready-*.json")):
            break
        await asyncio.sleep(0.01)
    worktree = await wts.ensure("ctx-waits-1")
    assert worktree.path == await making
    assert registered(repo) == [str(repo)] and list(wts.root.glob("ctx-waits-1*")) != []
    await wts.aclose()
