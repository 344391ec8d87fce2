"""Running git, and saying in one line what went wrong.

Every call is `git -C <repo> ...` as a subprocess (never through a shell: paths and
branch names come from callers and conversations), with a fixed environment so the
output is parseable (`LC_ALL=C`) and git never waits for a person who is not there
(no terminal prompt, no pager, no editor). The caller's own git environment is
scrubbed of what would point git at another repository (`GIT_DIR` and friends, as a
hook sets them), and optional locks are off so that merely looking at a person's
checkout (`git status`) never rewrites their index.
"""

from __future__ import annotations

import asyncio
import os
from dataclasses import dataclass
from pathlib import Path

GIT_MISSING = "git is not installed (tailagent needs it for worktree isolation)"

# What would make `git -C repo` act on some other repository or index than `repo`'s own
# (git sets these for its hooks, so a tailagent started from a hook would inherit them).
_REPO_LOCATING = (
    "GIT_DIR",
    "GIT_WORK_TREE",
    "GIT_INDEX_FILE",
    "GIT_OBJECT_DIRECTORY",
    "GIT_ALTERNATE_OBJECT_DIRECTORIES",
    "GIT_COMMON_DIR",
    "GIT_PREFIX",
    "GIT_IMPLICIT_WORK_TREE",
    "GIT_NAMESPACE",
)

_FIXED = {
    "LC_ALL": "C",
    "LANGUAGE": "C",
    "GIT_TERMINAL_PROMPT": "0",
    "GIT_PAGER": "cat",
    "PAGER": "cat",
    # A rebase or merge that wants a message must not open an editor nobody sees.
    "GIT_EDITOR": "true",
    "GIT_SEQUENCE_EDITOR": "true",
    "GIT_MERGE_AUTOEDIT": "no",
    # `git status` may otherwise refresh (rewrite) the index of the checkout it looks at.
    "GIT_OPTIONAL_LOCKS": "0",
    "GIT_ASKPASS": "",
    "SSH_ASKPASS": "",
}


@dataclass(frozen=True)
class GitResult:
    """What a git command gave back: its exit code and its decoded output."""

    code: int
    out: str
    err: str


class GitError(Exception):
    """A git operation failed or was refused; str() is one line a person reads: what
    failed and, where there is one, what to do about it."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


def one_line(text: str) -> str:
    """`text` with its line breaks and runs of blanks folded into single spaces."""
    return " ".join(text.split())


def _environment(extra: dict[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in _REPO_LOCATING}
    env.update(_FIXED)
    if extra:
        env.update(extra)
    return env


def _reason(err: str, out: str) -> str:
    """The line of git's output that says why it failed (the `fatal:` or `error:` one
    when there is one), without its prefix."""
    lines = [line.strip() for line in (err or out).splitlines() if line.strip()]
    for line in lines:
        for prefix in ("fatal: ", "error: "):
            if line.startswith(prefix):
                return line[len(prefix) :]
    return lines[0] if lines else "no output"


async def git(
    repo: Path,
    *args: str,
    env: dict[str, str] | None = None,
    ok: tuple[int, ...] = (0,),
    input: str | None = None,
) -> GitResult:
    """Runs `git -C repo *args` and returns its result.

    An exit code outside `ok` raises GitError naming the subcommand and git's reason.
    `env` adds to (and overrides) the fixed environment; `input` is written to stdin
    (which is otherwise empty, so nothing can wait for a keyboard).

    If the awaiting task is cancelled, git is still allowed to finish: a git killed
    half-way can leave a lock file or half an operation in a person's repository.
    """
    try:
        process = await asyncio.create_subprocess_exec(
            "git",
            "--no-pager",
            "-C",
            str(repo),
            *args,
            stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=_environment(env),
        )
    except FileNotFoundError:
        raise GitError(GIT_MISSING) from None
    except PermissionError as error:
        raise GitError(f"git could not be started: {error}") from None
    data = input.encode() if input is not None else None
    talk = asyncio.ensure_future(process.communicate(data))
    try:
        out, err = await asyncio.shield(talk)
    except asyncio.CancelledError:
        await talk
        raise
    code = process.returncode
    assert code is not None
    result = GitResult(
        code,
        out.decode("utf-8", errors="replace"),
        err.decode("utf-8", errors="replace"),
    )
    if code not in ok:
        command = next((a for a in args if not a.startswith("-") and "=" not in a), "")
        raise GitError(f"git {command} failed in {repo}: {_reason(result.err, result.out)}")
    return result
