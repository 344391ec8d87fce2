"""Each conversation's repository is its own: another conversation cannot read its commits.

A conversation's directory is a git repository that borrows the person's objects
(alternates) and keeps its own commits, objects and refs, so that from one conversation
(and from its sandbox, which sees only its directory and the person's objects) another's
commits cannot be read, and the person's repository holds none until a merge. These tests
check that from the outside with git itself (and inside a bubblewrap fence like the
agent's, where the machine has one); that an agent rewriting its `.git` to point at
another conversation's objects gets tailagent to read or merge none of them; that a
merge's fetch from the conversation's repository runs nothing its config names; and that
an older tailagent's `git worktree`s are converted in place.
"""

from __future__ import annotations

import asyncio
import json
import logging
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from google.protobuf.json_format import MessageToDict

from tailagent.workspace import ConversationRepos, GitError
from tailagent.workspace.conversation_repos import WorktreeTampered
from tests import test_worktrees
from tests.a2a_helpers import A2A
from tests.conftest import start_server
from tests.test_git_injection import HOOKS, touch
from tests.test_isolation import make_project, worktree_path
from tests.test_worktrees import PERSON, TRAILERS, commit_all, has, lines, read, sh, write

# The worktree tests' fixtures: a throwaway repository, its ConversationRepos, no git identity.
no_identity = test_worktrees.no_identity
repo = test_worktrees.repo
wts = test_worktrees.wts


def objects_dir(path: Path) -> Path:
    return path / ".git" / "objects"


def loose(objects: Path, sha: str) -> Path:
    return objects / sha[:2] / sha[2:]


def found_anywhere(under: Path, sha: str) -> list[Path]:
    """Every loose object file of `sha` under `under` (a pack would name it in its .idx:
    none is written by these few commits)."""
    return [p for p in under.rglob(sha[2:]) if p.parent.name == sha[:2]]


def fenced(directory: Path, shared: tuple[Path, ...], *args: str) -> subprocess.CompletedProcess:
    """`git *args` in `directory` inside a bubblewrap fence like a conversation's: the
    system read-only, a private /tmp, only `directory` writable, and the object stores
    it borrows read-only; nothing else of the machine's files (its siblings included)."""
    if shutil.which("bwrap") is None:
        pytest.skip("bubblewrap is not installed")
    argv = ["bwrap", "--ro-bind", "/usr", "/usr", "--ro-bind", "/etc", "/etc"]
    for name in ("bin", "lib", "lib64", "sbin"):
        target = Path("/") / name
        if target.is_symlink():
            argv += ["--symlink", os.readlink(target), str(target)]
        elif target.exists():
            argv += ["--ro-bind", str(target), str(target)]
    argv += ["--proc", "/proc", "--dev", "/dev", "--tmpfs", "/tmp"]
    argv += ["--bind", str(directory), str(directory)]
    for objects in shared:
        argv += ["--ro-bind", str(objects), str(objects)]
    argv += ["--chdir", str(directory), "--unshare-all", "--die-with-parent"]
    argv += ["--setenv", "HOME", "/tmp", "--setenv", "GIT_CONFIG_NOSYSTEM", "1"]
    done = subprocess.run([*argv, "git", *args], capture_output=True, text=True)
    if "bwrap:" in done.stderr and done.returncode == 1 and "git" not in done.stderr:
        pytest.skip(f"bubblewrap cannot make a fence here: {done.stderr.strip()}")
    return done


# ---- through a real server --------------------------------------------------------------


def run_git(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(["git", *args], capture_output=True, text=True)


async def test_one_conversation_cannot_read_anothers_commits_until_merged(tmp_path: Path):
    repo = tmp_path / "workspace"
    make_project(repo)
    server = start_server(tmp_path, "--isolation", "worktree")
    try:
        a2a = A2A(server.url, server.token)
        alice, bob = await asyncio.gather(
            a2a.turn("alice's secret\nedit:secret.txt"), a2a.turn("bob's notes\nedit:notes.txt")
        )
        commits, paths = {}, {}
        for name, turn in (("alice", alice), ("bob", bob)):
            info = MessageToDict((await a2a.get(turn.task_id)).metadata)["worktree"]
            commits[name], paths[name] = (
                info["commit"],
                worktree_path(server.state_dir, info["branch"]),
            )
        secret, bobs = commits["alice"], paths["bob"]

        # From Bob's repository, by name: Alice's commit is nowhere to be read.
        listed = run_git(f"--git-dir={bobs / '.git'}", "log", "--all", "--format=%H")
        assert listed.returncode == 0 and commits["bob"] in listed.stdout
        assert secret not in listed.stdout
        shown = run_git(f"--git-dir={bobs / '.git'}", "cat-file", "-p", secret)
        assert shown.returncode != 0 and "secret" not in shown.stdout
        # Its object files are in Alice's directory alone: not Bob's, not the person's.
        assert loose(objects_dir(paths["alice"]), secret).is_file()
        assert found_anywhere(bobs, secret) == [] and found_anywhere(repo / ".git", secret) == []
        assert not has(repo, secret) and not has(repo, commits["bob"])
        assert sh(repo, "for-each-ref", "refs/heads/tailagent") == ""

        # From inside a fence like Bob's agent's: its git works, Alice's commit is not there.
        shared = (repo.resolve() / ".git" / "objects",)
        status = fenced(bobs, shared, "status", "--porcelain")
        assert status.returncode == 0 and status.stdout == "", status.stderr
        inside = fenced(bobs, shared, "cat-file", "-p", secret)
        assert inside.returncode != 0
        assert fenced(bobs, shared, "log", "-1", "--format=%H").stdout.strip() == commits["bob"]

        # A merge brings Alice's commit into the person's repository, and only then.
        merged = await asyncio.to_thread(
            subprocess.run,
            [sys.executable, "-m", "tailagent", "merge", alice.context_id, "--merge", "--yes",
             "--state-dir", str(server.state_dir)], capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert merged.returncode == 0, merged.stderr
        assert has(repo, secret) and secret in sh(repo, "log", "--format=%H", "main")
        assert read(repo / "secret.txt") == "alice's secret\n"
        assert not has(repo, commits["bob"])  # Bob's is still his alone
    finally:
        server.stop()


# ---- an agent that points its .git at another conversation ------------------------------


def tamper(bob: Path, alice: Path, branch: str, secret: str, how: str) -> None:
    """What Bob's agent could write in its own `.git` to have tailagent read Alice's commit
    `secret` (whose directory it would have to guess: it cannot see it)."""
    git_dir = bob / ".git"
    alices = objects_dir(alice)
    if how == "alternates":
        with (git_dir / "objects" / "info" / "alternates").open("a") as file:
            file.write(f"{alices}\n")
        sh(bob, "update-ref", f"refs/heads/{branch}", secret)
    elif how == "commondir":
        write(git_dir / "commondir", f"{alice / '.git'}\n")
    elif how == "symlinked ref":
        (git_dir / "refs" / "heads" / branch).unlink()
        (git_dir / "refs" / "heads" / branch).symlink_to(alice / ".git" / "refs" / "heads" / "x")
    elif how == "symlinked objects":
        fan = git_dir / "objects" / secret[:2]
        shutil.rmtree(fan, ignore_errors=True)
        fan.symlink_to(alices / secret[:2])
        write(git_dir / "refs" / "heads" / branch, f"{secret}\n")
    elif how == "gitfile":
        (git_dir).rename(bob / "own")
        write(bob / ".git", f"gitdir: {alice / '.git'}\n")
    elif how == "include":
        with (git_dir / "config").open("a") as file:
            file.write(f"[include]\n\tpath = {alice / '.git' / 'config'}\n")


@pytest.mark.parametrize(
    "how",
    ["alternates", "commondir", "symlinked ref", "symlinked objects", "gitfile", "include"],
)
async def test_a_git_dir_pointed_at_another_conversation_is_refused(
    repo: Path, wts: ConversationRepos, how: str
) -> None:
    alice = await wts.ensure("alice-1")
    write(alice.path / "secret.txt", "alice's secret\n")
    secret = await wts.commit_turn("alice-1", "secret", TRAILERS)
    assert secret is not None
    bob = await wts.ensure("bob-2")
    write(bob.path / "notes.txt", "bob's\n")
    assert await wts.commit_turn("bob-2", "notes", TRAILERS)
    tamper(bob.path, alice.path, bob.branch, secret, how)
    write(bob.path / "more.txt", "more\n")

    for attempt in (
        lambda: wts.commit_turn("bob-2", "more", TRAILERS),
        lambda: wts.status("bob-2"),
        lambda: wts.diff("bob-2"),
        lambda: wts.merge("bob-2", "merge"),
    ):
        with pytest.raises(WorktreeTampered) as refused:
            await attempt()
        assert "\n" not in str(refused.value)
    assert not has(repo, secret) and "secret.txt" not in sh(repo, "ls-files")
    lost = await wts.would_lose("bob-2")  # nothing read from there either
    assert lost.commits_lost == [] and lost.files_uncommitted == []
    await wts.discard("bob-2")
    await wts.aclose()
    # Alice's repository was only ever pointed at, never changed.
    assert sh(alice.path, "log", "-1", "--format=%H").strip() == secret
    assert sh(alice.path, "status", "--porcelain") == ""


async def test_alternates_put_back_as_they_were_are_trusted_again(
    repo: Path, wts: ConversationRepos
):
    worktree = await wts.ensure("ctx")
    alternates = worktree.path / ".git" / "objects" / "info" / "alternates"
    written = alternates.read_text()
    assert written == f"{(repo / '.git' / 'objects').resolve()}\n"
    assert wts.shared_objects() == ((repo / ".git" / "objects").resolve(),)
    alternates.write_text(written + "/elsewhere/objects\n")
    with pytest.raises(WorktreeTampered, match="alternates"):
        await wts.status("ctx")
    alternates.write_text(written)
    assert (await wts.status("ctx")).files == []


# ---- a merge's fetch runs nothing the conversation's config names ------------------------


def plant_upload_pack(worktree: Path, marker: Path) -> None:
    """Every setting of the conversation's own config that upload-pack (run by the merge's
    fetch in its repository) or a lazy fetch from it could take for a program to run."""
    git_dir = worktree / ".git"
    for name in (*HOOKS, "pre-upload-pack", "post-upload-pack"):
        write(git_dir / "hooks" / name, f"#!/bin/sh\n{touch(marker)}\n")
        (git_dir / "hooks" / name).chmod(0o755)
    for key, value in (
        ("core.fsmonitor", touch(marker)),
        ("core.hooksPath", str(git_dir / "hooks")),
        ("uploadpack.packObjectsHook", f"{touch(marker)}; "),
        ("core.alternateRefsCommand", touch(marker)),
        ("core.sshCommand", touch(marker)),
        ("core.gitProxy", touch(marker)),
        ("remote.origin.url", f"ext::sh -c {touch(marker).replace(' ', '% ')}"),
        ("remote.origin.promisor", "true"),
        ("extensions.partialClone", "origin"),
        ("core.repositoryFormatVersion", "1"),
        ("protocol.allow", "always"),
        ("uploadpack.allowFilter", "true"),
    ):
        sh(worktree, "config", key, value)


@pytest.mark.parametrize("strategy", ["squash", "merge", "rebase"])
async def test_a_merge_runs_nothing_the_conversations_config_names(
    repo: Path, wts: ConversationRepos, tmp_path: Path, strategy: str
) -> None:
    marker = tmp_path / "marker"
    worktree = await wts.ensure("ctx")
    write(worktree.path / "a.txt", lines(10, {9: "the agent's line 9"}))
    tip = await wts.commit_turn("ctx", "line 9", TRAILERS)
    assert tip is not None
    plant_upload_pack(worktree.path, marker)
    merged = await wts.merge("ctx", strategy)  # type: ignore[arg-type]
    assert read(repo / "a.txt") == lines(10, {9: "the agent's line 9"})
    assert has(repo, merged.commit) and has(repo, tip) == (strategy != "squash")
    await wts.aclose()
    assert not marker.exists()
    assert list((wts.root / ".merging").iterdir()) == []  # the scratch repository is gone


async def test_a_missing_object_is_not_fetched_lazily_by_a_merge(
    repo: Path, wts: ConversationRepos, tmp_path: Path
) -> None:
    """A promisor remote in the conversation's config: the object the merge needs is not
    there, and a lazy fetch would run the remote's command. It is refused, nothing runs
    and the person's repository is as it was. (A git with the fixes of 2.45.1, backported
    to 2.39.5 among others, refuses lazy fetches in upload-pack itself; for an older one,
    upload-pack's own `-c protocol.allow=never` does.)"""
    marker = tmp_path / "marker"
    worktree = await wts.ensure("ctx")
    write(worktree.path / "new.txt", "a blob that goes missing\n")
    assert await wts.commit_turn("ctx", "new", TRAILERS)
    blob = sh(worktree.path, "rev-parse", "HEAD:new.txt").strip()
    plant_upload_pack(worktree.path, marker)
    loose(objects_dir(worktree.path), blob).unlink()
    before = test_worktrees.snapshot(repo)
    with pytest.raises(GitError):
        await wts.merge("ctx")
    assert test_worktrees.snapshot(repo) == before
    assert not has(repo, blob) and not marker.exists()


# ---- what a conversation borrows, and nothing more ---------------------------------------


async def test_a_conversations_git_works_with_only_its_directory_and_the_borrowed_objects(
    tmp_path: Path,
) -> None:
    """The person's repository itself borrows objects (it is a `clone --shared`): those are
    named too, and the conversation's git, its agent's own commit included, works in a
    fence that shows it nothing else."""
    upstream = tmp_path / "upstream"
    sh(tmp_path, "init", "-q", "-b", "main", str(upstream))
    write(upstream / "a.txt", lines(10))
    commit_all(upstream, "first")
    repo = tmp_path / "repo"
    sh(tmp_path, "clone", "-q", "--shared", str(upstream), str(repo))
    wts = ConversationRepos(repo, tmp_path / "state" / "worktrees")
    shared = wts.shared_objects()
    assert shared == (
        (repo / ".git" / "objects").resolve(),
        (upstream / ".git" / "objects").resolve(),
    )
    worktree = await wts.ensure("ctx")
    alternates = (worktree.path / ".git" / "objects" / "info" / "alternates").read_text()
    assert alternates.splitlines() == [str(objects) for objects in shared]
    write(worktree.path / "a.txt", "changed by the agent\n")
    commit = fenced(worktree.path, shared, *PERSON, "commit", "-qam", "the agent's own commit")
    assert commit.returncode == 0, commit.stderr
    log = fenced(worktree.path, shared, "log", "--format=%s")
    assert log.stdout.splitlines() == ["the agent's own commit", "first"], log.stderr
    assert (await wts.status("ctx")).ahead == 1
    assert (await wts.merge("ctx")).removed
    assert read(repo / "a.txt") == "changed by the agent\n"
    await wts.aclose()


async def test_branch_names_stay_unique_among_the_conversations(repo: Path, wts: ConversationRepos):
    """The branches are in each conversation's repository: the records keep the short
    names people use for them (`tailagent merge <short>`) apart."""
    one = await wts.ensure("abcdefgh-1")
    two = await wts.ensure("abcdefgh-2")
    assert (one.branch, two.branch) == ("tailagent/abcdefgh", "tailagent/abcdefgh-2")
    assert wts.known() == {"abcdefgh-1": "abcdefgh", "abcdefgh-2": "abcdefgh-2"}
    await wts.discard("abcdefgh-1")
    three = await wts.ensure("abcdefgh-3")
    assert three.branch == "tailagent/abcdefgh"  # free again once its conversation is gone


# ---- an older tailagent's worktrees ------------------------------------------------------


def legacy_worktree(repo: Path, root: Path, name: str, detach: bool = False) -> Path:
    """A conversation's worktree as an older tailagent made it: `git worktree add` of the
    person's repository, on a branch `tailagent/<name>` there, with its record."""
    path = root / name
    base = sh(repo, "rev-parse", "main").strip()
    on = ["--detach"] if detach else ["-b", f"tailagent/{name}"]
    sh(repo, "worktree", "add", "-q", *on, str(path), "main")
    record = {
        "context_id": "" if name.startswith("+ready-") else name,
        "path": str(path.resolve()),
        "branch": f"tailagent/{name}",
        "base_branch": "main",
        "base_commit": base,
        "created": "2025-01-01T00:00:00+00:00",
        "idle": False,
        "repository": str((repo / ".git").resolve()),
    }
    (root / f"{name}.json").write_text(json.dumps(record))
    return path


async def test_an_older_tailagents_worktrees_become_repositories_of_their_own(
    repo: Path, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    root = tmp_path / "state" / "worktrees"
    root.mkdir(parents=True)
    worked = legacy_worktree(repo, root, "worked")
    write(worked / "a.txt", lines(10, {1: "committed"}))
    commit_all(worked, "the agent's turn")
    tip = sh(worked, "rev-parse", "HEAD").strip()
    write(worked / "a.txt", lines(10, {1: "committed", 2: "not yet"}))  # changed
    write(worked / "staged.txt", "staged\n")
    sh(worked, "add", "staged.txt")  # in the index only: the index is kept
    write(worked / "untracked.txt", "untracked\n")
    status = sh(worked, "status", "--porcelain")
    ahead = legacy_worktree(repo, root, "+ready-0123456789ab", detach=True)
    # A conversion cut short: its .git file set aside, a half-made repository in its place.
    cut = legacy_worktree(repo, root, "cut")
    write(cut / "cut.txt", "kept\n")
    commit_all(cut, "a turn of its own")  # (one with no commit would be shelved at a start)
    (root / ".converting" / "cut").mkdir(parents=True)
    (cut / ".git").rename(root / ".converting" / "cut" / "gitfile")
    (cut / ".git").mkdir()
    # One whose .git the agent rewrote: left as it is, and said why.
    odd = legacy_worktree(repo, root, "odd")
    (odd / ".git").write_text("gitdir: /nowhere\n")

    caplog.set_level(logging.INFO, logger="tailagent.workspace.conversation_repos")
    wts = ConversationRepos(repo, root)
    assert await wts.prune({"worked", "cut", "odd"}) == []

    said = caplog.text
    assert f"converted the worktree {ahead.resolve()} into a repository of its own" in said
    assert not ahead.exists()  # and then removed: a start keeps no earlier run's made ahead
    for path in (worked, cut):
        assert f"converted the worktree {path.resolve()} into a repository of its own" in said
        assert (path / ".git").is_dir()
        alternates = (path / ".git" / "objects" / "info" / "alternates").read_text()
        assert alternates == f"{(repo / '.git' / 'objects').resolve()}\n"
    assert f"the worktree {odd.resolve()} of an older tailagent is left as it is" in said
    # The person's repository lost the conversations' branches and worktree entries, but
    # for the one left as it was.
    assert sh(repo, "branch", "--list", "--format=%(refname:short)", "tailagent/*") == (
        "tailagent/odd\n"
    )
    assert test_worktrees.registered(repo) == [str(repo), str(odd.resolve())]
    # Its files, its uncommitted changes and its index are as they were; its branch is
    # in its own repository; its git works with only its directory and the base's objects.
    assert sh(worked, "status", "--porcelain") == status
    assert sh(worked, "branch", "--show-current") == "tailagent/worked\n"
    assert sh(worked, "rev-parse", "HEAD").strip() == tip
    assert read(worked / "untracked.txt") == "untracked\n"
    shared = wts.shared_objects()
    fence = fenced(worked, shared, "status", "--porcelain")
    assert fence.returncode == 0 and fence.stdout == status, fence.stderr
    assert json.loads((root / "worked.json").read_text())["own_repository"] is True
    assert not (root / ".converting").exists() or list((root / ".converting").iterdir()) == []

    # And it goes on: a turn's commit, then a merge.
    assert await wts.commit_turn("worked", "the next turn", TRAILERS)
    assert (await wts.merge("worked")).removed
    assert read(repo / "staged.txt") == "staged\n"
    assert sh(repo, "log", "-1", "--format=%s", "main").startswith("tailagent: the agent's turn")
    # The one left as it was can still be discarded; its branch goes from the base then.
    await wts.discard("odd")
    await wts.aclose()
    assert sh(repo, "branch", "--list", "tailagent/*") == ""
    assert test_worktrees.registered(repo) == [str(repo)]
