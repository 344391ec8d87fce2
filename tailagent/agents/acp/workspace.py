"""The workspace fence: every path an agent names is resolved, symlinks followed,
and anything that lands outside the workspace is refused."""

from __future__ import annotations

from pathlib import Path


class OutsideWorkspace(PermissionError):
    pass


def confine(workspace: Path, path: str) -> Path:
    """The real path `path` names, relative to the workspace when not absolute."""
    root = workspace.resolve()
    candidate = Path(path)
    resolved = (candidate if candidate.is_absolute() else root / candidate).resolve()
    if resolved != root and root not in resolved.parents:
        raise OutsideWorkspace(f"{path} is outside the workspace {root}")
    return resolved
