"""What a conversation's `.git` must look like before tailagent's own git runs there.

The agent may write anything in its repository's `.git` (it is in its directory), and git
takes far more than settings from there: `objects/info/alternates` names other object
stores to read, a `commondir` file hands refs and objects over to another git dir, and a
symbolic link anywhere (a ref, `objects/pack`, `HEAD`) reads a file elsewhere. The agent's
own git runs in its sandbox, where another conversation's directory does not exist; but
tailagent's git runs outside, where it does. An agent that pointed its alternates at
another conversation's objects and its branch at one of its commits would have tailagent
read them for its diff, and copy them into the person's repository at a merge.

So before each use, tailagent looks (plain file reads, no git) and refuses a `.git` that:
- is not a directory of its own (a file naming another git dir, or a symbolic link);
- has a `commondir` file;
- has alternates naming any object store but those the base itself reads (what tailagent
  wrote, or a part of it; still the base's if the person gave it alternates since). The
  file is checked rather than replaced by `GIT_ALTERNATE_OBJECT_DIRECTORIES` because git
  reads both: naming the right stores cannot unname the wrong ones;
- holds anything but plain files and directories (a symbolic link reads elsewhere; a
  FIFO where git expects a file would keep tailagent's git waiting, under the lock);
- has a config that includes another file (`include.path`, `includeIf`: one naming a
  FIFO or `/dev/zero` would keep tailagent's git reading it).
The config's settings are not looked at: every one that could run a program, or have
git read a file outside the repository, is overridden on each call (repository.py).

What this cannot close is a swap between the look and git's read while an agent process
still runs: turn commits and merges happen between turns (the fence ends the agent's
processes with them), a diff asked for during a turn could race; and it would need the
path of another conversation's directory and the id of a commit there, neither of which
the agent can see.
"""

from __future__ import annotations

import os
import re
import stat
from pathlib import Path

from tailagent.workspace.conversation_repos.plumbing.errors import WorktreeTampered

# A section header `[include]` or `[includeIf "..."]`, in any case and spacing.
_INCLUDE = re.compile(r"^\s*\[\s*include", re.IGNORECASE | re.MULTILINE)


def check(path: Path, shared: tuple[Path, ...]) -> None:
    """Raises WorktreeTampered when the conversation's directory at `path` is not one
    tailagent's git may run in: see the module's docstring. `shared` are the object
    stores the base reads, the only ones its alternates may name."""
    problem = _problem(path, {str(objects) for objects in shared})
    if problem is not None:
        raise WorktreeTampered(path, problem)


def _problem(path: Path, shared: set[str]) -> str | None:
    try:
        if not stat.S_ISDIR(os.lstat(path).st_mode):
            return "the conversation's directory is not a directory"
        mode = os.lstat(path / ".git").st_mode
    except FileNotFoundError:
        return "there is no .git"
    if stat.S_ISLNK(mode):
        return ".git is a symbolic link"
    if not stat.S_ISDIR(mode):
        return ".git is not a directory (a file naming another git dir?)"
    git_dir = path / ".git"
    if os.path.lexists(git_dir / "commondir"):
        return ".git/commondir names another repository's refs and objects"
    odd = _not_plain(git_dir)
    if odd is not None:
        return odd
    for config in ("config", "config.worktree"):
        try:
            text = (git_dir / config).read_text(errors="replace")
        except FileNotFoundError:
            continue
        if _INCLUDE.search(text):
            return f".git/{config} includes another file"
    try:
        named = (git_dir / "objects" / "info" / "alternates").read_text().splitlines()
    except FileNotFoundError:
        named = []  # it borrows nothing: git will say what it misses
    except (OSError, UnicodeDecodeError):
        named = ["(unreadable)"]
    if not set(filter(None, named)) <= shared:
        return ".git/objects/info/alternates names objects other than the base's"
    return None


def _not_plain(git_dir: Path) -> str | None:
    """What in `git_dir` is neither a plain file nor a directory, if anything."""
    waiting = [git_dir]
    while waiting:
        directory = waiting.pop()
        try:
            entries = list(os.scandir(directory))
        except OSError as error:
            return f"{directory} cannot be read ({error.strerror})"
        for entry in entries:
            name = os.path.relpath(entry.path, git_dir.parent)
            if entry.is_symlink():
                return f"{name} is a symbolic link"
            if entry.is_dir(follow_symlinks=False):
                waiting.append(Path(entry.path))
            elif not entry.is_file(follow_symlinks=False):
                return f"{name} is not a plain file"
    return None
