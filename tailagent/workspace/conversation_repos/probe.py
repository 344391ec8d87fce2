"""Whether a directory can isolate conversations in worktrees, and if not, why: asked at
the server's start (to say why it runs shared) and before each worktree is made, with no
state of its own, so it stands apart from the worktrees it guards."""

from __future__ import annotations

from pathlib import Path

from tailagent.workspace.conversation_repos.plumbing.fs import is_dir, resolved
from tailagent.workspace.conversation_repos.plumbing.gitdirs import in_progress
from tailagent.workspace.git import GitError, git, one_line


async def _toplevel(repo: Path) -> Path:
    result = await git(repo, "rev-parse", "--show-toplevel")
    return Path(result.out.strip())


async def probe(repo: Path) -> str | None:
    """None when `repo` can isolate conversations in worktrees; else the one-line reason
    it cannot (so the server can say why it runs shared).

    Isolation needs the top level of a non-bare work tree (a subdirectory would isolate
    its whole enclosing repository, which is rarely what was meant: think of a home
    directory kept in git) on a branch with at least one commit, with nobody's rebase or
    merge half-done in it (there is nothing clean to branch from or merge back into).
    """
    if not is_dir(repo):
        return "not a git repository (no such directory)"
    try:
        result = await git(
            repo,
            "rev-parse",
            "--is-bare-repository",
            "--is-inside-work-tree",
            "--absolute-git-dir",
            ok=(0, 128),
        )
    except GitError as error:
        return str(error)
    if result.code != 0:
        if "not a git repository" in result.err:
            return "not a git repository"
        return f"git cannot use it: {one_line(result.err.removeprefix('fatal: '))}"
    lines = result.out.splitlines()
    if lines[0] == "true":
        return "a bare repository (no work tree to branch from)"
    if lines[1] != "true":
        return "not a git work tree (inside a .git directory)"
    top = await _toplevel(repo)
    if resolved(top) != resolved(repo):
        return f"a subdirectory of the git repository at {top} (isolation needs its top level)"
    doing = in_progress(Path(lines[2]))
    if doing:
        return f"{doing} in progress in the repository (finish or abort it first)"
    head = await git(repo, "symbolic-ref", "-q", "HEAD", ok=(0, 1))
    if head.code != 0:
        return "detached HEAD (no branch to merge back into)"
    branch = head.out.strip()
    tip = await git(repo, "rev-parse", "--verify", "-q", f"{branch}^{{commit}}", ok=(0, 1))
    if tip.code != 0:
        return f"no commits yet on {branch.removeprefix('refs/heads/')} (nothing to branch from)"
    return None
