"""Running git so that no file it finds steers it into running a program, and saying in
one line what went wrong.

An agent may write any file of its directory without asking, `.git` included (it is its
conversation's own repository), and git takes its repository, and with it a config, from
whatever `.git` names: a config whose `core.fsmonitor` or `core.hooksPath` is a command
has git run it at the next `git status`. So git is never left to find the repository of a
conversation: a `Repository` names its git dir and work tree outright (`GIT_DIR`,
`GIT_WORK_TREE`), the paths tailagent's records give, after a look at that `.git`
(conversation_repos/plumbing/guard.py). Only the person's own checkout is ever found from
a directory (`git(path, ...)`: `probe`, and the first look at the workspace).

Every call also carries settings (as `GIT_CONFIG_KEY_n`, which outrank every config file)
under which git starts none of the programs a config may name: no fsmonitor, no
transport (so no ssh command, remote helper or `ext::` command; a merge's fetch from a
conversation's repository allows `file` for that call only:
conversation_repos/merge/quarantine.py), no git run inside a submodule (found from a
`.git` the agent can write), and, unless the person lets them (`workspace.git_programs`),
no hooks and none of the filter and merge drivers that a `.gitattributes` the agent
writes could send its files through (`without_drivers`). Diffs are asked for with
`PLAIN_DIFF` by callers. A conversation's repository has more switched off
(conversation_repos/plumbing/repository.py): its config is the agent's.

Every call is a subprocess (never a shell: paths and branch names come from callers),
with a fixed environment so the output is parseable (`LC_ALL=C`) and git never waits for
a person who is not there (no terminal prompt, no pager, no editor). Of the caller's
`GIT_*` variables only those saying who the person is and where their config lives are
kept (a hook that started tailagent leaves `GIT_DIR`, `GIT_INDEX_FILE` and `-c` settings
behind), and optional locks are off so that merely looking at a person's checkout
(`git status`) never rewrites their index.

Every call has a deadline (`DEADLINE`, or the one a `Repository` or the call names): a
file the agent made can keep git waiting for good (a FIFO where git reads a file, a file
of gigabytes), and a git that never ends would hold its conversation's turn for good. git
starts in a session of its own, so at the deadline it and whatever it started are ended
together: asked first (SIGTERM, on which git removes the lock files it holds), then
killed; the call raises GitError saying which git did not finish in time.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import re
import signal
from dataclasses import dataclass, replace
from pathlib import Path

GIT_MISSING = "git is not installed (tailagent needs it for worktree isolation)"

# Seconds a git call may take: a status, add, commit or diff of a conversation's files
# takes well under one on a repository of 20,000 files; a minute is a git that is stuck.
DEADLINE = 60.0
# How many deadlines a checkout, a merge or a rebase may take: they write every file.
SLOW = 10
# Seconds a git asked to stop at its deadline has to clean up before it is killed.
_GRACE = 2.0

# The caller's GIT_* variables that are the person's own settings, not a parent git's
# state: who commits, where their config is, where discovery of their checkout stops.
_KEPT = frozenset(
    {
        "GIT_AUTHOR_NAME",
        "GIT_AUTHOR_EMAIL",
        "GIT_COMMITTER_NAME",
        "GIT_COMMITTER_EMAIL",
        "GIT_CONFIG_GLOBAL",
        "GIT_CONFIG_SYSTEM",
        "GIT_CONFIG_NOSYSTEM",
        "GIT_CEILING_DIRECTORIES",
        "GIT_EXEC_PATH",
    }
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

Setting = tuple[str, str]

# What no config may switch on for tailagent's git.
NO_PROGRAMS: tuple[Setting, ...] = (
    ("core.fsmonitor", "false"),  # a command (or a daemon) at every status: only speed
    ("protocol.allow", "never"),  # every transport, and so every ssh or helper command
    ("submodule.recurse", "false"),  # git in a submodule finds its own repository
)
# The hooks, unless the person lets them run: a directory that cannot hold any.
NO_HOOKS: tuple[Setting, ...] = (("core.hooksPath", os.devnull),)

# Configured filter and merge drivers: `<filter|merge>.<driver>.<key>`.
_DRIVER_KEYS = r"^(filter|merge)\..+\.(clean|smudge|process|driver)$"
# All that defines one (the programs and how they are used).
_DRIVER_DEFINITIONS = r"^(filter|merge)\..+\.(clean|smudge|process|driver|required|recursive|name)$"

# What every diff tailagent reads or shows is asked with: no colour, and no diff driver or
# text conversion a `.gitattributes` (the agent's to write) could name.
PLAIN_DIFF = ("--no-color", "--no-ext-diff", "--no-textconv")


@dataclass(frozen=True)
class GitResult:
    """What a git command gave back: its exit code and its decoded output."""

    code: int
    out: str
    err: str


@dataclass(frozen=True)
class Repository:
    """A repository named outright, as every call in a conversation's repository names it:
    the git dir and the work tree git is to use (it looks for neither), the settings each
    call carries, and variables of git's own environment (`env`: where new objects go
    during a merge, no replace refs in a conversation's repository)."""

    git_dir: Path
    work_tree: Path
    settings: tuple[Setting, ...] = NO_PROGRAMS + NO_HOOKS
    env: tuple[Setting, ...] = ()
    deadline: float = DEADLINE  # seconds each call here may take

    def with_settings(self, *settings: Setting) -> Repository:
        """This repository with `settings` added (a later one wins over an earlier)."""
        return replace(self, settings=self.settings + settings)

    def slow(self) -> Repository:
        """This repository for a call that writes every file (a checkout, a merge, a
        rebase): `SLOW` deadlines."""
        return replace(self, deadline=self.deadline * SLOW)


class GitError(Exception):
    """A git operation failed or was refused; str() is one line a person reads: what
    failed and, where there is one, what to do about it."""

    def __init__(self, message: str) -> None:
        super().__init__(one_line(message))


def one_line(text: str) -> str:
    """`text` with its line breaks and runs of blanks folded into single spaces."""
    return " ".join(text.split())


def _environment(settings: tuple[Setting, ...], extra: dict[str, str] | None) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_") or k in _KEPT}
    env.update(_FIXED)
    env["GIT_CONFIG_COUNT"] = str(len(settings))
    for n, (key, value) in enumerate(settings):
        env[f"GIT_CONFIG_KEY_{n}"] = key
        env[f"GIT_CONFIG_VALUE_{n}"] = value
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
    at: Repository | Path,
    *args: str,
    env: dict[str, str] | None = None,
    ok: tuple[int, ...] = (0,),
    input: str | None = None,
    deadline: float | None = None,
) -> GitResult:
    """Runs `git *args` in the repository `at` names (a directory: the one git finds from
    there) and returns its result.

    An exit code outside `ok` raises GitError naming the subcommand and git's reason.
    `env` adds to (and overrides) the fixed environment; `input` is written to stdin
    (which is otherwise empty, so nothing can wait for a keyboard). A git still running
    after `deadline` seconds (by default the repository's, or `DEADLINE`) is ended with
    everything it started, and GitError says so.

    If the awaiting task is cancelled, git is still allowed to finish (by its deadline):
    a git killed half-way can leave a lock file or half an operation in a person's
    repository.
    """
    command = next((a for a in args if not a.startswith("-") and "=" not in a), "")
    if isinstance(at, Repository):
        where = at.work_tree
        settings = at.settings
        named = {"GIT_DIR": str(at.git_dir), "GIT_WORK_TREE": str(at.work_tree)}
        env = named | dict(at.env) | (env or {})
        deadline = at.deadline if deadline is None else deadline
    else:
        where, settings = at, NO_PROGRAMS + NO_HOOKS
        deadline = DEADLINE if deadline is None else deadline
    try:
        process = await asyncio.create_subprocess_exec(
            "git",
            "--no-pager",
            "-C",
            str(where),
            *args,
            stdin=asyncio.subprocess.PIPE if input is not None else asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=_environment(settings, env),
            start_new_session=True,  # its own process group: ended whole at the deadline
        )
    except FileNotFoundError:
        raise GitError(GIT_MISSING) from None
    except PermissionError as error:
        raise GitError(f"git could not be started: {error}") from None
    data = input.encode() if input is not None else None
    talk = asyncio.ensure_future(_within(process, data, deadline))
    try:
        finished = await asyncio.shield(talk)
    except asyncio.CancelledError:
        await talk
        raise
    if finished is None:
        raise GitError(
            f"git {command} in {where} did not finish within {deadline:g} s and was "
            "stopped: a file there may keep git waiting (a FIFO, a device) or be too "
            "big to read in time"
        )
    out, err = finished
    code = process.returncode
    assert code is not None
    result = GitResult(
        code,
        out.decode("utf-8", errors="replace"),
        err.decode("utf-8", errors="replace"),
    )
    if code not in ok:
        raise GitError(f"git {command} failed in {where}: {_reason(result.err, result.out)}")
    return result


async def _within(
    process: asyncio.subprocess.Process, data: bytes | None, deadline: float
) -> tuple[bytes, bytes] | None:
    """git's output, or None when it did not end within `deadline` seconds: then it and
    its process group are asked to stop, and killed after a grace."""
    talk = asyncio.ensure_future(process.communicate(data))
    done, _ = await asyncio.wait([talk], timeout=deadline)
    if done:
        return talk.result()
    _signal(process.pid, signal.SIGTERM)
    done, _ = await asyncio.wait([talk], timeout=_GRACE)
    if not done:
        _signal(process.pid, signal.SIGKILL)
        # The pipes close with the last of the group; one that left it is not waited for.
        done, _ = await asyncio.wait([talk], timeout=_GRACE)
    if not done:
        talk.cancel()
    with contextlib.suppress(BaseException):
        await talk
    return None


def _signal(group: int, number: signal.Signals) -> None:
    """Sends `number` to the process group `group` (git's: it leads its own session)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(group, number)


async def without_drivers(repo: Repository) -> Repository:
    """`repo`, with every filter and merge driver its config defines switched off.

    Which driver a file goes through is said by `.gitattributes`, a file the agent can
    write: with the drivers on, it could send any file through any program the person's
    config names (a clean filter at `git add` or `status`, a smudge filter at a checkout,
    a merge driver in a rebase). A filter becomes none (the file is taken as it is); a
    merge driver becomes `false`, a conflict left for a person. Read again for each
    operation, so a driver the person adds meanwhile is off too.
    """
    found = await git(repo, "config", "--name-only", "--get-regexp", _DRIVER_KEYS, ok=(0, 1))
    off: list[Setting] = []
    for name in dict.fromkeys(found.out.splitlines()):
        section, driver = re.sub(r"\.[a-z]+$", "", name).split(".", 1)
        if section == "merge":
            off.append((f"merge.{driver}.driver", "false"))
        else:
            off += [(f"filter.{driver}.{key}", "") for key in ("clean", "smudge", "process")]
            off.append((f"filter.{driver}.required", "false"))
    return repo.with_settings(*dict.fromkeys(off))


async def drivers(repo: Repository) -> tuple[Setting, ...]:
    """The filter and merge drivers `repo`'s config defines, as settings: the person's
    own, carried (with `workspace.git_programs`) to a conversation's repository, whose
    own config the agent writes and which therefore has its drivers switched off."""
    found = await git(repo, "config", "-z", "--get-regexp", _DRIVER_DEFINITIONS, ok=(0, 1))
    settings: list[Setting] = []
    for item in found.out.split("\0"):
        key, newline, value = item.partition("\n")
        if key and newline:
            settings.append((key, value))
    return tuple(settings)
