"""What a fenced agent sees of the files: an allowlist, not a list of secrets.

Issue 41's fence showed the whole box read-only and hid seventeen names of secrets: a
denylist, and secrets have no fixed names (`~/.vault-token`, `~/.cargo/credentials.toml`,
rclone's config, another tailagent's `local-token` in `~/.local/state/tailagent` were all
read). So a fence's root is empty, and only these are put in it:

- the system, read-only: `/usr` and its links (`/bin`, `/lib`, ...), `/etc` without the
  password hashes, the SSH host keys and TLS private keys, `/sys`; `/nix` and `/snap`
  where they are (their programs are the system's on such boxes); a `/proc` of its own,
  the kernel's knobs there read-only;
- the directories on the agent's PATH, read-only: a toolchain in a home (pyenv, nvm,
  rustup, asdf, ...) whole, since its shims run the rest of it; any other PATH directory
  alone (`~/.cargo/bin`, not `~/.cargo` and its credentials);
- the agent's own programs, read-only: the folder each lives in (its interpreter's prefix,
  its script's folder, the package tailagent installed);
- whatever `sandbox.expose` names, read-only.

Everything else is not there: the rest of every home, `/root`, `/srv`, `/opt`, `/mnt`,
`/media`, `/var` (and so `/var/lib`), and every state dir. The fence (fences.py) adds the
agent's own pieces on top: its directory, a private `/tmp`, a home of its own.
"""

from __future__ import annotations

import os
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

# The system, shown read-only (a link, as /bin -> usr/bin is, stays a link).
SYSTEM = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32", "/etc", "/sys")
SYSTEM_OPTIONAL = ("/nix", "/snap")
# What of /etc is no agent's: password hashes, the host's SSH keys, TLS private keys.
ETC_SECRETS = (
    "/etc/shadow",
    "/etc/shadow-",
    "/etc/gshadow",
    "/etc/gshadow-",
    "/etc/ssh/ssh_host_rsa_key",
    "/etc/ssh/ssh_host_ecdsa_key",
    "/etc/ssh/ssh_host_ed25519_key",
    "/etc/ssh/ssh_host_dsa_key",
    "/etc/ssl/private",
)
# The kernel's knobs under /proc, read-only inside however the server runs: uid 0 may
# write /proc/sys (core_pattern runs a program as root at the next crash) whatever its
# capabilities. bwrap covers /proc/irq and /proc/bus itself.
PROC_READ_ONLY = ("sys", "sysrq-trigger", "fs")
# What of the kernel's state /proc would show of the whole box, not this fence.
PROC_HIDDEN = (
    "kcore",
    "keys",
    "key-users",
    "timer_list",
    "sched_debug",
    "latency_stats",
    "kallsyms",
)
# Toolchains kept in a home whose PATH entry (a shims or bin folder) runs the rest of
# them: shown whole. Relative to the home.
TOOLCHAINS = (
    ".pyenv",
    ".nvm",
    ".rustup",
    ".asdf",
    ".volta",
    ".rbenv",
    ".goenv",
    ".sdkman",
    ".bun",
    ".deno",
    ".local/share/mise",
    ".local/share/fnm",
)
# What a PATH entry needs beside it: rustup's proxies in ~/.cargo/bin run ~/.rustup.
COMPANIONS = {".cargo/bin": (".rustup",)}


@dataclass
class Mounts:
    """bwrap's mount options, in order: later ones cover earlier ones."""

    args: list[str] = field(default_factory=list)
    emptied: list[Path] = field(default_factory=list)  # an empty tmpfs, sealed at the end
    shown: list[Path] = field(default_factory=list)  # what is bound in, either way

    made: set[Path] = field(default_factory=set)  # folders made for mount points

    def ro(self, path: Path, target: Path | None = None) -> None:
        self._parents(target or path)
        self.args += ["--ro-bind", str(path), str(target or path)]
        self.shown.append(target or path)

    def rw(self, source: Path, target: Path | None = None) -> None:
        self._parents(target or source)
        self.args += ["--bind", str(source), str(target or source)]
        self.shown.append(target or source)

    def empty(self, path: Path) -> None:
        """An empty directory at `path`, made read-only once everything is mounted."""
        self._parents(path)
        self.args += ["--tmpfs", str(path)]
        self.emptied.append(path)

    def _parents(self, target: Path) -> None:
        """The folders down to a mount point, made by bwrap as 0755 where they are not
        there (its own default, 0700, would shut out an agent of another uid)."""
        for parent in reversed(target.parents[:-1]):
            if parent not in self.made:
                self.made.add(parent)
                self.args += ["--perms", "0755", "--dir", str(parent)]

    def visible(self, path: Path) -> bool:
        """Whether `path` is inside something already shown."""
        return any(path == s or path.is_relative_to(s) for s in self.shown)

    def hide(self, path: Path) -> None:
        """Covers `path` where a shown folder would show it: an empty directory over a
        directory, an empty file over anything else (a symbolic link's target, which is
        what bwrap mounts over)."""
        if path.is_symlink():
            path = path.resolve()
        if not self.visible(path) or any(path.is_relative_to(e) for e in self.emptied):
            return
        if path.is_dir():
            self.empty(path)
        elif path.exists():
            self.args += ["--ro-bind", "/dev/null", str(path)]

    def sealed(self) -> list[str]:
        """The options that end the list: the fence's root and every emptied place made
        read-only (what is mounted inside one, the conversation's directory, stays as it
        was mounted)."""
        return [arg for path in [Path("/"), *self.emptied] for arg in ("--remount-ro", str(path))]


def system(mounts: Mounts) -> None:
    """The system, read-only, without its secrets; /dev and /proc are the fence's own."""
    for name in (*SYSTEM, *SYSTEM_OPTIONAL):
        path = Path(name)
        if path.is_symlink():
            mounts.args += ["--symlink", os.readlink(path), name]
        elif path.is_dir():
            mounts.ro(path)
    mounts.args += ["--dev", "/dev", "--proc", "/proc", *proc_options()]
    for secret in ETC_SECRETS:
        mounts.hide(Path(secret))


def proc_options() -> list[str]:
    """The kernel's knobs under /proc read-only, and its box-wide state hidden (after
    `--proc`: the host's own files, bound over the fence's)."""
    options = []
    for name in PROC_READ_ONLY:
        if Path("/proc", name).exists():
            options += ["--ro-bind", f"/proc/{name}", f"/proc/{name}"]
    for name in PROC_HIDDEN:
        if Path("/proc", name).exists():
            options += ["--ro-bind", "/dev/null", f"/proc/{name}"]
    return options


def path_folders(search_path: str, home: Path) -> list[Path]:
    """The folders to show for the directories on PATH that the system does not hold
    already: a home's toolchain whole, any other directory alone, never a home itself."""
    folders: list[Path] = []
    for entry in search_path.split(os.pathsep):
        if not entry or not os.path.isabs(entry) or not os.path.isdir(entry):
            continue
        folder = Path(os.path.realpath(entry))
        if _system(folder) or folder in (Path("/"), home) or home.is_relative_to(folder):
            continue
        if folder.is_relative_to(home):
            relative = folder.relative_to(home).as_posix()
            root = next((t for t in TOOLCHAINS if f"{relative}/".startswith(f"{t}/")), None)
            if root is not None:
                folder = home / root
            folders += [home / c for c in COMPANIONS.get(relative, ()) if (home / c).is_dir()]
        folders.append(folder)
    return outermost(folders)


def program_folders(programs: Iterable[Path], inside: Iterable[Path], home: Path) -> list[Path]:
    """The folders to show for the agent's own files: a folder as it is, a file with the
    folder it came in (a script's modules lie beside it), an npm program with the folder
    its `node_modules` is in and a Python with its whole prefix or venv (each needs the
    rest). In a place shown only in part
    (`inside`: the person's checkout), the first folder below it, never that place whole;
    a file at the top of it, or of a home, alone."""
    places = [*inside, home, Path("/")]
    folders: list[Path] = []
    # A program as named (a venv's python link) and where it leads (the interpreter).
    for path in {Path(os.path.abspath(p)) for p in programs} | {
        Path(os.path.realpath(p)) for p in programs
    }:
        if not (path.exists() or path.is_symlink()) or _system(path):
            continue
        folder = path if path.is_dir() else path.parent
        if "node_modules" in folder.parts:  # an npm program needs its whole install
            folder = Path(*folder.parts[: folder.parts.index("node_modules")])
        elif _interpreter_prefix(folder, home):  # a venv's or a Python's bin/ needs its lib/
            folder = folder.parent
        place = next((p for p in places if folder == p or folder.is_relative_to(p)), None)
        if place is not None and place != Path("/") and place != home:
            if folder == place:
                folders.append(path)  # a file at the top of the checkout: alone
                continue
            folder = place / folder.relative_to(place).parts[0]
        elif folder in (home, Path("/")):
            folders.append(path)
            continue
        folders.append(folder)
    return outermost(folders)


def _interpreter_prefix(folder: Path, home: Path) -> bool:
    """Whether `folder` is the bin/ of a Python install or venv, whose programs need the
    rest of it (never ~/.local, which holds more than programs)."""
    prefix = folder.parent
    if folder.name != "bin" or prefix in (home, home / ".local", Path("/")):
        return False
    return (prefix / "pyvenv.cfg").is_file() or any(prefix.glob("lib/python3*"))


def _system(path: Path) -> bool:
    return any(path.is_relative_to(Path(name).resolve()) for name in (*SYSTEM, *SYSTEM_OPTIONAL))


def outermost(paths: Iterable[Path]) -> list[Path]:
    """Each path once, none inside another of them (bwrap would mount it twice)."""
    kept: list[Path] = []
    for path in sorted(set(paths), key=lambda p: len(p.parts)):
        if not any(path.is_relative_to(k) for k in kept):
            kept.append(path)
    return kept
