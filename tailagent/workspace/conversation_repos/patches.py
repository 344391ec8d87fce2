"""A change between two commits as people read it before they trust it: the stat (each
file, its lines added and removed), always whole, and the diff, bounded.

What an agent reports of its edits is its own account; a merge takes the branch. So what
the desk and `tailagent merge` show of a merge, and of a turn, is read here from git,
from the commits themselves. The diff is cut (at a line's end) past `PATCH_CHARS`: the
stat still names every file, and `tailagent diff` gives the whole.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from tailagent.workspace.git import PLAIN_DIFF, Repository, git

PATCH_CHARS = 100_000  # of a diff carried in a reply or a page; the stat is always whole
DIFF_OPTIONS = (*PLAIN_DIFF, "--no-renames")


@dataclass(frozen=True)
class FileStat:
    """One file of a change; a binary file has no line counts (`binary`)."""

    path: str
    added: int
    removed: int
    binary: bool = False


@dataclass(frozen=True)
class Patch:
    """The change from one commit to another: its files, and its diff (`cut` when the
    diff was bounded)."""

    files: tuple[FileStat, ...]
    diff: str
    cut: bool

    @property
    def added(self) -> int:
        return sum(f.added for f in self.files)

    @property
    def removed(self) -> int:
        return sum(f.removed for f in self.files)

    def stat(self) -> str:
        """The stat as lines a person reads: `path  +A -R` per file, then the totals."""
        width = max((len(f.path) for f in self.files), default=0)
        lines = [
            f" {f.path.ljust(width)}  " + ("binary" if f.binary else f"+{f.added} -{f.removed}")
            for f in self.files
        ]
        count = len(self.files)
        noun = "file" if count == 1 else "files"
        return "\n".join([*lines, f" {count} {noun} changed, +{self.added} -{self.removed}"])

    def as_data(self) -> dict[str, Any]:
        """The change as a reply's data or a task's metadata carry it."""
        return {
            "files": [
                {"path": f.path, "added": f.added, "removed": f.removed, "binary": f.binary}
                for f in self.files
            ],
            "added": self.added,
            "removed": self.removed,
            "diff": self.diff,
            "cut": self.cut,
        }


def _stats(numstat: str) -> tuple[FileStat, ...]:
    """`git diff --numstat -z --no-renames`: `A<TAB>R<TAB>path<NUL>`, `-` for binary."""
    found = []
    for item in numstat.split("\0"):
        added, tab, rest = item.partition("\t")
        removed, _, path = rest.partition("\t")
        if not tab or not path:
            continue
        binary = added == "-" or removed == "-"
        found.append(
            FileStat(path, 0 if binary else int(added), 0 if binary else int(removed), binary)
        )
    return tuple(found)


def bounded(text: str, limit: int = PATCH_CHARS) -> tuple[str, bool]:
    """`text` cut at the end of the last whole line within `limit` characters, and
    whether it was cut."""
    if len(text) <= limit:
        return text, False
    end = text.rfind("\n", 0, limit)
    return text[: end + 1 if end >= 0 else limit], True


async def between(own: Repository, old: str, new: str, limit: int = PATCH_CHARS) -> Patch:
    """The change from commit `old` to commit `new`, read in `own`."""
    numstat = await git(own, "diff", *DIFF_OPTIONS, "--numstat", "-z", old, new)
    diff = await git(own, "diff", *DIFF_OPTIONS, old, new)
    text, cut = bounded(diff.out, limit)
    return Patch(_stats(numstat.out), text, cut)
