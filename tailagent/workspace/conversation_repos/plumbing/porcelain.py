"""Reading git's machine output (`-z` lists, `status --porcelain -z`) and naming paths in a
message: shared by status, turns, merging and cleanup, and free of any git call."""

from __future__ import annotations


def split_z(text: str) -> list[str]:
    """The items of a NUL-separated list, without empty ones."""
    return [item for item in text.split("\0") if item]


def status_paths(porcelain_z: str) -> list[str]:
    """The paths in `git status --porcelain -z` output (both sides of a rename)."""
    paths: list[str] = []
    items = porcelain_z.split("\0")
    index = 0
    while index < len(items):
        item = items[index]
        index += 1
        if len(item) < 4:
            continue
        paths.append(item[3:])
        if item[0] in "RC":
            if index < len(items) and items[index]:
                paths.append(items[index])
            index += 1
    return paths


def unique(items: list[str]) -> list[str]:
    """`items` without repeats, in their first order."""
    return list(dict.fromkeys(items))


def listing(paths: list[str], limit: int = 10) -> str:
    """At most `limit` paths for a message, then how many more there are."""
    shown = ", ".join(paths[:limit])
    return shown + (f" and {len(paths) - limit} more" if len(paths) > limit else "")
