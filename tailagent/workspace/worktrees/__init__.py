"""A git worktree and branch per conversation, merged back only on request.

Conversations served at the same time must not edit one working directory: one
caller's half-finished change would land in another's test run. So each A2A context
gets its own worktree (`<root>/<context>`) on its own branch (`tailagent/<short id>`),
made from the workspace's branch at the conversation's start, and a commit per turn.

What is tailagent's is decided by a record, `<root>/<context>.json`, written before the
worktree exists and removed after it is gone: a worktree or branch without a record is
never touched, whatever its name. Merging back never touches a person's work: the
result is built in git's object store first (`git merge-tree`, `git commit-tree`), a
checkout is only fast-forwarded when it is clean, and every refusal or conflict leaves
the base branch, its working tree and its index as they were.

The agent may write any file of its worktree, `.git` included. So git is always told
which git dir a worktree has: the one git made for it, found from git's own record in the
repository (`<common dir>/worktrees/<name>/gitdir` names the worktree), never from the
worktree's `.git`. A `.git` that no longer names that git dir is reported
(WorktreeTampered) and not followed; the turn's changes are not committed.

The bridge talks to `Worktrees` (facade.py) only; each concern has its own file: records
(what is tailagent's), lock, making and ahead (the worktree made ahead and its adoption),
idle, turns (turn commits and their trailers), changes (status and diff), removal and
cleanup (discard, prune, sweep), merging, merge_commit and base_checkout; repository and
gitdirs run and guard git for all of them.
"""

from tailagent.workspace.worktrees.changes import WorktreeStatus
from tailagent.workspace.worktrees.cleanup import DiscardResult
from tailagent.workspace.worktrees.errors import (
    MergeConflict,
    MergeRefused,
    NoWorktree,
    WorktreeDeleted,
    WorktreeTampered,
)
from tailagent.workspace.worktrees.facade import Worktrees
from tailagent.workspace.worktrees.merging import MergeResult, Strategy
from tailagent.workspace.worktrees.probe import probe
from tailagent.workspace.worktrees.records import BRANCH_PREFIX, Merged, Worktree
from tailagent.workspace.worktrees.turns import turn_subject

__all__ = [
    "BRANCH_PREFIX",
    "DiscardResult",
    "MergeConflict",
    "MergeRefused",
    "MergeResult",
    "Merged",
    "NoWorktree",
    "Strategy",
    "Worktree",
    "WorktreeDeleted",
    "WorktreeStatus",
    "WorktreeTampered",
    "Worktrees",
    "probe",
    "turn_subject",
]
