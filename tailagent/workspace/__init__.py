"""Workspace isolation: a repository of its own and a branch per conversation
(conversation_repos/), and the one way tailagent runs git (git.py)."""

from tailagent.workspace.conversation_repos import (
    ConversationRepos,
    DiscardResult,
    MergeConflict,
    MergeRefused,
    MergeResult,
    NoWorktree,
    Strategy,
    Worktree,
    WorktreeDeleted,
    WorktreeStatus,
    probe,
    turn_subject,
)
from tailagent.workspace.git import GitError, GitResult, git

__all__ = [
    "ConversationRepos",
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
    "git",
    "probe",
    "turn_subject",
]
