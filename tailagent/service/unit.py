"""The unit: written for this machine by `service install`, and shipped in
`systemd/` (the same template, with systemd's specifiers).

The unit runs tailagent from where it is installed (the one-file binary, its
console script, or its interpreter with -P: see origin.command()), on a
unix socket in its runtime directory (only tailscaled and the service's
user can connect), with its state in systemd's state directory and the hardening
that still lets the agent work in its workspace.
"""

from __future__ import annotations

import getpass
import os
from dataclasses import dataclass
from pathlib import Path

from tailagent.agent_kinds import KINDS
from tailagent.config import Listen
from tailagent.process import origin
from tailagent.service.values import exec_word, list_word, unwritable
from tailagent.tailnet.tsnet.auth_key import CREDENTIAL_NAME

SYSTEM_UNIT_DIR = Path("/etc/systemd/system")
UNIT_NAME = "tailagent.service"

# What both units run and how systemd keeps it: the socket lives in the runtime
# directory ({runtime} is /run for the system unit, %t for a user manager).
_SERVICE = """\
Type=notify
NotifyAccess=main
WorkingDirectory={working}
{environment}ExecStart={command} serve{cwd}{config}{options} \\
    {listen}
{credential}StateDirectory={name}
StateDirectoryMode=0700
RuntimeDirectory={name}
RuntimeDirectoryMode=0700
Restart=on-failure
RestartSec=2
WatchdogSec=30
TimeoutStopSec=30
UMask=0077
NoNewPrivileges=yes
# Each connection and stream holds a file descriptor: the soft limit stays systemd's
# 1024 (for what waits with select()), and tailagent raises its own to this hard one.
LimitNOFILE=1024:524288
# A cgroup tree of the service's own: each agent process gets a cgroup in it, which the
# kernel freezes between turns (else tailagent stops them with signals).
Delegate=yes
"""

_SYSTEM = """\
[Unit]
Description=tailagent: a coding agent on this tailnet, over A2A
After=network-online.target{after}
Wants=network-online.target

[Service]
User={user}
{service}
ProtectSystem=strict
# The workspace is where the agent works; the other paths are where the agents
# keep their logins and caches (a "-" path may be missing).
ReadWritePaths={writable}
# Relaxed: the agent reads the developer's home (dotfiles, git config, tools);
# ProtectHome would hide it.
ProtectHome=no
PrivateTmp=yes
PrivateDevices=yes
# Relaxed: ProtectKernelTunables and ProtectKernelLogs cover parts of /proc, and the
# kernel then refuses the /proc of each agent's own pid namespace ("bwrap: Can't mount
# proc"); every agent's sandbox makes /proc/sys and the rest read-only for it instead.
ProtectKernelModules=yes
# Relaxed: ProtectControlGroups would make the service's own cgroup tree (Delegate=yes)
# read-only too; the rest of /sys/fs/cgroup stays root's, which the service user is not.
ProtectClock=yes
ProtectHostname=yes
# AF_NETLINK: the kernel names a loopback connection's owner (sock_diag), and tsnet
# watches the host's routes.
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6 AF_NETLINK
# Exactly the kinds of namespace each agent's sandbox is made of (bubblewrap).
RestrictNamespaces=user mnt pid ipc uts cgroup net
RestrictRealtime=yes
RestrictSUIDSGID=yes
LockPersonality=yes
SystemCallArchitectures=native
# Relaxed: MemoryDenyWriteExecute stays off, since Node.js (npx agents) JIT-compiles.

[Install]
WantedBy=multi-user.target
"""

_USER = """\
[Unit]
Description=tailagent: a coding agent on this tailnet, over A2A
After=network-online.target

[Service]
{service}\
# Relaxed: a user manager cannot apply the namespace-based hardening of the system
# unit (ProtectSystem, PrivateTmp, ...) without unprivileged user namespaces.

[Install]
WantedBy=default.target
"""


@dataclass(frozen=True)
class Unit:
    """A unit's values as they are (a path, a user name), each escaped as its directive
    reads it when rendered: none of them can add a line or a word to the unit."""

    user_mode: bool
    command: tuple[str, ...]  # what runs tailagent: its console script, or python -P -m
    workspace: str
    config: str | None
    user: str
    home: str
    tsnet: bool = False
    auth_key_file: Path | None = None
    name: str = "tailagent"  # of the state and runtime directories
    search_path: str | None = None  # PATH, for a command of `/usr/bin/env tailagent`
    # The shipped units leave the workspace to WorkingDirectory= (so $TAILAGENT_CWD,
    # set with `systemctl edit`, can still choose another: a flag would win over it).
    pass_cwd: bool = True
    options: tuple[str, ...] = ()  # more of serve's options, as its command line has them
    # The shipped templates: a % in their values is systemd's specifier (%h, %i), kept.
    specifiers: bool = False

    def refusal(self) -> str:
        """Why a value of this unit cannot be written into it ("" when all can)."""
        named = [("the command that runs tailagent", word) for word in self.command]
        named += [("the workspace", self.workspace), ("the user", self.user)]
        named += [("the home", self.home), ("the config file", self.config or "")]
        named += [("the auth key file", str(self.auth_key_file or ""))]
        named += [("the search path", self.search_path or "")]
        option = ""
        for word in self.options:
            option = word if word.startswith("--") else option
            named.append((f"the serve option {option}", word))
        whole_lines = ("the workspace", "the user", "the auth key file")
        return unwritable(named, whole_lines)

    def render(self) -> str:
        config = f" --config {exec_word(self.config)}" if self.config else ""
        options = "".join(f" {exec_word(word)}" for word in self.options)
        runtime = "%t" if self.user_mode else "/run"
        # --tsnet: the node in the process forwards to a loopback TCP port (whois
        # names callers by its ip:port), and the key arrives as a systemd credential.
        listen = f"--listen unix:{runtime}/{self.name}/tailagent.sock"
        if self.tsnet:
            listen = f"--tsnet --listen {Listen().bind()}"  # the default TCP listener
        credential = ""
        if self.auth_key_file is not None:
            key_file = self._literal(str(self.auth_key_file))
            credential = f"LoadCredential={CREDENTIAL_NAME}:{key_file}\n"
        environment = ""
        if self.search_path:
            environment = f"Environment={list_word(self._literal(f'PATH={self.search_path}'))}\n"
        cwd = f" --cwd {exec_word(self.workspace)}" if self.pass_cwd else ""
        service = _SERVICE.format(
            command=" ".join(exec_word(word) for word in self.command),
            working=self._literal(self.workspace), config=config, listen=listen,
            credential=credential, environment=environment, name=self.name, cwd=cwd,
            options=options,
        )  # fmt: skip
        template = _USER if self.user_mode else _SYSTEM
        return template.format(
            service=service, writable=self._writable(), user=self._literal(self.user),
            after="" if self.tsnet else " tailscaled.service",
        )  # fmt: skip

    def _literal(self, text: str) -> str:
        """A value as the unit holds it: a % doubled, unless it is a specifier of the
        shipped templates."""
        return text if self.specifiers else text.replace("%", "%%")

    def _writable(self) -> str:
        """ReadWritePaths=: the workspace, and where the agents keep their logins (each
        agent's description says its own) and caches in the home (a "-" path may be
        missing), a word each."""
        agents = dict.fromkeys(entry for kind in KINDS.values() for entry in kind.home.writable)
        extra = (*agents, ".npm", ".cache")
        paths = [self.workspace, *(f"-{self.home}/{name}" for name in extra)]
        lines = [""]
        for word in (list_word(self._literal(path)) for path in paths):
            if lines[-1] and len("ReadWritePaths=" + lines[-1] + word) > 88:
                lines.append("")
            lines[-1] += f" {word}" if lines[-1] else word
        return " \\\n    ".join(lines)

    @property
    def socket(self) -> str:
        runtime = os.environ.get("XDG_RUNTIME_DIR", f"/run/user/{os.getuid()}")
        return (
            f"{runtime}/{self.name}/tailagent.sock"
            if self.user_mode
            else f"/run/{self.name}/tailagent.sock"
        )


# The units in systemd/: for tailagent installed the usual ways (pipx, pip --user: in
# ~/.local/bin; pip or pipx system-wide: in /usr/local/bin), found on a PATH of those.
SHIPPED = {
    "tailagent@.service": Unit(
        False, ("/usr/bin/env", "tailagent"), "/home/%i", None, "%i", "/home/%i",
        name="tailagent-%i", search_path="/home/%i/.local/bin:/usr/local/bin:/usr/bin:/bin",
        pass_cwd=False, specifiers=True,
    ),
    "tailagent.service": Unit(
        True, ("/usr/bin/env", "tailagent"), "%h", None, "", "%h",
        search_path="%h/.local/bin:/usr/local/bin:/usr/bin:/bin", pass_cwd=False,
        specifiers=True,
    ),
}  # fmt: skip


def this_machine(
    user_mode: bool,
    workspace: Path,
    config: Path | None,
    tsnet: bool = False,
    auth_key_file: Path | None = None,
    options: tuple[str, ...] = (),
) -> Unit:
    user = os.environ.get("SUDO_USER") or getpass.getuser()
    home = os.path.expanduser(f"~{user}")
    return Unit(
        user_mode, origin.command(), str(workspace.resolve()),
        str(config) if config else None, user, home, tsnet, auth_key_file, options=options,
    )  # fmt: skip


def unit_path(user_mode: bool, dest: Path | None) -> Path:
    """Where the unit file is: --dest names a directory to hold tailagent.service, or
    (ending in .service, or an existing file) the unit file itself."""
    if dest is not None:
        if dest.is_dir() or (dest.suffix != ".service" and not dest.exists()):
            return dest / UNIT_NAME
        return dest
    return unit_dir(user_mode) / UNIT_NAME


def unit_dir(user_mode: bool) -> Path:
    """Where systemd looks for this mode's units that an administrator installs."""
    if not user_mode:
        return SYSTEM_UNIT_DIR
    base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
    return Path(base) / "systemd" / "user"
