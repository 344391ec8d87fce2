"""A repository and branch per conversation, merged back only on request.

Conversations served at the same time must not edit one working directory: one
caller's half-finished change would land in another's test run. So each A2A context
gets its own directory (`<root>/<context>`), a git repository of its own on its own
branch (`tailagent/<short id>`), made from the workspace's branch at the conversation's
start, and a commit per turn. The repository borrows the workspace's objects read-only
(`objects/info/alternates`, as `git clone --shared` makes) and keeps its own: its
commits, objects and refs are written in its directory only, so no other conversation
can read them (its sandbox sees its own directory, and the base's objects read-only), and
the person's repository holds none of them until a merge lands.

What is tailagent's is decided by a record, `<root>/<context>.json`, written before the
directory exists and removed after it is gone: a directory or branch without a record is
never touched, whatever its name. Merging back never touches a person's work: the
result is built in a scratch repository first (`git merge-tree`, `git commit-tree`), a
checkout is only fast-forwarded when it is clean, and every refusal or conflict leaves
the base branch, its working tree, its index and its objects as they were.

The agent may write any file of its directory, `.git` included. So tailagent's git names
the git dir and work tree itself, overrides every setting of the conversation's config
that could run a program, and first looks at the `.git` (plumbing/guard.py): one whose
alternates, `commondir` or symbolic links could have git read another conversation's
objects is reported (WorktreeTampered) and not used; the turn's changes are not committed.

The bridge talks to `ConversationRepos` (facade.py) only. Beneath it the life of one
conversation's directory stands in floors, a file or room per concern, each importing only
those below it:
- plumbing/, what every concern stands on: git run in a repository named outright, its
  `.git` guarded, git's output read, the file-system calls, and the errors every concern
  raises;
- records (what is tailagent's), lock, probe and patches (a change's stat and bounded
  diff, as a merge's preview and a turn's page show it);
- making and removal (a directory made, and taken away), fates (which turn commits a
  merge or a discard took), turns (turn commits and their trailers), origin (where a
  conversation starts, and what of the checkout it does not hold), changes (status and
  diff) and legacy (an older tailagent's `git worktree`s converted);
- ahead (the directory made ahead and its adoption), idle, merge/ (a branch merged
  back into its base) and handover (a branch pushed to the team's shared repository,
  and a conversation made again from there on another box);
- ending/, which decides what goes (discard, prune, `clean`) and so stands on all of them.
"""

from tailagent.workspace.conversation_repos.changes import WorktreeStatus
from tailagent.workspace.conversation_repos.ending.cleanup import DiscardResult
from tailagent.workspace.conversation_repos.facade import ConversationRepos
from tailagent.workspace.conversation_repos.merge.merging import MergePreview, MergeResult, Strategy
from tailagent.workspace.conversation_repos.origin import Start
from tailagent.workspace.conversation_repos.patches import FileStat, Patch
from tailagent.workspace.conversation_repos.plumbing.errors import (
    MergeConflict,
    MergeRefused,
    NoWorktree,
    OtherRepository,
    WorktreeDeleted,
    WorktreeTampered,
)
from tailagent.workspace.conversation_repos.probe import probe
from tailagent.workspace.conversation_repos.records import BRANCH_PREFIX, Merged, Worktree
from tailagent.workspace.conversation_repos.turns import turn_subject

__all__ = [
    "BRANCH_PREFIX",
    "ConversationRepos",
    "DiscardResult",
    "FileStat",
    "MergeConflict",
    "MergePreview",
    "MergeRefused",
    "MergeResult",
    "Merged",
    "NoWorktree",
    "OtherRepository",
    "Patch",
    "Start",
    "Strategy",
    "Worktree",
    "WorktreeDeleted",
    "WorktreeStatus",
    "WorktreeTampered",
    "probe",
    "turn_subject",
]
