"""What a finished turn changed, as the task page's CHANGES show it: its real commit.

An agent's `FileChanged` events are its own account of its edits, and may not be what
landed (a shell command that rewrote a file reports nothing; an agent's diff can be
against a file it never read). A turn in a worktree ends with a commit, and the bridge
keeps that commit's stat and bounded diff in the task's metadata (`worktree.change`),
read from git. So a finished task shows that, file by file; the agent's reports stay
only for files the commit does not hold (an edit outside the worktree, or undone before
the turn ended), labelled as reported.

Pure functions of the task's metadata and its reported diffs: no I/O.
"""

from __future__ import annotations

from typing import Any

from tailagent.web.views.diffs import per_file


def _same_file(reported: str, committed: set[str]) -> bool:
    """Whether a reported path names a committed file: agents report paths relative to
    their directory or absolute (ending in the worktree's relative path)."""
    return reported in committed or any(reported.endswith("/" + path) for path in committed)


def shown(meta: dict[str, Any], reported: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """The CHANGES entries (key, data): the turn commit's files, then the reported
    diffs (`{"path", "diff"}`) of files it does not hold; all reported ones when the turn
    left no commit (still running, nothing committed, or a shared workspace)."""
    tree = meta.get("worktree")
    change = tree.get("change") if isinstance(tree, dict) else None
    if not isinstance(tree, dict) or not isinstance(change, dict):
        return [(f"diff:{d['path']}", d) for d in reported]
    files = [f for f in change.get("files") or [] if isinstance(f, dict)]
    paths = [str(f.get("path", "")) for f in files]
    commit = str(tree.get("commit") or "")
    diffs = per_file(str(change.get("diff") or ""), paths)
    entries = []
    for stat, (path, text) in zip(files, diffs, strict=True):
        data = {
            "path": path,
            "diff": text,
            "commit": commit,
            "added": int(stat.get("added") or 0),
            "removed": int(stat.get("removed") or 0),
            "binary": bool(stat.get("binary")),
        }
        entries.append((f"diff:{path}", data))
    committed = set(paths)
    more = [d for d in reported if not _same_file(str(d["path"]), committed)]
    return entries + [(f"diff:{d['path']}", d) for d in more]
