"""What tailagent holds in a state dir's worktrees, and taking away what is nobody's.

A person who tried `serve` a few times asks what it left behind and how to be rid of
it. `doctor` lists it (`held`) and `tailagent clean` removes what is no conversation's
(`clean`): a worktree made ahead (a killed server's; a clean stop removes its own),
a directory under `<state>/worktrees` that no record names, and retired directories not
yet deleted. A conversation's directory and branch are never touched here: `merge` and
`discard` say what they take. Nothing in the person's repository is touched either, but
git's entry for a worktree made ahead by an older tailagent, which the record names.
Read while no server runs on the state dir (the caller checks): a running server's
worktree made ahead is its own.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass
from pathlib import Path

from tailagent.workspace.conversation_repos.plumbing.gitdirs import forget
from tailagent.workspace.conversation_repos.records import BRANCH_PREFIX
from tailagent.workspace.conversation_repos.removal import TRASH

# What each kind of holding is, as a list under its folder says it (doctor): short.
SHORT = {
    "conversation": "a conversation's, on its branch",
    "idle": "a conversation's that changed nothing (no branch)",
    "made ahead": "made ahead for the next conversation",
    "taken": "the record of one made ahead a conversation took",
    "unrecorded": "no record names it",
    "link": "a link no record names",
    "retired": "merged or discarded, not deleted yet",
    "unreadable": "a record that cannot be read: remove it by hand",
}
# What each kind of holding is, as a person reads it.
KINDS = {
    "conversation": "a conversation's directory and branch",
    "idle": "a conversation that changed nothing (no branch)",
    "made ahead": "a worktree made ahead for the next conversation (nobody's yet)",
    "taken": "the record of a worktree made ahead that a conversation took (the record only)",
    "unrecorded": "a directory no record names",
    "link": "a link no record names (to a directory gone, or not a conversation's)",
    "retired": "a merged or discarded directory not deleted yet",
    "unreadable": "a record that cannot be read (left alone: remove it by hand)",
}


@dataclass(frozen=True)
class Held:
    """One thing tailagent holds: its path, its kind (a key of KINDS), the repository
    (git common dir) its record names, and a conversation's branch and id."""

    path: Path
    kind: str
    repository: str = ""
    branch: str = ""
    context_id: str = ""
    name: str = ""  # a conversation's: what a person finds it by in the root

    def entry(self, root: Path) -> str:
        """One line of a list under `root`: where it is (a conversation by the name a
        person finds it by, its branch beside it), then what it is, short."""
        where = root / self.name if self.name else self.path
        shown = str(where.relative_to(root)) if where.is_relative_to(root) else str(where)
        branch = f" {self.branch}" if self.kind == "conversation" else ""
        return f"{shown}{branch}: {SHORT[self.kind]}"

    @property
    def removable(self) -> bool:
        """Whether it is no conversation's (what `clean` takes)."""
        return self.kind in ("made ahead", "taken", "unrecorded", "link", "retired")

    def line(self) -> str:
        """One line: the branch or path, then what it is."""
        name = self.branch if self.kind == "conversation" else str(self.path)
        short = self.context_id[:8] if self.kind == "idle" else ""
        return f"{name}{f' ({short})' if short else ''}: {KINDS[self.kind]}"


def held(root: Path) -> list[Held]:
    """Everything under `root` (`<state>/worktrees`): each record's directory by what the
    record says, then directories no record names, then retired ones. A directory that a
    conversation's record names is that conversation's, whatever else names it (an older
    tailagent stopped mid-adoption left its record as made ahead too: only that goes)."""
    if not root.is_dir():
        return []
    found: list[Held] = []
    records: list[tuple[Path, Path, str, dict[str, object]]] = []
    for record in sorted(root.glob("*.json")):
        try:
            data = json.loads(record.read_text())
            records.append((record, Path(data["path"]), str(data["context_id"]), data))
        except (OSError, ValueError, KeyError, TypeError):
            found.append(Held(record, "unreadable"))
    named = {path for _, path, _, _ in records}
    theirs = {path for _, path, context_id, _ in records if context_id}
    for record, path, context_id, data in records:
        repository, idle = str(data.get("repository", "")), data.get("idle") is True
        kind = "made ahead" if not context_id else "idle" if idle else "conversation"
        branch = "" if kind != "conversation" else str(data.get("branch", BRANCH_PREFIX))
        if kind == "made ahead" and path in theirs:
            found.append(Held(record, "taken", repository))
        else:
            name = str(data.get("name") or "")
            found.append(Held(path, kind, repository, branch, context_id, name))
    names = {str(data.get("name") or "") for _, _, _, data in records}
    for entry in sorted(root.iterdir()):
        if entry.is_symlink():  # a conversation's name, a link to its directory made ahead
            if entry.name not in names:
                found.append(Held(entry, "link"))
            continue
        ours = entry.is_dir() and not entry.name.startswith(".")
        if ours and entry not in named and entry.resolve() not in named:
            found.append(Held(entry, "unrecorded"))
    trash = root / TRASH
    if trash.is_dir():
        found += [Held(entry, "retired") for entry in sorted(trash.iterdir())]
    return found


def clean(root: Path, holdings: list[Held]) -> list[Held]:
    """Removes the holdings that are no conversation's; returns those removed. A worktree
    made ahead goes directory first, record last (as removal.py does, one floor down),
    and git's entry for it in its repository with it when an older tailagent made it there. What a
    conversation's record names now (a server started since `holdings` were listed may
    have given it to one) is left."""
    theirs = {holding.path for holding in held(root) if holding.context_id}
    removed = []
    for holding in holdings:
        if not holding.removable or not holding.path.is_relative_to(root):
            continue
        if holding.path in theirs or holding.path.resolve() in theirs:
            continue
        if holding.path.is_symlink() or holding.path.is_file():
            holding.path.unlink(missing_ok=True)
        else:
            shutil.rmtree(holding.path, ignore_errors=True)
        if holding.kind == "made ahead":
            if holding.repository:
                forget(Path(holding.repository), holding.path)
            (root / f"{holding.path.name}.json").unlink(missing_ok=True)
        removed.append(holding)
    return removed
