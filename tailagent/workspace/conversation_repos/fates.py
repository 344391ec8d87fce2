"""What became of a conversation's turn commits once they left its branch: merged into
the base, or discarded.

A finished task keeps what its turn left on the branch (`+1 commit, calc.py`) in its
metadata, written at the turn's end; a list of tasks that still said so of a branch
merged or discarded since would offer work that is no longer there. Which turn commits
went which way is written here, by the merge and the discard that took them
(`.fates/<conversation>.json`, beside the records, where no agent writes), so a list
of tasks asks one file per conversation and runs no git. A conversation's branch made
again after a merge or a discard (its next turn) holds new commits: the old ones keep
their fate.
"""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from tailagent.statedir.files import write_private
from tailagent.workspace.conversation_repos.records import Records, Worktree

FATES = ".fates"  # `.` starts no context id used as a file name
Fate = Literal["merged", "discarded", ""]


@dataclass
class Fates:
    """The fates of the turn commits of `records`' conversations."""

    records: Records

    def _path(self, context_id: str) -> Path:
        return self.records.root / FATES / f"{self.records.slug(context_id)}.json"

    def _read(self, context_id: str) -> dict[str, list[str]]:
        try:
            data = json.loads(self._path(context_id).read_text())
        except (OSError, ValueError):
            return {}
        if not isinstance(data, dict) or data.get("context_id") != context_id:
            return {}
        return {k: [str(c) for c in v] for k, v in data.items() if isinstance(v, list)}

    def remember(self, context_id: str, fate: Fate, commits: list[str]) -> None:
        """That `commits` (full ids) of the conversation were merged or discarded."""
        if not commits:
            return
        known = self._read(context_id)
        known[fate] = sorted(set(known.get(fate, [])) | set(commits))
        (self.records.root / FATES).mkdir(exist_ok=True, mode=0o700)
        write_private(self._path(context_id), json.dumps({"context_id": context_id, **known}))

    def forget(self, live: set[str]) -> None:
        """The fates of conversations that no longer exist (their tasks are gone too)."""
        folder = self.records.root / FATES
        for record in folder.glob("*.json") if folder.is_dir() else ():
            with contextlib.suppress(OSError, ValueError, KeyError, TypeError):
                if json.loads(record.read_text())["context_id"] not in live:
                    record.unlink()

    def of(self, context_id: str, branch: str, commit: str, now: Worktree | None) -> Fate:
        """What became of a turn's change on `branch` (its commit, "" when the turn
        committed nothing): "" while the branch still holds it (`now`: the
        conversation's worktree as its record says). A turn from before fates were kept
        is told by its branch alone: gone, merged if a merge of it is remembered."""
        known = self._read(context_id)
        if commit and commit in known.get("merged", ()):
            return "merged"
        if commit and commit in known.get("discarded", ()):
            return "discarded"
        if now is not None and not now.idle and now.branch == branch:
            return ""
        merged = self.records.merged(context_id)
        return "merged" if merged is not None and merged.branch == branch else "discarded"
