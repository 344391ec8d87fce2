"""The ways a worktree operation fails or is refused, each a GitError whose str() is the
line a person reads.

Kept apart from the code that raises them: every concern (records, turns, merging,
cleanup) raises the same kinds, and the bridge catches them without learning how any
of it works.
"""

from __future__ import annotations

from pathlib import Path

from tailagent.workspace.conversation_repos.plumbing.porcelain import listing
from tailagent.workspace.git import GitError


class NoWorktree(GitError):
    """The conversation has no worktree (never had one, or it was merged or discarded)."""


class WorktreeDeleted(GitError):
    """The conversation's directory was deleted by hand, and its repository with it. It is
    not recreated silently for a merge or a diff: the person decides (`tailagent discard`)."""


class OtherRepository(GitError):
    """The conversation's record names a repository other than the one served (the state
    dir served another `--cwd` before): its worktree is left alone, and lists count it
    apart, by `repository` (its git common dir), instead of showing it unreadable."""

    def __init__(self, message: str, repository: str, idle: bool) -> None:
        super().__init__(message)
        self.repository = repository
        self.idle = idle  # it changed nothing: no branch of it to go back to


class WorktreeTampered(GitError):
    """The conversation's `.git` is not as tailagent made it in a way that could steer its
    git out of the conversation's directory (see plumbing/guard.py): git is not run there, and
    nothing is committed or merged until it is put back or the conversation discarded."""

    def __init__(self, path: Path, reason: str) -> None:
        super().__init__(
            f"the .git of the worktree {path} was changed ({reason}): tailagent's git does "
            "not use it, so nothing there is committed or merged until it is put back as "
            "tailagent made it (or the conversation is discarded)"
        )


class MergeRefused(GitError):
    """A merge was refused and nothing was changed; str() says why and what to do."""


class MergeConflict(MergeRefused):
    """The conversation's branch conflicts with its base. Nothing was changed; `paths` are
    the conflicting files and `follow_up` is the request to send the agent."""

    def __init__(self, message: str, paths: list[str], follow_up: str) -> None:
        super().__init__(message)
        self.paths = paths
        self.follow_up = follow_up

    @classmethod
    def between(cls, branch: str, base: str, paths: list[str]) -> MergeConflict:
        """The conflict of `branch` with `base` in `paths`, with what to ask the agent."""
        follow_up = (
            f"rebase your branch onto {base} and resolve the conflicts in {listing(paths, 20)}"
        )
        return cls(
            f"{branch} conflicts with {base} in {listing(paths)}; nothing was "
            f'changed. To resolve it, ask the agent: "{follow_up}"',
            paths,
            follow_up,
        )
