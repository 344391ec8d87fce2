"""The home a fenced agent sees: its own, holding only what its agent needs.

None of the service user's files are there (`~/.ssh`, `~/.vault-token`, shell history,
another tailagent's state: secrets have no fixed names), and an agent that could write
`~/.bashrc` or `~/.claude/settings.json` would plant a command in every later
conversation. But an agent's login keeps state it must write (Claude Code its session
transcripts and `~/.claude.json`, Codex and Gemini their own folders), so each of those
entries gets a private copy per conversation, made from the person's own when the
conversation starts and kept beside it: what one conversation's agent writes there is
seen by that conversation alone. Two kinds of file in it are not the copy's:

- the login itself (`~/.claude/.credentials.json`): bound to the real file, read-write,
  because a refreshed OAuth token must reach the next conversation (a stale copy's
  refresh token is revoked by the refresh);
- the agent's own settings (`~/.claude/settings.json`, Codex's `config.toml`, Gemini's
  `settings.json`): bound read-only, since they can allow tools without asking, add
  hooks and MCP servers; the agent reads the person's, and cannot change them.

Every other agent's entries (their logins) are simply not there.
"""

from __future__ import annotations

import logging
import os
import shutil
import stat
from pathlib import Path

from tailagent.agent_kinds import KINDS
from tailagent.agent_kinds.kind import AgentHome

log = logging.getLogger("tailagent.sandbox")

# A private copy takes the person's small files, not the history of every other
# conversation (Claude's `projects/`), nor caches, nor a copy of a login (which is bound
# to the real file instead).
COPY_SKIPS = frozenset(
    {"projects", "shell-snapshots", "todos", "statsig", "logs", "cache", "tmp", "sessions"}
    | {".credentials.json", "auth.json", "oauth_creds.json", "google_accounts.json"}
)
COPY_MAX_FILE = 1024 * 1024
COPY_MAX_DEPTH = 4


def agent_home(agent: str) -> AgentHome:
    """The home entries of the agent a configuration names (its description's, in
    agent_kinds/; none for a custom command)."""
    kind = KINDS.get(agent)
    return kind.home if kind is not None else AgentHome()


def seed(source: Path, copy: Path) -> None:
    """Makes `copy` once from the person's `source` (small regular files, no links), so
    a conversation's agent starts from their configuration and writes only its own."""
    if copy.exists() or copy.is_symlink():
        return
    copy.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    try:
        info = source.lstat()
    except OSError:
        info = None
    if info is not None and stat.S_ISREG(info.st_mode) and info.st_size <= COPY_MAX_FILE:
        shutil.copyfile(source, copy)
        return
    if source.name.endswith(".json") and (info is None or not stat.S_ISDIR(info.st_mode)):
        copy.write_text("{}")  # Claude's ~/.claude.json must be a JSON file to be written
        return
    copy.mkdir(mode=0o700)
    if info is not None and stat.S_ISDIR(info.st_mode):
        _copy_tree(source, copy, COPY_MAX_DEPTH)


def _copy_tree(source: Path, copy: Path, depth: int) -> None:
    try:
        entries = list(os.scandir(source))
    except OSError as exc:
        log.info("sandbox: could not read %s to copy it: %s", source, exc)
        return
    for entry in entries:
        if entry.name in COPY_SKIPS or entry.is_symlink():
            continue
        target = copy / entry.name
        try:
            if entry.is_dir(follow_symlinks=False) and depth > 0:
                target.mkdir(mode=0o700, exist_ok=True)
                _copy_tree(Path(entry.path), target, depth - 1)
            elif (
                entry.is_file(follow_symlinks=False)
                and entry.stat(follow_symlinks=False).st_size <= COPY_MAX_FILE
            ):
                shutil.copyfile(entry.path, target)
        except OSError as exc:
            log.info("sandbox: left %s out of the copy: %s", entry.path, exc)


def fixed_file(home: Path, copy_root: Path, relative: str, readable: bool = False) -> Path:
    """What the agent reads at a fixed path: the person's file, or an empty one of ours
    (so the agent cannot create it either). `readable`: for an agent of another uid, which
    may not open the person's file, a copy of it that all may read (bound read-only)."""
    real = home / relative
    if real.is_file() and not real.is_symlink() and not readable:
        return real
    placeholder = copy_root / ".fixed" / relative.replace("/", "__")
    placeholder.parent.mkdir(parents=True, exist_ok=True, mode=0o755)
    if real.is_file() and not real.is_symlink():
        _write(placeholder, real.read_bytes(), 0o644)
    elif not placeholder.exists():
        _write(placeholder, b"{}" if relative.endswith(".json") else b"", 0o644)
    return placeholder


def take_login(real: Path, copy: Path) -> None:
    """The person's login into an agent's copy when the person's is newer (another
    conversation refreshed it since): an agent of its own uid cannot open the person's."""
    try:
        info = real.stat()
    except FileNotFoundError:
        return
    if not real.is_file() or real.is_symlink():
        return
    if copy.exists() and copy.stat().st_mtime_ns >= info.st_mtime_ns:
        return
    copy.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
    _write(copy, real.read_bytes(), 0o600)
    os.utime(copy, ns=(info.st_atime_ns, info.st_mtime_ns))


def return_login(copy: Path, real: Path) -> None:
    """An agent's copy of the login back to the person's file when the agent wrote it
    since (a refresh), as a regular file of the person's, mode 0600."""
    try:
        descriptor = os.open(copy, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK)
    except OSError:
        return  # gone, or a link the agent left in its place: nothing to return
    with os.fdopen(descriptor, "rb") as source:
        written = os.fstat(descriptor)
        # A regular file with no other name (never a hard link to a file of root's).
        if not stat.S_ISREG(written.st_mode) or written.st_nlink != 1:
            return
        if written.st_size > COPY_MAX_FILE:
            return
        if real.exists() and real.stat().st_mtime_ns >= written.st_mtime_ns:
            return
        data = source.read(COPY_MAX_FILE)
    _write(real, data, 0o600)
    os.utime(real, ns=(written.st_atime_ns, written.st_mtime_ns))


def _write(path: Path, data: bytes, mode: int) -> None:
    """`path` replaced whole (never written through a link the agent left there)."""
    temporary = path.with_name(f".{path.name}.new")
    temporary.unlink(missing_ok=True)
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, mode)
    with os.fdopen(descriptor, "wb") as out:
        out.write(data)
    os.chmod(temporary, mode)
    temporary.replace(path)


def caches(home: Path, tmp: Path) -> dict[str, str]:
    """The temp dir and the caches agents share, in the conversation's private `tmp`: a
    cache one agent could write would feed the next, and a tool that cannot write its
    cache fails (`go build`, `npm install`). Go still reads the person's module
    downloads, as its first proxy."""
    found = {
        "TMPDIR": str(tmp),
        "XDG_CACHE_HOME": f"{tmp}/.cache",  # pip's, go build's, and most
        "npm_config_cache": f"{tmp}/.npm",
        "GOMODCACHE": f"{tmp}/go/pkg/mod",
    }
    downloads = home / "go" / "pkg" / "mod" / "cache" / "download"
    if downloads.is_dir():
        after = os.environ.get("GOPROXY") or "https://proxy.golang.org,direct"
        found["GOPROXY"] = f"file://{downloads},{after}"
    return found
