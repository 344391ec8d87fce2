"""A commit per turn on the conversation's branch, whose trailers say who asked and who
allowed what, so `git log` says who is behind every change.

The message is written here rather than by `git commit --trailer` (which would run any
`trailer.<key>.cmd` a config names); its subject rules are shared with the message of a
squash merge, and the check that a worktree is on its own branch with nothing half-done
guards a merge as it guards a turn's commit.
"""

from __future__ import annotations

import re

from tailagent.workspace.conversation_repos.lock import WorktreeLock
from tailagent.workspace.conversation_repos.plumbing.gitdirs import in_progress
from tailagent.workspace.conversation_repos.plumbing.repository import WorkspaceRepo
from tailagent.workspace.conversation_repos.records import Records, Worktree
from tailagent.workspace.git import GitError, Repository, git, one_line

SUBJECT_LIMIT = 72
_TRAILER_KEY = re.compile(r"[A-Za-z0-9][A-Za-z0-9-]*")


def clip(line: str) -> str:
    """`line` cut with an ellipsis to fit a commit subject."""
    if len(line) > SUBJECT_LIMIT:
        line = line[: SUBJECT_LIMIT - 1].rstrip() + "…"
    return line


def turn_subject(text: str) -> str:
    """A commit subject from a prompt: its first non-blank line, blanks folded, at most
    72 characters (cut with an ellipsis), never empty."""
    for line in text.splitlines():
        line = one_line(line)
        if line:
            break
    else:
        return "tailagent turn"
    return clip(line)


def commit_message(subject: str, trailers: list[tuple[str, str]]) -> str:
    """A turn commit's message: its subject, then its trailers (a trailer just like the one
    before it only once, as git writes them). Written here rather than by `git commit
    --trailer`, which would also run any `trailer.<key>.cmd` a config names."""
    lines: list[str] = []
    for key, value in trailers:
        key = key.strip()
        if not _TRAILER_KEY.fullmatch(key):
            raise GitError(f"{key!r} cannot be a commit trailer's name")
        line = f"{key}: {one_line(value)}"
        if not lines or lines[-1] != line:
            lines.append(line)
    return "\n\n".join([turn_subject(subject), *(["\n".join(lines)] if lines else [])]) + "\n"


async def check_worktree(worktree: Worktree, own: Repository) -> None:
    """Refuses to commit or merge from a worktree that is not on its branch or is in
    the middle of the agent's own rebase or merge."""
    doing = in_progress(own.git_dir)
    if doing:
        raise GitError(
            f"{doing} is in progress in conversation {worktree.context_id}'s worktree "
            f"({worktree.path}): ask the agent to finish or abort it"
        )
    head = await git(own, "symbolic-ref", "-q", "HEAD", ok=(0, 1))
    if head.out.strip() != f"refs/heads/{worktree.branch}":
        where = head.out.strip().removeprefix("refs/heads/") or "a detached HEAD"
        raise GitError(
            f"conversation {worktree.context_id}'s worktree is on {where}, not on its "
            f"branch {worktree.branch}: ask the agent to `git switch {worktree.branch}`"
        )


class TurnCommits:
    """Commits the turns of the conversations of `repo`."""

    def __init__(self, repo: WorkspaceRepo, records: Records, lock: WorktreeLock) -> None:
        self.repo = repo
        self.records = records
        self.lock = lock

    async def commit(
        self, context_id: str, subject: str, trailers: list[tuple[str, str]]
    ) -> str | None:
        """Commits everything the turn changed in the conversation's worktree (tracked or
        not, .gitignore respected) with `subject` and `trailers` (who asked, who allowed
        what, the task and context), so `git log` says who is behind every change.

        Returns the commit's sha, or None when nothing changed; WorktreeTampered (nothing
        committed) when the worktree's `.git` could steer git elsewhere (plumbing/guard.py). The
        commit is made in the conversation's own repository. The agent's own commits stay as
        they are. No hooks run (unless `git_programs`), pre-commit and commit-msg never
        (`--no-verify`), and the commit is not signed: this is a checkpoint on tailagent's
        own branch, not the person's commit (a failing linter hook must not stop the
        record of who asked for what); what lands on the person's branch is decided when
        they merge it.

        Under the conversation's lock only: another conversation's turn never waits for
        this one's git (lock.py). A special file in the worktree (plumbing/specials.py) or a
        git that does not finish by its deadline (git.py) fails it with GitError.
        """
        async with self.lock.conversation(self.records.slug(context_id)):
            worktree = await self.records.require(context_id)
            own = await self.repo.conversation(worktree.path)
            if not await self.repo.uncommitted(own, refresh=True):
                return None
            await check_worktree(worktree, own)
            message = commit_message(subject, trailers)
            await git(own, "add", "-A")
            await git(
                own,
                *await self.repo.identity(),
                "commit",
                "-q",
                "--no-verify",
                "--no-gpg-sign",
                "--cleanup=whitespace",
                "-F",
                "-",
                input=message,
            )
            head = await git(own, "rev-parse", "HEAD")
            return head.out.strip()
