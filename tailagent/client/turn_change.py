"""What a finished turn changed, as `tailagent call` prints it at the turn's end: its
real commit, file by file.

An agent's reported diffs (its `diff:` artifacts) are its own account of its edits: a
shell command that rewrote a file reports nothing, and a report can be against a file
the agent never read. A merge takes the branch. So, as the desk does, a turn that ended
with a commit shows the commit's stat and diff (the server keeps them, bounded, in the
task's metadata: `worktree.change`), and the reported diffs only of files the commit
does not hold, labelled as reported. A turn without a commit (a shared workspace,
nothing changed) shows what was reported, labelled the same way.

Pure functions of the task's metadata and the reported diffs: no I/O, no printing.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from rich.cells import cell_len

from tailagent.output.visible import visible

REPORTED = "reported by the agent"


@dataclass(frozen=True)
class FileChange:
    """One file of a turn's change: its diff from the first hunk on ("" when none is
    shown: a binary file, or one past a bounded diff's end) and where it comes from."""

    path: str
    diff: str
    counts: str  # "+1 -1", or "binary"
    label: str  # "committed in <12 hex>", or REPORTED
    past_end: bool = False  # the commit holds it, the bounded diff ends before it

    def head(self, width: int) -> str:
        """`[path +A -R] label` in `width` columns: a path too long keeps its end."""
        tail = f" {self.counts}] {self.label}"
        path = visible(self.path, one_line=True)
        room = width - cell_len(tail) - 1
        if cell_len(path) > room > 1:
            while cell_len(path) > room - 1:
                path = path[1:]
            path = "…" + path
        return f"[{path}{tail}"


def _hunks(diff: str) -> str:
    """A file's diff from its first hunk: git's header lines say again what the head
    line says (the path), and do not fit a narrow terminal."""
    lines = diff.splitlines(keepends=True)
    first = next((i for i, line in enumerate(lines) if line.startswith("@@")), len(lines))
    return "".join(lines[first:])


def _counted(diff: str) -> str:
    """`+A -R` of a reported diff, counted from its lines (its headers not counted)."""
    lines = _hunks(diff).splitlines()
    added = sum(1 for line in lines if line.startswith("+"))
    removed = sum(1 for line in lines if line.startswith("-"))
    return f"+{added} -{removed}"


def _per_file(diff: str) -> list[str]:
    """A `git diff` cut into each file's part, in git's order (the stat's)."""
    parts: list[str] = []
    for line in diff.splitlines(keepends=True):
        if line.startswith("diff --git ") or not parts:
            parts.append("")
        parts[-1] += line
    return parts


def _reported_only(path: str, committed: set[str]) -> bool:
    """Whether a reported path names no committed file: agents report paths relative to
    their directory or absolute (ending in the worktree's relative path)."""
    return path not in committed and not any(path.endswith("/" + c) for c in committed)


def turn_change(worktree: dict[str, Any], reported: dict[str, str]) -> list[FileChange]:
    """The files a finished turn changed: its commit's (`worktree.change`, with the
    commit's id in `worktree.commit`), then the `reported` diffs (path -> diff) of files
    it does not hold; all the reported ones when the turn left no commit."""
    change = worktree.get("change")
    commit = str(worktree.get("commit") or "")
    if not isinstance(change, dict) or not commit:
        return [FileChange(p, _hunks(d), _counted(d), REPORTED) for p, d in reported.items()]
    stats = [f for f in change.get("files") or [] if isinstance(f, dict)]
    parts = _per_file(str(change.get("diff") or ""))
    label = f"committed in {commit[:12]}"
    found = []
    for i, stat in enumerate(stats):
        binary = bool(stat.get("binary"))
        counts = (
            "binary"
            if binary
            else f"+{int(stat.get('added') or 0)} -{int(stat.get('removed') or 0)}"
        )
        diff = _hunks(parts[i]) if i < len(parts) and not binary else ""
        found.append(FileChange(str(stat.get("path", "")), diff, counts, label, i >= len(parts)))
    committed = {f.path for f in found}
    more = [(p, d) for p, d in reported.items() if _reported_only(p, committed)]
    return found + [FileChange(p, _hunks(d), _counted(d), REPORTED) for p, d in more]
