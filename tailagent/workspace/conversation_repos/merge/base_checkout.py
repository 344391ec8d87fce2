"""The base branch's side of a merge: where it is checked out, and moving it to the merged
commit without ever touching a person's work.

A checkout of the base is only fast-forwarded when it is clean (git itself refuses rather
than overwrite a file); a base checked out nowhere moves by a compare-and-swap of its ref.
Every refusal leaves the base branch, its working tree and its index as they were.
"""

from __future__ import annotations

from pathlib import Path

from tailagent.workspace.conversation_repos.merge.commit import Strategy
from tailagent.workspace.conversation_repos.plumbing.errors import MergeRefused
from tailagent.workspace.conversation_repos.plumbing.gitdirs import in_progress, rebasing
from tailagent.workspace.conversation_repos.plumbing.porcelain import listing, status_paths, unique
from tailagent.workspace.conversation_repos.plumbing.repository import WorkspaceRepo
from tailagent.workspace.conversation_repos.records import Worktree
from tailagent.workspace.git import git, one_line


async def base_checkout(repo: WorkspaceRepo, base: str) -> Path | None:
    """Where the base branch is checked out: the workspace's own checkout (then it must
    be clean), or nowhere (None). Anywhere else is refused: that worktree's files would
    silently fall behind its branch. So is a base someone is rebasing."""
    main = await repo.main()
    top = main.work_tree.resolve()
    ref = f"refs/heads/{base}"
    found: Path | None = None
    for checkout in await repo.checkouts():
        if checkout.branch != ref:
            continue
        if checkout.path.resolve() != top:
            raise MergeRefused(
                f"{base} is checked out in another worktree, {checkout.path}: merge there "
                f"or switch that worktree to another branch, then merge again"
            )
        found = top
    rebased = rebasing(Path(await repo.common_dir()), ref)
    if rebased is not None:
        raise MergeRefused(
            f"someone is rebasing {base} ({rebased}): finish or abort that rebase, then merge again"
        )
    if found is not None:
        doing = in_progress(main.git_dir)
        if doing:
            raise MergeRefused(
                f"{doing} is in progress in {found}: finish or abort it, then merge again"
            )
        dirty = await git(
            await repo.content(main), "status", "--porcelain", "-z", "--untracked-files=no"
        )
        files = unique(status_paths(dirty.out))
        if files:
            raise MergeRefused(
                f"{base} is checked out in {found} with uncommitted changes "
                f"({listing(files)}): commit or stash them yourself, then merge again"
            )
    return found


async def advance(
    repo: WorkspaceRepo,
    worktree: Worktree,
    checkout: Path | None,
    old: str,
    new: str,
    strategy: Strategy,
) -> None:
    """Moves the base branch from `old` to `new`: in its (clean) checkout by a
    fast-forward, which git itself refuses rather than overwrite a file; elsewhere by
    a compare-and-swap of the ref, refused if someone moved it meanwhile."""
    base = worktree.base_branch
    moved = MergeRefused(
        f"{base} moved while merging {worktree.branch}; nothing was changed: merge again"
    )
    main = await repo.main()
    if checkout is None:
        result = await git(
            main,
            "update-ref",
            "-m",
            f"tailagent: {strategy} {worktree.branch}",
            f"refs/heads/{base}",
            new,
            old,
            ok=(0, 1, 128),
        )
        if result.code != 0:
            raise moved
        return
    result = await git(
        await repo.content(main), "merge", "-q", "--ff-only", "--no-autostash", new, ok=(0, 1, 128)
    )
    if result.code == 0:
        return
    files = [line.strip() for line in result.err.splitlines() if line.startswith("\t")]
    if files:
        raise MergeRefused(
            f"merging into {base} would overwrite files in {checkout} that are "
            f"not committed ({listing(files)}); nothing was changed: move or "
            "commit them, then merge again"
        )
    if "fast-forward" in result.err.lower():
        raise moved
    raise MergeRefused(
        f"updating {base} in {checkout} failed; nothing was changed: {one_line(result.err)}"
    )
