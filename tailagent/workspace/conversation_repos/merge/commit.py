"""The commit a merge lands, built from the conversation's branch: the message of a squash
or merge commit (the turns' subjects and trailers gathered, read by the base's git from a
merge's scratch repository), and a rebase replayed in the conversation's own repository.
Nothing here touches the base branch or a person's checkout.
"""

from __future__ import annotations

from typing import Literal

from tailagent.workspace.conversation_repos.plumbing.errors import MergeConflict, MergeRefused
from tailagent.workspace.conversation_repos.plumbing.porcelain import split_z, unique
from tailagent.workspace.conversation_repos.records import Worktree
from tailagent.workspace.conversation_repos.turns import clip
from tailagent.workspace.git import Repository, git, one_line

Strategy = Literal["squash", "merge", "rebase"]
STRATEGIES: tuple[Strategy, ...] = ("squash", "merge", "rebase")


async def message(
    main: Repository, worktree: Worktree, strategy: Strategy, base_tip: str, tip: str
) -> str:
    """The message of the squash or merge commit of `base_tip..tip`: a subject, the turns'
    subjects as a list, and their trailers (each once), so who asked stays on the base."""
    log_lines = await git(
        main,
        "log",
        "--reverse",
        "--no-merges",
        "-z",
        "--format=%s%x1f%(trailers:only,unfold)",
        f"{base_tip}..{tip}",
    )
    subjects: list[str] = []
    trailers: list[str] = []
    for entry in split_z(log_lines.out):
        subject, _, block = entry.partition("\x1f")
        subjects.append(subject.strip())
        trailers += [line.strip() for line in block.splitlines() if line.strip()]
    trailers = unique(trailers)
    if strategy == "merge":
        head = f"Merge branch '{worktree.branch}' into {worktree.base_branch}"
    else:
        head = clip(
            "tailagent: " + (subjects[0] if subjects else f"conversation {worktree.context_id}")
        )
    parts = [head]
    if subjects:
        parts.append("\n".join(f"- {subject}" for subject in subjects))
    if trailers:
        parts.append("\n".join(trailers))
    return "\n\n".join(parts) + "\n"


async def rebase(
    worktree: Worktree, own: Repository, base_tip: str, tip: str, identity: list[str]
) -> str:
    """Replays the branch onto the base tip in the conversation's own repository (the
    base's commits are there through its alternates); on a conflict aborts (the worktree
    is as it was) and raises MergeConflict."""
    result = await git(
        own.slow(),
        *identity,
        "-c",
        "rebase.autoStash=false",
        "rebase",
        "-q",
        "--no-autosquash",
        "--no-update-refs",
        "--no-verify",
        "--no-gpg-sign",
        base_tip,
        ok=(0, 1),
    )
    if result.code != 0:
        conflicted = await git(own, "diff", "--name-only", "-z", "--diff-filter=U")
        await git(own, "rebase", "--abort")
        paths = unique(split_z(conflicted.out))
        if not paths:
            raise MergeRefused(
                f"rebasing {worktree.branch} onto {worktree.base_branch} failed and was "
                f"undone: {one_line(result.err or result.out)}"
            )
        raise MergeConflict.between(worktree.branch, worktree.base_branch, paths)
    new = (await git(own, "rev-parse", "HEAD")).out.strip()
    if new == base_tip:
        await git(own, "reset", "-q", "--hard", tip)
        raise MergeRefused(
            f"nothing to merge: {worktree.base_branch} already has every change on "
            f"{worktree.branch}"
        )
    return new
