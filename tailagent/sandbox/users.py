"""Who a conversation's agent runs as: never root, and never another conversation's user.

An agent that is uid 0 inside its fence is root to everything the kernel checks by owner
rather than by capability (`/proc/sys` is one, a root-owned file bound in is another), and
two agents of one uid share whatever the kernel keeps per uid (the keyring, signal rights,
limits). So when the server runs as root, each conversation's agent gets a uid of its own,
as systemd's `DynamicUser=` gives a service one: the lowest free number of this state
dir's block (UID_BASE + a block picked by the state dir's path, so two tailagents of one
box rarely meet), never one `/etc/passwd` names, kept in the conversation's private folder
so the same conversation has the same uid after a restart, and freed with it. Its group is
the same number, and it has no other.

Why not one dedicated user for every agent: the uid is exactly what the agents of two
people would then share. Why not a user the operator names: the same, and an account with
a home and a shell besides (`sandbox.user` still names one, for a box whose policy wants a
named account).

bwrap makes the fence as root (it must reach the agent's programs, wherever they are),
then the first thing run inside is `setpriv`, which takes the uid and group and drops the
two capabilities the fence kept for it; nothing of the agent ever held root. The agent's
own pieces are handed to its uid (`hand_over`): its directory (what tailagent's git wrote
there since, too: its commits, a merge's checkout), its temp dir, its home copies, its
proxy's socket. A server that is not root runs agents as its own uid: nothing to hand.
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import zlib
from pathlib import Path

from tailagent.sandbox.bwrap import SandboxUnavailable

UID_BASE = 0x7A000000  # 2046820352: past systemd's container range, below 2^31
BLOCK = 65536  # uids a state dir's conversations draw from
BLOCKS = 64
UID_FILE = "uid"  # in a conversation's private folder
MAX_DEPTH = 256  # folders below a conversation's directory that are handed over
SETPRIV_INSTALL = "install util-linux's setpriv (Debian, Ubuntu: it comes with util-linux)"
# What the fence keeps for setpriv to take the uid with, and nothing else.
KEPT_CAPABILITIES = ("CAP_SETUID", "CAP_SETGID")


class AgentUsers:
    """The uid of each conversation's agent under one state dir, when the server is root
    (`enabled`); `named` puts every agent under one account instead."""

    def __init__(self, state_dir: Path, sandboxes: Path, named: str | None = None) -> None:
        self.enabled = os.geteuid() == 0
        self._sandboxes = sandboxes
        self._first = UID_BASE + BLOCK * (zlib.crc32(str(state_dir).encode()) % BLOCKS)
        self._name = named
        self._named: int | None = None
        self.setpriv = shutil.which("setpriv") or "/usr/bin/setpriv"

    def check(self) -> None:
        """SandboxUnavailable, saying what to do, when agents cannot run as `sandbox.user`
        or would need setpriv and it is not here."""
        if self._name:
            try:
                self._named = pwd.getpwnam(self._name).pw_uid
            except KeyError:
                raise SandboxUnavailable(
                    f"sandbox.user: no user {self._name!r} on this box (name an existing "
                    "account, or leave it out for a uid of its own per conversation)"
                ) from None
            if self._named == 0:
                raise SandboxUnavailable(
                    f"sandbox.user: {self._name!r} is root, and agents never run as root"
                )
        if self.enabled and not os.access(self.setpriv, os.X_OK):
            raise SandboxUnavailable(
                f"no setpriv to run agents as their own users: {SETPRIV_INSTALL}"
            )

    def uid_of(self, private: Path) -> int:
        """The uid of the conversation whose private folder is `private`: the one it was
        given, else the lowest free one of this state dir's block (a number on file that
        passwd now names, or another conversation took, is given up for a new one)."""
        if self._named is not None:
            return self._named
        record = private / UID_FILE
        taken = self._taken(besides=private)
        try:
            uid = int(record.read_text())
        except (OSError, ValueError):
            uid = -1
        if not self._free(uid, taken):
            uid = next(u for u in range(self._first, self._first + BLOCK) if self._free(u, taken))
            record.write_text(str(uid))
        return uid

    def _taken(self, besides: Path) -> set[int]:
        taken = set()
        for other in self._sandboxes.glob(f"*/{UID_FILE}"):
            if other.parent != besides:
                try:
                    taken.add(int(other.read_text()))
                except (OSError, ValueError):
                    continue
        return taken

    def _free(self, uid: int, taken: set[int]) -> bool:
        if not self._first <= uid < self._first + BLOCK or uid in taken:
            return False
        try:
            pwd.getpwuid(uid)
        except KeyError:
            return True
        return False

    def gid(self, uid: int) -> int:
        """The agent's group: a named account's own, else the number of its uid."""
        return pwd.getpwuid(uid).pw_gid if uid == self._named else uid

    def named(self) -> bool:
        """Whether agents run as an account the box's tables already name."""
        return self._named is not None

    def inside(self, uid: int) -> list[str]:
        """What runs first inside the fence: the agent's uid and group taken, no other
        group, no capability left to pass on."""
        return [self.setpriv, f"--reuid={uid}", f"--regid={self.gid(uid)}", "--clear-groups",
                "--inh-caps=-all", "--"]  # fmt: skip


def tables(uid: int, home: Path, private: Path) -> dict[str, Path]:
    """The fence's /etc/passwd and /etc/group: the box's, and the agent's uid as `agent`
    (ssh, git and Python's getpass refuse a uid with no name). Kept in the private folder,
    rewritten whole."""
    made = {}
    for name, line in (
        ("passwd", f"agent:x:{uid}:{uid}:tailagent agent:{home}:/bin/sh\n"),
        ("group", f"agent:x:{uid}:\n"),
    ):
        box = Path("/etc", name).read_text(errors="replace") if Path("/etc", name).exists() else ""
        table = private / name
        temporary = table.with_suffix(".new")
        temporary.write_text(box.rstrip("\n") + "\n" + line)
        temporary.chmod(0o644)
        temporary.replace(table)
        made[name] = table
    return made


def hand_over(path: Path, uid: int, gid: int) -> None:
    """`path` and everything under it belong to `uid` (links themselves, never what they
    point at): what tailagent wrote there as root becomes the agent's to change. Only
    entries of another owner are changed, so a second pass over a large tree is reads.

    The walk goes down by open folders, never by names: a folder the agent swapped for a
    link to /etc between the listing and the descent is refused by O_NOFOLLOW, so root
    never hands over anything outside `path`."""
    try:
        top = os.open(path, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW)
    except (FileNotFoundError, NotADirectoryError):
        return
    try:
        info = os.fstat(top)
        if info.st_uid != uid or info.st_gid != gid:
            os.fchown(top, uid, gid)
        _hand_over_below(top, uid, gid, MAX_DEPTH)
    finally:
        os.close(top)


def _hand_over_below(folder: int, uid: int, gid: int, depth: int) -> None:
    with os.scandir(folder) as entries:
        for entry in entries:
            try:
                info = entry.stat(follow_symlinks=False)
                if info.st_uid != uid or info.st_gid != gid:
                    os.chown(entry.name, uid, gid, dir_fd=folder, follow_symlinks=False)
                if not stat.S_ISDIR(info.st_mode) or depth == 0:
                    continue
                below = os.open(
                    entry.name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW, dir_fd=folder
                )
            except (FileNotFoundError, NotADirectoryError):
                continue  # gone, or no longer a folder: nothing of it to hand over
            try:
                _hand_over_below(below, uid, gid, depth - 1)
            finally:
                os.close(below)
