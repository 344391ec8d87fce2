"""No file an agent writes in its directory becomes a command tailagent's own git runs.

An agent may write any file of its directory without asking (Claude Code's `acceptEdits`,
the echo agent's `edit:PATH`), `.git` and `.gitattributes` included; and `.git` is its
conversation's own repository, config, hooks and all. Each test plants one way such a
file could make git start a program (its own config setting `core.fsmonitor`,
`core.hooksPath`, signing or a mailmap; a `.git` file naming a git dir whose config does;
a `.gitattributes` sending files through a filter, diff or merge driver the person's
config defines), or the person's own hooks, then runs everything tailagent runs there
(turn commits, status, diff, merge, discard) and checks that no marker file was made.
`workspace.git_programs` brings the person's hooks and drivers back, never the agent's.
The last test does it through a real server and the echo agent. (What a merge's fetch
from the conversation's repository could run: tests/test_conversation_repos.py.)
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest
from a2a.utils.errors import UnsupportedOperationError
from google.protobuf.json_format import MessageToDict

from tailagent.workspace import ConversationRepos, GitError, MergeConflict
from tailagent.workspace.conversation_repos import WorktreeTampered
from tests import test_worktrees
from tests.a2a_helpers import A2A, user_message
from tests.conftest import start_server
from tests.test_isolation import worktree_path
from tests.test_worktrees import PERSON, TRAILERS, commit_all, has, lines, read, sh, write

# The worktree tests' fixtures: a throwaway repository, its ConversationRepos, no git identity.
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


async def merge_all_ways(wts: ConversationRepos, repo: Path) -> None:
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
    wts = ConversationRepos(repo, tmp_path / "state" / "worktrees")
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
    wts = ConversationRepos(repo, tmp_path / "state" / "worktrees", git_programs=True)
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


# ---- the agent's own config, and a .git that names another git dir ----------------------


def agents_config(worktree: Path, variant: str, marker: Path) -> None:
    """What the agent can write in its own repository's config to have a program run: the
    fsmonitor, hooks (every hook, in its own `.git/hooks`), or signing and mailmap."""
    git_dir = worktree / ".git"
    if variant == "core.fsmonitor":
        sh(worktree, "config", "core.fsmonitor", touch(marker))
    elif variant == "core.hooksPath":
        for name in HOOKS:
            write(git_dir / "hooks" / name, f"#!/bin/sh\n{touch(marker)}\n")
            (git_dir / "hooks" / name).chmod(0o755)
        sh(worktree, "config", "core.hooksPath", str(git_dir / "hooks"))
    else:  # a signed commit (a rebase's), a shown signature, a mailmap read
        program = git_dir / "gpg"
        write(program, f"#!/bin/sh\n{touch(marker)}\nexit 1\n")
        program.chmod(0o755)
        for key, value in (("commit.gpgSign", "true"), ("gpg.program", str(program)),
                           ("log.showSignature", "true"), ("gc.auto", "1"),
                           ("diff.external", str(program))):  # fmt: skip
            sh(worktree, "config", key, value)


@pytest.mark.parametrize("variant", ["core.fsmonitor", "core.hooksPath", "signing"])
async def test_the_agents_own_config_runs_nothing(
    repo: Path, wts: ConversationRepos, tmp_path: Path, variant: str
) -> None:
    """Its config is the agent's to write (it is not refused): every setting that could run
    a program is overridden on each of tailagent's calls."""
    marker = tmp_path / "marker"
    worktree = await wts.ensure("ctx")
    agents_config(worktree.path, variant, marker)
    write(worktree.path / "a.txt", lines(10, {9: "the agent's line 9"}))
    assert await wts.commit_turn("ctx", "first", TRAILERS)
    write(worktree.path / "b.txt", "not committed\n")
    assert (await wts.status("ctx")).files == ["a.txt", "b.txt"]
    assert "+not committed" in await wts.diff("ctx")
    assert await wts.commit_turn("ctx", "second", TRAILERS)
    assert len((await wts.would_lose("ctx")).commits_lost) == 2  # its log, signatures off
    person_commits_beside(repo)
    await wts.merge("ctx", "rebase")  # replayed in the conversation's own repository
    assert read(repo / "b.txt") == "not committed\n"
    await wts.aclose()
    assert not marker.exists()


def person_commits_beside(repo: Path) -> None:
    write(repo / "person.txt", "the person's\n")
    person_commits(repo, "the person goes on")


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
    repo: Path, wts: ConversationRepos, tmp_path: Path, variant: str
) -> None:
    marker = tmp_path / "marker"
    worktree = await wts.ensure("ctx")
    write(worktree.path / "a.txt", "the first turn\n")
    assert await wts.commit_turn("ctx", "first", TRAILERS)
    tip = sh(worktree.path, "rev-parse", worktree.branch).strip()
    plant_git_dir(worktree.path, variant, marker)
    (worktree.path / ".git").rename(worktree.path / "own")  # kept, but not where git looks
    write(worktree.path / ".git", "gitdir: evilgit\n")
    write(worktree.path / "a.txt", "the second turn\n")

    with pytest.raises(WorktreeTampered) as tampered:
        await wts.commit_turn("ctx", "second", TRAILERS)
    message = str(tampered.value)
    assert f"the .git of the worktree {worktree.path} was changed" in message
    assert "nothing there is committed" in message and "\n" not in message
    assert not marker.exists()
    own = ("--git-dir", str(worktree.path / "own"))
    assert sh(worktree.path, *own, "rev-parse", worktree.branch).strip() == tip
    for attempt in (wts.status, wts.diff, wts.merge):
        with pytest.raises(WorktreeTampered):
            await attempt("ctx")
        assert not marker.exists()
    assert not has(repo, tip)
    lost = await wts.discard("ctx")  # what it holds cannot be read: nothing is said lost
    assert lost.files_uncommitted == [] and lost.commits_lost == []
    await wts.aclose()
    assert not marker.exists() and not worktree.path.exists()
    assert "tailagent" not in sh(repo, "worktree", "list") + sh(repo, "branch")


async def test_a_dot_git_gone_or_made_anew_is_refused(repo: Path, wts: ConversationRepos):
    worktree = await wts.ensure("ctx")
    shutil.rmtree(worktree.path / ".git")
    write(worktree.path / "a.txt", "changed\n")
    with pytest.raises(WorktreeTampered, match=r"there is no \.git"):
        await wts.commit_turn("ctx", "edit", [])
    sh(worktree.path, "init", "-q")  # the agent's own repository, in its directory
    with pytest.raises(GitError, match="not on its branch tailagent/ctx"):
        await wts.commit_turn("ctx", "edit", [])
    assert sh(worktree.path, "log", "--all", "--oneline", check=False) == ""
    await wts.discard("ctx")
    await wts.aclose()
    assert not worktree.path.exists()


# ---- drivers the agent's .gitattributes names -----------------------------------------


async def test_drivers_named_in_gitattributes_do_not_run(
    repo: Path, wts: ConversationRepos, tmp_path: Path
) -> None:
    """The person's config defines a filter, a long-running filter process, a diff and a
    merge driver (as Git LFS or a merge helper would), and so does the agent's own (its
    repository's config is its to write); the agent's `.gitattributes` sends its files
    through them."""
    marker = tmp_path / "marker"
    drivers = (
        ("filter.evil.clean", f"{touch(marker)}; cat"),
        ("filter.evil.smudge", f"{touch(marker)}; cat"),
        ("filter.evil.required", "true"),
        ("filter.evilproc.process", touch(marker)),
        ("diff.evil.textconv", f"{touch(marker)}; cat"),
        ("diff.evil.command", f"{touch(marker)}; true"),
        ("merge.evil.driver", f"{touch(marker)}; false"),
    )
    for key, value in drivers:
        sh(repo, "config", key, value)
    worktree = await wts.ensure("ctx")
    for key, value in drivers:
        sh(worktree.path, "config", key, value)
    write(
        worktree.path / ".gitattributes",
        "* filter=evil diff=evil merge=evil\np.dat filter=evilproc\n",
    )
    write(worktree.path / "p.dat", "data\n")
    assert await wts.commit_turn("ctx", "attributes", TRAILERS)
    assert not marker.exists()
    assert sh(worktree.path, "show", f"{worktree.branch}:p.dat") == "data\n"  # as it is
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

        path = worktree_path(server.state_dir, info["branch"])
        sh(path, "config", "core.fsmonitor", touch(followed))  # its own config: the agent's
        other = await a2a.turn("the other's secret\nedit:secret.txt")
        other_info = MessageToDict((await a2a.get(other.task_id)).metadata)["worktree"]
        others = worktree_path(server.state_dir, other_info["branch"]) / ".git" / "objects"
        # The first conversation's agent points its alternates at the other's objects.
        second = await a2a.turn(
            user_message(
                f"{others}\nedit:.git/objects/info/alternates", context_id=first.context_id
            )
        )
        assert second.final_state == "failed"  # its work not committed: the person must act
        error = MessageToDict((await a2a.get(second.task_id)).metadata)["worktree"]["error"]
        assert "was changed" in error and "nothing there is committed" in error
        assert "alternates" in error
        assert not followed.exists()
        assert sh(path, "rev-list", "--count", f"main..{info['branch']}") == "1\n"

        for refused in ({"kind": "diff"}, {"kind": "merge"}):
            with pytest.raises(UnsupportedOperationError, match="was changed"):
                await a2a.send(user_message(context_id=first.context_id, data=refused))
        await a2a.send(user_message(context_id=first.context_id, data={"kind": "discard"}))
        assert not followed.exists() and not filtered.exists()
        assert not path.exists()
        assert not has(repo, other_info["commit"])  # the other's commit: still its own
    finally:
        server.stop()
