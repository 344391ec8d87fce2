"""Each conversation's fence: what its agent sees, as one bwrap command line.

Asking covers what an agent asks about; the fence covers the rest (its own `open()`,
`git`, signals, sockets). Every process tailagent starts for a conversation's agent (the
agent, a warm spare made for that conversation's directory, each terminal command an
answer approved) starts through `Fence.wrap`, and what those start inherits the fence.
The agent shares nothing with the server or another conversation that it does not need.
What a fenced agent has:

- its conversation's directory, read-write; a private temporary directory kept beside
  it on disk (`/tmp` and `TMPDIR` inside), shared by its agent and its terminals;
- the system, its PATH's toolchains and its own programs, read-only, and nothing else
  of the box's files (view.py: an allowlist);
- a home of its own: an empty one, with private copies of its agent's login state, its
  settings read-only (home.py) and the person's git identity in its environment;
- its own processes only (a pid namespace: nothing of the server or of another
  conversation in `/proc`, no signal reaches them), no capabilities even when the server
  runs as root, a seccomp filter (seccomp.py), and the kernel's knobs read-only;
- a network of its own, whose only way out is its conversation's own proxy (proxy.py):
  the public internet with `sandbox.network = "on"`, the hosts named with "allowlist".

Order matters to bwrap, so the command line is written in layers: the system; the
places that are the agent's own but hidden (its home, /run, /tmp); what is shown there
(toolchains, programs); what must stay hidden whatever was shown (the state dir, the
server's sockets); then the conversation's own pieces on top.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shlex
import shutil
import sys
import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

from tailagent.agent_kinds.kind import AgentHome
from tailagent.config import SandboxSettings
from tailagent.sandbox import bwrap, exits, home, seccomp, users, view
from tailagent.sandbox.cgroups import Cgroups, Group
from tailagent.sandbox.exits import Exits
from tailagent.sandbox.home import caches

log = logging.getLogger("tailagent.sandbox")

PRIVATE_TMP = Path("/tmp")
SANDBOXES = "sandboxes"  # <state dir>/sandboxes/<key>: one conversation's private things
SECCOMP_FILTER = ".seccomp.bpf"  # in SANDBOXES: the filter every fence loads (seccomp.py)
SWEEP_EVERY = 600.0  # seconds between looks for the private things of gone conversations
RUN_KEPT = (Path("/run/systemd/resolve"),)  # /etc/resolv.conf points here on some boxes
# Where a fenced agent finds the folder of its conversation's socket to tailagent's own
# tools (delegation/tool_socket.py): the one piece of the server it reaches.
TOOLS_INSIDE = Path("/run/tailagent")


@dataclass(frozen=True)
class Fence:
    """One conversation's sandbox. An empty `options` runs programs unfenced
    (`sandbox.mode = "off"`): the same calls, nothing around them."""

    directory: Path
    options: tuple[str, ...]
    network: str
    private: Path | None = None  # where its launchers are written (outside its view)
    inside: tuple[str, ...] = ()  # what runs first inside (the network bridge)
    cgroups: Cgroups | None = None  # where each of its processes gets a cgroup of its own

    def wrap(
        self, argv: Sequence[str], cwd: Path | None = None, group: Group | None = None
    ) -> list[str]:
        """`argv` as it runs inside the fence, from `cwd` (the conversation's directory
        by default), in `group` if given (see `group`)."""
        if not self.options:
            return list(argv)
        where = str(cwd or self.directory)
        entering = group.entering() if group is not None else []
        return [*entering, *self.options, "--chdir", where, "--", *self.inside, *argv]

    def group(self) -> Group | None:
        """A cgroup of its own for a process of this fence that is to be frozen between
        turns (cgroups.py); None where the server has none to give, or unfenced."""
        return self.cgroups.new() if self.cgroups is not None and self.options else None

    def retire(self, group: Group | None) -> None:
        """A process started in `group` has ended."""
        if group is not None and self.cgroups is not None:
            self.cgroups.retire(group)

    def launcher(self, program: Path, group: Group | None = None) -> Path:
        """An executable that runs `program` (with its arguments) inside the fence, in
        `group` if given: for a library that takes a program's path, not a command line
        (claude-agent-sdk's `cli_path`). It lives outside every fence, so no agent can
        change it."""
        if not self.options or self.private is None:
            return program
        script = self.private / f"launch-{program.name}"
        body = "#!/bin/sh\nexec " + shlex.join(self.wrap([str(program)], group=group)) + ' "$@"\n'
        temporary = script.with_suffix(".new")
        temporary.write_text(body)
        temporary.chmod(0o700)
        temporary.replace(script)
        return script


def _made_private(*folders: Path) -> Path:
    """Makes each folder 0700 itself, never as the parent of another (Python makes those
    0777 less the umask: `sandboxes` was one, 0755, which each start then closed, saying
    the state dir had been open); the last."""
    for folder in folders:
        folder.mkdir(exist_ok=True, mode=0o700)
    return folders[-1]


def _interpreter() -> str:
    """The Python that runs the network bridge inside a fence (it needs no venv): the
    server's own, or the system's under the one-file binary, which carries none."""
    if getattr(sys, "frozen", False):
        return shutil.which("python3") or "/usr/bin/python3"
    return os.path.realpath(sys.executable)


def _interpreter_prefix() -> str:
    """Where the bridge's interpreter keeps its standard library."""
    return "/usr" if getattr(sys, "frozen", False) else sys.base_prefix


def _existing(paths: Iterable[Path]) -> list[Path]:
    return [p for p in paths if p.exists() or p.is_symlink()]


@dataclass(frozen=True)
class FenceReport:
    """How this server fences its agents, in the two words every report gives: its
    mode ("on", "off", "none needed") and the agents' network. Handed from the start
    to /healthz, the desk, each turn's metadata and the audit's rows."""

    mode: str
    network: str

    @property
    def unfenced(self) -> bool:
        """Agent processes run as the service user, with nothing around them."""
        return self.mode == "off"

    def words(self) -> str:
        """As the audit log keeps it beside each decision."""
        return f"sandbox {self.mode}, network {self.network}"

    def as_json(self) -> dict[str, str]:
        return {"mode": self.mode, "network": self.network}


class Sandbox:
    """Makes the fence of each conversation's directory, the same way for every agent.

    `base` is the person's checkout when conversations have repositories of their own
    (worktree isolation); `shared_objects` names the git objects those borrow. `sockets`
    are the server's and tailscaled's, hidden wherever they are. `programs` are the
    agent's own files (its executable, its interpreter's prefix), shown read-only even
    where they live in a hidden place.
    """

    def __init__(
        self,
        settings: SandboxSettings,
        *,
        agent: str,
        state_dir: Path,
        base: Path | None = None,
        shared_objects: Callable[[], tuple[Path, ...]] | None = None,
        sockets: Sequence[Path] = (),
        programs: Sequence[Path] = (),
        user_home: Path | None = None,
        runs_processes: bool = True,
    ) -> None:
        self.settings = settings
        # The echo agent runs inside the server's process: nothing to fence, no check.
        self.needed = runs_processes
        self.agent_home: AgentHome = home.agent_home(agent)
        self.users = users.AgentUsers(state_dir.resolve(), state_dir.resolve() / SANDBOXES,
                                      settings.user or None)  # fmt: skip
        self._agent = agent
        self._state_dir = state_dir.resolve()
        self._base = base.resolve() if base is not None else None
        self._shared_objects = shared_objects
        self._sockets = [Path(s) for s in sockets]
        self._programs = [Path(p) for p in programs]
        self._home = (user_home or Path.home()).resolve()
        self._bwrap: Path | None = None
        self._seccomp: Path | None = None
        self.kernel = ""  # what the start's probe saw of the kernel's knobs and the filter
        self.cgroups: Cgroups | None = None  # each agent's own cgroup, where there is a tree
        self.freezing = ""  # what freezes an agent between turns, in words
        # What each network mode's proxies let through, and each conversation's proxy,
        # by the folder of its socket.
        self._exits: Exits | None = None  # each conversation's way out, once started
        self._swept = 0.0
        self._identity: dict[str, str] = {}

    @property
    def on(self) -> bool:
        """Agent processes run fenced."""
        return self.settings.mode == "on" and self.needed

    def report(self) -> FenceReport:
        """What reports say: the start's log, /healthz, doctor, the desk, the audit."""
        if not self.needed:
            return FenceReport("none needed", "none")
        if not self.on:
            return FenceReport("off", "unfenced")
        return FenceReport("on", self.settings.network)

    def describe(self) -> str:
        if not self.needed:
            return "none needed: the echo agent runs no process of its own"
        if not self.on:
            return "OFF (sandbox.mode = off): agents run unfenced, as the service user"
        reach = self._exits.describe(self.settings.network) if self._exits else ""
        return (
            f"on (bubblewrap; network: {self.settings.network}, {reach}; {self.kernel}; "
            f"between turns frozen by {self.freezing})"
        )

    async def start(self) -> None:
        """Checks a fence can be made here (SandboxUnavailable says why not and what to
        do), with the kernel's knobs out of its reach, and readies the proxies."""
        if not self.on:
            return
        self._bwrap = await bwrap.check(True, self.settings.bwrap)
        self.users.check()
        (self._state_dir / SANDBOXES).mkdir(parents=True, exist_ok=True, mode=0o700)
        self._seccomp = seccomp.write_filter(self._state_dir / SANDBOXES / SECCOMP_FILTER)
        self.kernel = await bwrap.check_kernel(self._bwrap, view.proc_options(), self._seccomp)
        self.cgroups, self.freezing = Cgroups.find()
        self._exits = Exits(self.settings, self.agent_home.hosts, _interpreter())
        # The bridge's script and its interpreter's prefix, shown inside.
        self._programs += [Path(self._exits.bridge[3]), Path(_interpreter_prefix())]
        self._sweep()

    async def aclose(self) -> None:
        if self._exits is not None:
            await self._exits.aclose()
        if self.cgroups is not None:
            await self.cgroups.close()

    def proxy_refusals(self) -> int:
        """Connections the proxies refused to fenced agents since the start (/metrics)."""
        return self._exits.refusals() if self._exits is not None else 0

    # ---- one conversation's fence ---------------------------------------------------

    def give_identity(self, name: str, email: str) -> None:
        """The person's git identity, which an agent's own commits carry (their git
        config is not in its home: it may hold credential helpers and tokens)."""
        self._identity = {
            f"GIT_{who}_{what}": value
            for who in ("AUTHOR", "COMMITTER")
            for what, value in (("NAME", name), ("EMAIL", email))
            if value
        }

    def show(self, path: Path) -> None:
        """One more of the agent's own files to show read-only in every fence made from
        now on (an agent tailagent installed)."""
        self._programs.append(path)

    def private_dir(self, directory: Path) -> Path:
        """Where a conversation's private things live: its temp dir, its home copies."""
        key = hashlib.sha256(str(directory.resolve()).encode()).hexdigest()[:20]
        return self._state_dir / SANDBOXES / key

    def fence(
        self,
        directory: Path,
        network: str | None = None,
        home: bool = True,
        tools: Path | None = None,
    ) -> Fence:
        """The fence of the conversation working in `directory`. `network` and `home`
        are for tailagent's own work in a fence (installing an agent: the network on, no
        copies of an agent's login). `tools`, the folder of the conversation's socket to
        tailagent's tools, is bound at TOOLS_INSIDE."""
        directory = directory.resolve()
        network = network or self.settings.network
        if not self.on:
            return Fence(directory, (), "unfenced")
        assert self._bwrap is not None, "Sandbox.start() checks bwrap first"
        if time.monotonic() - self._swept > SWEEP_EVERY:
            self._sweep()  # the private things of conversations merged or discarded since
        private = self.private_dir(directory)
        tmp = _made_private(private.parent, private, private / "tmp")
        (private / "directory").write_text(str(directory))
        # tailagent's own work in a fence (home=False) runs as the server.
        uid = self._agent_uid(directory, private) if self.users.enabled and home else None
        mounts = view.Mounts()
        view.system(mounts)
        if uid is not None and not self.users.named():  # its name in the box's tables
            for name, table in users.tables(uid, self._home, private).items():
                mounts.ro(table, Path("/etc", name))
        self._own_places(mounts, tmp)
        if self._base is not None and self._base != directory:
            mounts.hide(self._base)  # where /tmp shows it; a venv in it is shown next
        for folder in self._shown(directory):
            mounts.ro(folder)
        self._hide_foreign(mounts)
        if home:
            if uid is not None:
                self._return_logins()  # before this conversation's copy is brought up to date
            self._home_layers(mounts, private / "home", uid)
        for objects in self._shared_objects() if self._shared_objects else ():
            mounts.ro(objects)  # the base's git objects, which its repository borrows
        mounts.rw(directory)
        if tools is not None:
            mounts.rw(tools, TOOLS_INSIDE)
        environment = caches(self._home, PRIVATE_TMP) | self._identity
        assert self._seccomp is not None and self._exits is not None
        proxied = self._exits.proxied(network)
        if proxied:  # before the sealing: it mounts in /run
            exit_folder = self._exits.folder(private, network, directory.name)
            mounts.args += ["--ro-bind", str(exit_folder), str(exits.PROXY_INSIDE)]
            environment |= self._exits.environment()
        options = [*bwrap.with_seccomp(self._seccomp), str(self._bwrap), *mounts.args]
        options += [*mounts.sealed(), "--unshare-net", "--seccomp", str(bwrap.SECCOMP_FD)]
        for name, value in environment.items():
            options += ["--setenv", name, value]
        options += ["--cap-drop", "ALL", *bwrap.NAMESPACE_FLAGS]
        options += ["--die-with-parent", "--new-session"]
        inside = list(self._exits.bridge if proxied else ())
        if uid is not None:
            self._hand_over(directory, private, tools, uid)
            options += [arg for cap in users.KEPT_CAPABILITIES for arg in ("--cap-add", cap)]
            inside = [*self.users.inside(uid), *inside]
        return Fence(directory, tuple(options), network, private, tuple(inside), self.cgroups)

    def hand_over(self, directory: Path) -> None:
        """Before a turn of the conversation in `directory`: what tailagent wrote there as
        root since (its commits, a merge's checkout) becomes its agent's uid's, and a login
        its agent refreshed reaches the person's file. Nothing when agents run as the
        server's own uid."""
        directory = directory.resolve()
        private = self.private_dir(directory)
        if not (self.on and self.users.enabled and (private / users.UID_FILE).exists()):
            return
        if not directory.is_relative_to(self._state_dir):
            return  # the person's checkout: never handed to another uid
        uid = self.users.uid_of(private)
        users.hand_over(directory, uid, self.users.gid(uid))
        self._return_logins()

    def _agent_uid(self, directory: Path, private: Path) -> int | None:
        """The uid a root server runs this directory's agent as: a conversation's own, for
        a repository tailagent made; for the person's checkout itself (shared isolation),
        its owner, whose files tailagent never hands to another (None: root owns it, and
        the start said what that means)."""
        if directory.is_relative_to(self._state_dir):
            return self.users.uid_of(private)
        owner = directory.stat().st_uid
        return owner or None

    def _hand_over(self, directory: Path, private: Path, tools: Path | None, uid: int) -> None:
        """The agent's own pieces belong to its uid: its directory (one tailagent made),
        temp dir, home copies, proxy sockets and tools socket (bound read-only where it must
        not change them)."""
        mine = directory.is_relative_to(self._state_dir)
        for path in (directory if mine else None, private / "home", *private.glob("net-*"), tools):
            if path is not None and path.exists():
                users.hand_over(path, uid, self.users.gid(uid))
        # Its temp dir itself, not what is in it: the agent's own files are its already,
        # and the folders bwrap made there for mount points (a state dir under /tmp) are
        # what bwrap, root without capabilities, goes through to the agent's directory.
        os.chown(private / "tmp", uid, self.users.gid(uid))
        (private / "tmp").chmod(0o755)

    def _return_logins(self) -> None:
        """A login any conversation's agent refreshed in its copy goes back to the person's
        file, which every copy is then made from (a refresh revokes the old token)."""
        if any(os.environ.get(name) for name in self.agent_home.keys):
            return  # logged in by a key: the login file is only ever read
        for login in self.agent_home.logins:
            for copy in (self._state_dir / SANDBOXES).glob(f"*/home/{login}"):
                home.return_login(copy, self._home / login)

    def _own_places(self, mounts: view.Mounts, tmp: Path) -> None:
        """The places that are the agent's own, empty but for what is put there: its home
        (none of the service user's files), /run (none of the box's sockets, but the
        resolver's), /tmp (its private temp dir). /tmp first: a home under it (a test's)
        is emptied on top of it, not hidden under it."""
        mounts.rw(tmp, PRIVATE_TMP)
        mounts.empty(Path("/run"))
        for kept in _existing(RUN_KEPT):
            mounts.ro(kept)
        if self._home != Path("/"):
            mounts.empty(self._home)

    def _shown(self, directory: Path) -> list[Path]:
        """The toolchains on its PATH, its own programs, and what `sandbox.expose` names:
        the folders shown read-only (view.py)."""
        inside = [self._base] if self._base is not None and self._base != directory else []
        folders = view.path_folders(os.environ.get("PATH", ""), self._home)
        folders += view.program_folders(self._programs, inside, self._home)
        folders += [p for p in self.settings.expose if p.exists()]
        state = self._state_dir
        return [f for f in view.outermost(folders) if not state.is_relative_to(f)]

    def _hide_foreign(self, mounts: view.Mounts) -> None:
        """What must stay hidden wherever it lies under something shown: the state dir
        (tokens, keys, the database, other conversations), the server's and tailscaled's
        sockets, and whatever `sandbox.hide` names."""
        mounts.hide(self._state_dir)
        for extra in self.settings.hide:
            mounts.hide(extra)
        for socket in self._sockets:
            mounts.hide(socket)

    def _home_layers(self, mounts: view.Mounts, copies: Path, uid: int | None) -> None:
        """The agent's entries of the home, each a private copy. Its login is the person's
        file itself when the agent runs as the server's uid; as a uid of its own, which
        cannot open the person's file, a copy kept in step with it (`_return_logins`)."""
        agent = self.agent_home
        for entry in agent.writable:
            copy = copies / entry
            home.seed(self._home / entry, copy)
            mounts.rw(copy, self._home / entry)
        keyed = any(os.environ.get(name) for name in agent.keys)
        for login in agent.logins:
            real = self._home / login
            if uid is not None:
                home.take_login(real, copies / login)
            elif real.is_file() and not real.is_symlink():
                # Written only for a refresh: with a key in the environment, read-only.
                (mounts.ro if keyed else mounts.rw)(real)
        for fixed in agent.fixed:
            settings = home.fixed_file(self._home, copies, fixed, readable=uid is not None)
            mounts.ro(settings, self._home / fixed)

    def _sweep(self) -> None:
        """Private things (temp files, login copies) of directories that are gone go
        too: a conversation merged or discarded, here or while the server was down."""
        self._swept = time.monotonic()
        folder = self._state_dir / SANDBOXES
        if not folder.is_dir():
            return
        for private in folder.iterdir():
            marker = private / "directory"
            if private.name.startswith(".") or not marker.is_file():
                continue
            if not Path(marker.read_text()).is_dir():
                if self._exits is not None:
                    self._exits.stop(private)
                shutil.rmtree(private, ignore_errors=True)
