"""Refusing a conversation's special files (FIFOs, sockets, devices) before tailagent's git
reads its work tree.

git opens the `.gitignore` and `.gitattributes` of every directory it looks at, and the
agent may make any file of its directory: a FIFO named `.gitignore` kept tailagent's
end-of-turn `git status` waiting for a writer that never came (issue 54). git's deadline
(git.py) ends such a wait, but only after a minute, and only with "did not finish": so the
tree is looked at first, and the turn refused at once, saying which file and what to do.

The look is a walk with `lstat` alone (`os.scandir`, whose entries know their type: no
file is opened, and no link followed but as said below), cheap beside the `git status`
it precedes (both look at every file). Anything neither a plain file, a directory nor a
symbolic link is refused, wherever it is: git opens no other kind on purpose, but a person
merging the branch would meet one all the same, and one allowed in an ignored directory is
one moved to `.gitignore` by the next turn. A symbolic link git stores as a link (its
target's name) without opening it, and since git 2.32 it does not follow one in the tree
named `.gitignore`, `.gitattributes` or `.mailmap` either; an older git would, so such a
link to a special file is refused too (`stat`, which opens nothing, says what it names).

`.git` itself is plumbing/guard.py's, which refuses there the same and symbolic links too.
What the walk cannot close is a file made between the walk and git's read by an agent
process still running: the deadline covers that.
"""

from __future__ import annotations

import asyncio
import os
import stat
from pathlib import Path

from tailagent.workspace.git import GitError

# The files git reads of a work tree's own (by name, in any directory) rather than stores.
_READ_BY_GIT = frozenset({".gitignore", ".gitattributes", ".mailmap", ".gitmodules"})


class SpecialFile(GitError):
    """A FIFO, socket or device in a conversation's directory: its git is not run there
    until it is gone."""

    def __init__(self, work_tree: Path, name: str, kind: str) -> None:
        super().__init__(
            f"{name} in {work_tree} is a {kind}, which would keep tailagent's git waiting: "
            f"nothing there is committed until it is removed (ask the agent to remove "
            f"{name}, then send another turn)"
        )


def _kind(mode: int) -> str | None:
    """What a special file of `mode` is, or None for a plain file, directory or link."""
    if stat.S_ISREG(mode) or stat.S_ISDIR(mode) or stat.S_ISLNK(mode):
        return None
    if stat.S_ISFIFO(mode):
        return "FIFO (named pipe)"
    if stat.S_ISSOCK(mode):
        return "unix socket"
    if stat.S_ISCHR(mode) or stat.S_ISBLK(mode):
        return "device"
    return "special file"


def special(work_tree: Path) -> tuple[str, str] | None:
    """The first special file under `work_tree` (outside its `.git`) and what it is, as
    (its path relative to `work_tree`, its kind); None when there is none."""
    waiting = [work_tree]
    while waiting:
        directory = waiting.pop()
        try:
            entries = os.scandir(directory)
        except OSError:
            continue  # unreadable: git says so itself
        with entries:
            for entry in entries:
                if directory == work_tree and entry.name == ".git":
                    continue
                # The entry's type comes with the directory's listing: no call per file
                # but for the rare one that is neither a file, a directory nor a link.
                if entry.is_dir(follow_symlinks=False):
                    waiting.append(Path(entry.path))
                    continue
                if entry.is_file(follow_symlinks=False):
                    continue
                try:
                    if entry.is_symlink():
                        if entry.name not in _READ_BY_GIT:
                            continue
                        mode = os.stat(entry.path).st_mode
                    else:
                        mode = entry.stat(follow_symlinks=False).st_mode
                except OSError:
                    continue  # gone meanwhile, or a dangling link: nothing to read
                kind = _kind(mode)
                if kind is not None:
                    return os.path.relpath(entry.path, work_tree), kind
    return None


async def refuse_specials(work_tree: Path) -> None:
    """Raises SpecialFile when `work_tree` holds a special file (see the module's
    docstring); walked in a thread, so a large tree does not hold up other turns."""
    found = await asyncio.to_thread(special, work_tree)
    if found is not None:
        raise SpecialFile(work_tree, *found)
