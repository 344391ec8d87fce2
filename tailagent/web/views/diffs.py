"""A unified diff, as the page shows it: lines tagged for colour, and the +/- counts.

Agents hand over diffs as text (`FileChanged.diff`); nothing here trusts that text to
be well formed: an unknown line is shown as context, never dropped.
"""

from __future__ import annotations

from dataclasses import dataclass

FOLD_AFTER = 60  # lines shown before "show more"


@dataclass(frozen=True, slots=True)
class DiffLine:
    kind: str  # "add" | "del" | "hunk" | "meta" | "ctx"
    text: str


@dataclass(frozen=True, slots=True)
class Diff:
    lines: tuple[DiffLine, ...]
    added: int
    removed: int

    @property
    def shown(self) -> tuple[DiffLine, ...]:
        return self.lines[:FOLD_AFTER]

    @property
    def folded(self) -> tuple[DiffLine, ...]:
        return self.lines[FOLD_AFTER:]


def _kind(line: str) -> str:
    if line.startswith(("+++", "---", "diff ", "index ", "new file", "deleted file")):
        return "meta"
    if line.startswith("@@"):
        return "hunk"
    if line.startswith("+"):
        return "add"
    if line.startswith("-"):
        return "del"
    return "ctx"


def parse(text: str) -> Diff:
    lines = tuple(DiffLine(_kind(line), line) for line in text.splitlines())
    return Diff(
        lines,
        added=sum(1 for line in lines if line.kind == "add"),
        removed=sum(1 for line in lines if line.kind == "del"),
    )


def per_file(text: str, paths: list[str]) -> list[tuple[str, str]]:
    """A `git diff` of `paths` (in git's order, as its stat lists them) cut into each
    file's part; a file past a bounded diff's end gets "" (its stat still says it)."""
    chunks: list[list[str]] = []
    for line in text.splitlines(keepends=True):
        if line.startswith("diff --git ") or not chunks:
            chunks.append([])
        chunks[-1].append(line)
    parts = ["".join(chunk) for chunk in chunks]
    return [(path, parts[i] if i < len(parts) else "") for i, path in enumerate(paths)]


def _path_of(chunk: list[str]) -> str:
    """A file's path in its part of a `git diff`: the new side's, the old side's for a
    deleted file, else the header's (a binary or mode-only change has no +++ line)."""
    for line in chunk:
        if line.startswith("+++ b/"):
            return line.removeprefix("+++ b/").rstrip("\n")
    for line in chunk:
        if line.startswith("--- a/"):
            return line.removeprefix("--- a/").rstrip("\n")
    header = chunk[0].rstrip("\n").removeprefix("diff --git ")
    return header.split(" b/", 1)[1] if " b/" in header else header


def files(text: str) -> list[tuple[str, str]]:
    """A `git diff` cut into (path, that file's part), in its order: the whole-diff page
    shows each file on its own. Lines before the first file (none from git) are kept
    under an empty path, never dropped."""
    chunks: list[list[str]] = []
    for line in text.splitlines(keepends=True):
        if line.startswith("diff --git ") or not chunks:
            chunks.append([])
        chunks[-1].append(line)
    found = []
    for chunk in chunks:
        if chunk[0].startswith("diff --git "):
            found.append((_path_of(chunk), "".join(chunk)))
        elif "".join(chunk).strip():
            found.append(("", "".join(chunk)))
    return found


def sections(text: str) -> list[tuple[str, list[tuple[str, str]]]]:
    """A conversation's whole diff (workspace/conversation_repos/changes.py) as
    (heading, files): what its branch committed, then, under the line that says so,
    what is not committed yet."""
    committed, marker, pending = text.partition("\n# Not committed yet")
    shown = [("Committed on the branch", files(committed))]
    if marker:
        heading, _, rest = pending.partition("\n")
        shown.append(("Not committed yet" + heading.rstrip(":"), files(rest)))
    return [(heading, parts) for heading, parts in shown if parts]
