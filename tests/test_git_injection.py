"""No file an agent writes in its worktree becomes a command tailagent's own git runs.

An agent may write any file of its worktree without asking (Claude Code's `acceptEdits`,
the echo agent's `edit:PATH`), `.git` and `.gitattributes` included. Each test plants one
way such a file could make git start a program (a `.git` naming a git dir whose config
sets `core.fsmonitor` or `core.hooksPath`; a `.gitattributes` sending files through a
filter, diff or merge driver the person's config defines), or the person's own hooks,
then runs everything tailagent runs there (turn commits, status, diff, merge, discard)
and checks that no marker file was made. `workspace.git_programs` brings the person's
hooks and drivers back. The last test does it through a real server and the echo agent.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from a2a.utils.errors import UnsupportedOperationError
from google.protobuf.json_format import MessageToDict

from tailagent.workspace import MergeConflict, Worktrees
from tailagent.workspace.worktrees import WorktreeTampered
from tests import test_worktrees
from tests.a2a_helpers import A2A, user_message
from tests.conftest import start_server
from tests.test_isolation import worktree_path
from tests.test_worktrees import PERSON, TRAILERS, commit_all, lines, read, sh, write

# The worktree tests' fixtures: a throwaway repository, its Worktrees, no git identity.
no_identity = test_worktrees.no_identity
repo = test_worktrees.repo
wts = test_worktrees.wts

HOOKS = (
    "pre-commit",
    "prepare-commit-msg",
    "commit-msg",
    "post-commit",
    "post-checkout",
    "post-merge",
    "post-rewrite",
    "pre-rebase",
    "reference-transaction",
    "post-index-change",
    "pre-auto-gc",
)


def install_hooks(directory: Path, log: Path) -> None:
    """Every hook git may run for tailagent's commands, each noting its name in `log`."""
    for name in HOOKS:
        hook = directory / name
        write(hook, f"#!/bin/sh\necho {name} >> '{log}'\ncat > /dev/null\n")
        hook.chmod(0o755)


def person_commits(repo: Path, message: str) -> None:
    """The person's own commit beside the conversations (their hooks are not the test's)."""
    quiet = ("-c", f"core.hooksPath={os.devnull}")
    sh(repo, *quiet, "add", "-A")
    sh(repo, *quiet, *PERSON, "commit", "-q", "-m", message)


def ran(log: Path) -> list[str]:
    return read(log).split() if log.exists() else []


def touch(marker: Path) -> str:
    """A shell command that leaves `marker` behind when git runs it."""
    return f"touch '{marker}'"


async def merge_all_ways(wts: Worktrees, repo: Path) -> None:
    """Conversations merged by rebase (the base moved meanwhile) and by squash (into the
    clean checkout: a fast-forward), one discarded, each after a committed turn."""
    for context, strategy in (("ctx-rebase", "rebase"), ("ctx-squash", "squash")):
        worktree = await wts.ensure(context)
        write(worktree.path / f"{context}.txt", "the agent's\n")
        assert await wts.commit_turn(context, f"add {context}", TRAILERS)
        write(repo / f"{context}-person.txt", "the person's\n")
        person_commits(repo, f"the person goes on beside {context}")
        merged = await wts.merge(context, strategy)  # type: ignore[arg-type]
        assert merged.removed and read(repo / f"{context}.txt") == "the agent's\n"
    worktree = await wts.ensure("ctx-discard")
    write(worktree.path / "draft.txt", "never committed\n")
    assert (await wts.discard("ctx-discard")).files_uncommitted == ["draft.txt"]


# ---- the person's own hooks -----------------------------------------------------------


@pytest.mark.parametrize("where", ["repository", "global core.hooksPath"])
async def test_the_persons_hooks_do_not_run(repo: Path, tmp_path: Path, where: str) -> None:
    log = tmp_path / "hooks-ran"
    if where == "repository":
        install_hooks(repo / ".git" / "hooks", log)
    else:
        install_hooks(tmp_path / "global-hooks", log)
        sh(repo, "config", "--global", "core.hooksPath", str(tmp_path / "global-hooks"))
    wts = Worktrees(repo, tmp_path / "state" / "worktrees")
    ahead = await wts.prepare()
    write(repo / "b.txt", "main moved on\n")
    person_commits(repo, "main moves on")  # so the worktree made ahead is reset when taken
    worktree = await wts.ensure("ctx-ahead")
    assert worktree.path == ahead
    write(worktree.path / "a.txt", "changed\n")
    assert await wts.commit_turn("ctx-ahead", "change a", TRAILERS)
    write(worktree.path / "b.txt", "not committed\n")
    assert (await wts.status("ctx-ahead")).files == ["a.txt", "b.txt"]
    assert "+not committed" in await wts.diff("ctx-ahead")
    await wts.discard("ctx-ahead")
    await merge_all_ways(wts, repo)
    await wts.aclose()
    assert ran(log) == []


async def test_the_person_may_let_their_hooks_and_drivers_run(repo: Path, tmp_path: Path):
    """`workspace.git_programs = true`: the hooks git runs for these commands run, but
    for pre-commit and commit-msg (a turn's commit is a checkpoint: a failing linter must
    not lose the record of who asked), and so do filter drivers (Git LFS)."""
    log = tmp_path / "hooks-ran"
    install_hooks(repo / ".git" / "hooks", log)
    marker = tmp_path / "filter-ran"
    sh(repo, "config", "filter.lfs-like.clean", f"{touch(marker)}; cat")
    wts = Worktrees(repo, tmp_path / "state" / "worktrees", git_programs=True)
    worktree = await wts.ensure("ctx")
    write(worktree.path / ".gitattributes", "*.bin filter=lfs-like\n")
    write(worktree.path / "big.bin", "binary\n")
    assert await wts.commit_turn("ctx", "add big.bin", TRAILERS)
    await wts.merge("ctx")
    await wts.aclose()
    hooks = set(ran(log))
    assert {"post-checkout", "prepare-commit-msg", "post-commit", "reference-transaction"} <= (
        hooks
    )
    assert {"pre-commit", "commit-msg"}.isdisjoint(hooks)
    assert marker.exists()


# ---- a .git that names another git dir --------------------------------------------------


def plant_git_dir(worktree: Path, variant: str, marker: Path) -> None:
    """`evilgit/` in the worktree, a git dir whose config runs `touch marker` (as the
    fsmonitor, or as every hook), its HEAD on the conversation's branch."""
    evil = worktree / "evilgit"
    write(evil / "HEAD", f"ref: refs/heads/{sh(worktree, 'branch', '--show-current').strip()}\n")
    (evil / "objects").mkdir()
    (evil / "refs" / "heads").mkdir(parents=True)
    if variant == "core.fsmonitor":
        write(evil / "config", f"[core]\n\tfsmonitor = {touch(marker)}\n")
    else:
        write(evil / "config", f"[core]\n\thooksPath = {evil / 'hooks'}\n")
        for name in HOOKS:
            write(evil / "hooks" / name, f"#!/bin/sh\n{touch(marker)}\n")
            (evil / "hooks" / name).chmod(0o755)


@pytest.mark.parametrize("variant", ["core.fsmonitor", "core.hooksPath"])
async def test_a_rewritten_dot_git_is_reported_and_never_followed(
    repo: Path, wts: Worktrees, tmp_path: Path, variant: str
) -> None:
    marker = tmp_path / "marker"
    worktree = await wts.ensure("ctx")
    write(worktree.path / "a.txt", "the first turn\n")
    assert await wts.commit_turn("ctx", "first", TRAILERS)
    tip = sh(repo, "rev-parse", worktree.branch).strip()
    plant_git_dir(worktree.path, variant, marker)
    write(worktree.path / ".git", "gitdir: evilgit\n")
    write(worktree.path / "a.txt", "the second turn\n")

    with pytest.raises(WorktreeTampered) as tampered:
        await wts.commit_turn("ctx", "second", TRAILERS)
    message = str(tampered.value)
    assert f"the .git of the worktree {worktree.path} was changed" in message
    assert "nothing there is committed" in message and "\n" not in message
    assert not marker.exists()
    assert sh(repo, "rev-parse", worktree.branch).strip() == tip
    for attempt in (wts.status, wts.diff, wts.merge):
        with pytest.raises(WorktreeTampered):
            await attempt("ctx")
        assert not marker.exists()
    lost = await wts.discard("ctx")
    assert "a.txt" in lost.files_uncommitted and len(lost.commits_lost) == 1
    await wts.aclose()
    assert not marker.exists() and not worktree.path.exists()
    assert "tailagent" not in sh(repo, "worktree", "list") + sh(repo, "branch")


async def test_a_dot_git_gone_or_made_a_directory_is_reported(repo: Path, wts: Worktrees):
    worktree = await wts.ensure("ctx")
    (worktree.path / ".git").unlink()
    sh(worktree.path, "init", "-q")  # the agent's own repository, in its worktree
    write(worktree.path / "a.txt", "changed\n")
    with pytest.raises(WorktreeTampered):
        await wts.commit_turn("ctx", "edit", [])
    assert sh(worktree.path, "log", "--all", "--oneline", check=False) == ""
    await wts.discard("ctx")
    await wts.aclose()
    assert not worktree.path.exists()


# ---- drivers the agent's .gitattributes names -----------------------------------------


async def test_drivers_named_in_gitattributes_do_not_run(
    repo: Path, wts: Worktrees, tmp_path: Path
) -> None:
    """The person's config defines a filter, a long-running filter process, a diff and a
    merge driver (as Git LFS or a merge helper would); the agent's `.gitattributes` sends
    its files through them."""
    marker = tmp_path / "marker"
    for key, value in (
        ("filter.evil.clean", f"{touch(marker)}; cat"),
        ("filter.evil.smudge", f"{touch(marker)}; cat"),
        ("filter.evil.required", "true"),
        ("filter.evilproc.process", touch(marker)),
        ("diff.evil.textconv", f"{touch(marker)}; cat"),
        ("diff.evil.command", f"{touch(marker)}; true"),
        ("merge.evil.driver", f"{touch(marker)}; false"),
    ):
        sh(repo, "config", key, value)
    worktree = await wts.ensure("ctx")
    write(
        worktree.path / ".gitattributes",
        "* filter=evil diff=evil merge=evil\np.dat filter=evilproc\n",
    )
    write(worktree.path / "p.dat", "data\n")
    assert await wts.commit_turn("ctx", "attributes", TRAILERS)
    assert not marker.exists()
    assert sh(repo, "show", f"{worktree.branch}:p.dat") == "data\n"  # taken as it is
    write(worktree.path / "a.txt", lines(10, {9: "the agent's line 9"}))
    assert "a.txt" in (await wts.status("ctx")).files
    patch = await wts.diff("ctx")
    assert "+data" in patch and "+the agent's line 9" in patch
    assert not marker.exists()
    assert await wts.commit_turn("ctx", "line 9", TRAILERS)

    # A rebase picks the second turn with the first one's .gitattributes checked out.
    write(repo / "a.txt", lines(10, {0: "the person's line 0"}))
    commit_all(repo, "the person edits line 0")
    with pytest.raises(MergeConflict):  # the merge driver is switched off: a conflict
        await wts.merge("ctx", "rebase")
    assert not marker.exists()
    await wts.merge("ctx")  # squash: built in the object store, then a fast-forward
    assert read(repo / "a.txt") == lines(10, {0: "the person's line 0", 9: "the agent's line 9"})
    await wts.aclose()
    assert not marker.exists()


# ---- through a real server ------------------------------------------------------------


async def test_through_a_real_server_with_the_echo_agent(tmp_path: Path) -> None:
    repo = tmp_path / "workspace"
    sh(tmp_path, "init", "-q", "-b", "main", str(repo))
    write(repo / "calc.py", "def add(a, b):\n    return a - b\n")
    commit_all(repo, "start")
    filtered = tmp_path / "filter-ran"
    sh(repo, "config", "filter.evil.clean", f"{touch(filtered)}; cat")
    followed = tmp_path / "fsmonitor-ran"
    server = start_server(tmp_path, "--isolation", "worktree")
    try:
        a2a = A2A(server.url, server.token)
        first = await a2a.turn("* filter=evil\nedit:.gitattributes")
        assert first.final_state == "completed"
        info = MessageToDict((await a2a.get(first.task_id)).metadata)["worktree"]
        assert info["commit"] and info["files"] == [".gitattributes"], info
        assert not filtered.exists()

        path = worktree_path(repo, info["branch"])
        plant_git_dir(path, "core.fsmonitor", followed)  # as an agent writing folders can
        second = await a2a.turn(
            user_message("gitdir: evilgit\nedit:.git", context_id=first.context_id)
        )
        assert second.final_state == "completed"
        error = MessageToDict((await a2a.get(second.task_id)).metadata)["worktree"]["error"]
        assert "was changed" in error and "nothing there is committed" in error
        assert not followed.exists()
        assert sh(repo, "rev-list", "--count", f"main..{info['branch']}") == "1\n"

        for refused in ({"kind": "diff"}, {"kind": "merge"}):
            with pytest.raises(UnsupportedOperationError, match="was changed"):
                await a2a.send(user_message(context_id=first.context_id, data=refused))
        await a2a.send(user_message(context_id=first.context_id, data={"kind": "discard"}))
        assert not followed.exists() and not filtered.exists()
        assert not path.exists()
    finally:
        server.stop()
