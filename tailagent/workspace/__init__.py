"""Workspace isolation: a repository of its own and a branch per conversation (worktrees/)."""

from tailagent.workspace.git import GitError, GitResult, git
from tailagent.workspace.worktrees import (
    DiscardResult,
    MergeConflict,
    MergeRefused,
    MergeResult,
    NoWorktree,
    Strategy,
    Worktree,
    WorktreeDeleted,
    Worktrees,
    WorktreeStatus,
    probe,
    turn_subject,
)

__all__ = [
    "DiscardResult",
    "GitError",
    "GitResult",
    "MergeConflict",
    "MergeRefused",
    "MergeResult",
    "NoWorktree",
    "Strategy",
    "Worktree",
    "WorktreeDeleted",
    "WorktreeStatus",
    "Worktrees",
    "git",
    "probe",
    "turn_subject",
]
