"""Where a conversation starts, said when it starts: the base's commit its repository is
made from, and what of the person's checkout it does not hold.

A conversation's repository is made from a commit (making.py), so what the person has
not committed (edited files, untracked ones) is not in it, and the agent works as if
they were not there. That is kept, and said, rather than the checkout's changes copied
in: a copy would take what git itself is told to leave alone (`.gitignore`d `.env`
files, keys, build output, gigabytes of data) or would have to guess which of it is
safe; the agent's first commit would then hold the person's unfinished work as its
own, and the merge back would meet those same files still uncommitted in the checkout
and be refused (merge/base_checkout.py). Committing is the one way in, and the person
decides what goes: commit, then start a new conversation.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tailagent.workspace.conversation_repos.plumbing.porcelain import listing, status_paths, unique
from tailagent.workspace.conversation_repos.plumbing.repository import WorkspaceRepo
from tailagent.workspace.conversation_repos.records import Worktree
from tailagent.workspace.git import git

SHOWN = 5  # the changes left out named in the line that says so; then how many more


@dataclass(frozen=True)
class Start:
    """A conversation's start: the branch and commit it starts from, where it works, and
    the person's checkout with the changes (paths) left out of it. `continued`: the
    conversation ran on a box that is gone, and goes on here from `commit`, its branch's
    last commit that box pushed to the team's shared repository (handover.py), or, when
    it pushed none (`shared` False), from the base as a new conversation."""

    base_branch: str
    commit: str
    folder: str
    checkout: str
    left_out: list[str]
    continued: bool = False
    shared: bool = True  # a continued one: `commit` came from the shared repository

    def text(self) -> str:
        """The line a person reads at the start: from which commit, in which folder, and
        what is not included and how to bring it."""
        if self.continued and not self.shared:
            return (
                f"Continued here, in {self.folder}, from {self.base_branch} at "
                f"{self.commit[:12]}: the box this conversation ran on stopped answering, "
                "and its branch had shared no commits. The agent starts a new session: it "
                "does not remember the earlier turns; the task history says what they did."
            )
        if self.continued:
            return (
                f"Continued here, in {self.folder}, from {self.commit[:12]}: the last commit "
                "of this conversation's branch that the box it ran on shared before it "
                "stopped answering. What was not committed there is not here, and the agent "
                "starts a new session: it does not remember the earlier turns; their "
                "commits, and the task history, say what they did."
            )
        said = f"Started from {self.base_branch} at {self.commit[:12]} in {self.folder}"
        count = len(self.left_out)
        if not count:
            return said + "."
        changes = f"{count} uncommitted change{'s' if count != 1 else ''}"
        return (
            f"{said}: its last commit, without the {changes} in {self.checkout} "
            f"({listing(self.left_out, SHOWN)}). To give {'them' if count != 1 else 'it'} "
            "to the agent, commit, then start a new conversation."
        )

    def as_data(self) -> dict[str, Any]:
        """The start as the task's metadata keeps it (`start`), for programs."""
        return {
            "base": self.base_branch,
            "commit": self.commit,
            "folder": self.folder,
            "checkout": self.checkout,
            "uncommitted": len(self.left_out),
            "leftOut": self.left_out[:SHOWN],
            **({"continued": True} if self.continued else {}),
        }


async def start_of(repo: WorkspaceRepo, worktree: Worktree) -> Start:
    """Where the conversation of `worktree`, starting now, starts: its base and commit,
    and the changes of the person's checkout (edited, staged or untracked, not ignored:
    as `git status` lists them) it does not hold."""
    main = await repo.main()
    status = await git(
        await repo.content(main),
        "status",
        "--porcelain",
        "-z",
        "--untracked-files=normal",
        "--ignore-submodules=dirty",
    )
    return Start(
        base_branch=worktree.base_branch,
        commit=worktree.base_commit,
        folder=str(worktree.shown),
        checkout=str(repo.repo),
        left_out=unique(status_paths(status.out)),
    )
