"""`tailagent service install|uninstall`: a systemd unit written for this machine,
and the units shipped in `systemd/` (the same template, with systemd's specifiers).

The unit runs tailagent from where it is installed (the one-file binary, its
console script, or its interpreter with -P: see origin.command()), on a
unix socket in its runtime directory (only tailscaled and the service's
user can connect), with its state in systemd's state directory and the hardening
that still lets the agent work in its workspace. Installing writes the file and
says what to run next; it starts nothing by itself.
"""

from __future__ import annotations

import getpass
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from tailagent import origin
from tailagent.config import Listen
from tailagent.tsnet import CREDENTIAL_NAME

SYSTEM_UNIT_DIR = Path("/etc/systemd/system")
UNIT_NAME = "tailagent.service"

# What both units run and how systemd keeps it: the socket lives in the runtime
# directory ({runtime} is /run for the system unit, %t for a user manager).
_SERVICE = """\
Type=notify
NotifyAccess=main
WorkingDirectory={workspace}
{environment}ExecStart={command} serve{cwd}{config} \\
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
ReadWritePaths={workspace} -{home}/.claude -{home}/.claude.json -{home}/.codex \\
    -{home}/.gemini -{home}/.npm -{home}/.cache
# Relaxed: the agent reads the developer's home (dotfiles, git config, tools);
# ProtectHome would hide it.
ProtectHome=no
PrivateTmp=yes
PrivateDevices=yes
# Relaxed: ProtectKernelTunables and ProtectKernelLogs cover parts of /proc, and the
# kernel then refuses the /proc of each agent's own pid namespace ("bwrap: Can't mount
# proc"); every agent's sandbox makes /proc/sys and the rest read-only for it instead.
ProtectKernelModules=yes
ProtectControlGroups=yes
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
    user_mode: bool
    command: str  # what runs tailagent: its console script, or an interpreter with -P -m
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

    def render(self) -> str:
        config = f" --config {self.config}" if self.config else ""
        runtime = "%t" if self.user_mode else "/run"
        # --tsnet: the node in the process forwards to a loopback TCP port (whois
        # names callers by its ip:port), and the key arrives as a systemd credential.
        listen = f"--listen unix:{runtime}/{self.name}/tailagent.sock"
        if self.tsnet:
            listen = f"--tsnet --listen {Listen().bind()}"  # the default TCP listener
        credential = ""
        if self.auth_key_file is not None:
            credential = f"LoadCredential={CREDENTIAL_NAME}:{self.auth_key_file}\n"
        environment = f"Environment=PATH={self.search_path}\n" if self.search_path else ""
        cwd = f" --cwd {self.workspace}" if self.pass_cwd else ""
        service = _SERVICE.format(
            command=self.command, workspace=self.workspace, config=config, listen=listen,
            credential=credential, environment=environment, name=self.name, cwd=cwd,
        )  # fmt: skip
        template = _USER if self.user_mode else _SYSTEM
        return template.format(
            service=service, workspace=self.workspace, user=self.user, home=self.home,
            after="" if self.tsnet else " tailscaled.service",
        )  # fmt: skip

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
        False, "/usr/bin/env tailagent", "/home/%i", None, "%i", "/home/%i",
        name="tailagent-%i", search_path="/home/%i/.local/bin:/usr/local/bin:/usr/bin:/bin",
        pass_cwd=False,
    ),
    "tailagent.service": Unit(
        True, "/usr/bin/env tailagent", "%h", None, "", "%h",
        search_path="%h/.local/bin:/usr/local/bin:/usr/bin:/bin", pass_cwd=False,
    ),
}  # fmt: skip


def this_machine(
    user_mode: bool,
    workspace: Path,
    config: Path | None,
    tsnet: bool = False,
    auth_key_file: Path | None = None,
) -> Unit:
    user = os.environ.get("SUDO_USER") or getpass.getuser()
    home = os.path.expanduser(f"~{user}")
    return Unit(
        user_mode, origin.command(), str(workspace.resolve()),
        str(config) if config else None, user, home, tsnet, auth_key_file,
    )  # fmt: skip


def unit_path(user_mode: bool, dest: Path | None) -> Path:
    """Where the unit file is: --dest names a directory to hold tailagent.service, or
    (ending in .service, or an existing file) the unit file itself."""
    if dest is not None:
        if dest.is_dir() or (dest.suffix != ".service" and not dest.exists()):
            return dest / UNIT_NAME
        return dest
    if user_mode:
        base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
        return Path(base) / "systemd" / "user" / UNIT_NAME
    return SYSTEM_UNIT_DIR / UNIT_NAME


def next_commands(unit: Unit, path: Path, installed: bool, custom: bool) -> list[str]:
    """What to run after writing (or removing) the unit. A unit outside systemd's
    search path (`--dest`) is linked into it first."""
    ctl = "systemctl --user" if unit.user_mode else "sudo systemctl"
    if not installed:
        return [f"{ctl} disable --now {path.stem}", f"{ctl} daemon-reload"]
    lines = [f"{ctl} link {path}"] if custom else []
    lines += [f"{ctl} daemon-reload", f"{ctl} enable --now {path.stem}"]
    if unit.user_mode:
        lines.append(
            f"sudo loginctl enable-linger {unit.user}   # keep it running when you log out"
        )
    if unit.tsnet:
        journal = "journalctl --user" if unit.user_mode else "sudo journalctl"
        how = "its name and URL" if unit.auth_key_file else "the login URL to open (no key given)"
        lines.append(f"{journal} -u tailagent -f   # {how}")
    else:
        lines.append(f"sudo tailscale serve --bg unix:{unit.socket}   # put it on your tailnet")
    return lines


def install(
    user_mode: bool,
    workspace: Path,
    config: Path | None,
    dest: Path | None,
    *,
    tsnet: bool = False,
    auth_key_file: Path | None = None,
) -> int:
    if auth_key_file is not None and not tsnet:
        print("tailagent: --auth-key-file is for --tsnet units", file=sys.stderr)
        return 2
    if not workspace.is_dir():
        print(f"tailagent: the workspace {workspace} is not a directory", file=sys.stderr)
        return 2
    unit = this_machine(user_mode, workspace, config, tsnet, auth_key_file)
    path = unit_path(user_mode, dest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(unit.render())
    print(f"wrote {path}")
    if unit.user == "root" and not user_mode:
        print(
            "note: the unit runs the agent as root, with root's rights on this box; run "
            "`service install` as (or with sudo from) the user it should run as",
            file=sys.stderr,
        )
    print("nothing is started; next:")
    for line in next_commands(unit, path, installed=True, custom=dest is not None):
        print(f"  {line}")
    return 0


def uninstall(user_mode: bool, dest: Path | None) -> int:
    """Stops and disables the unit (when systemd runs this very file), then removes it:
    a unit file removed first would leave its service running and its links behind."""
    path = unit_path(user_mode, dest)
    unit = this_machine(user_mode, Path.cwd(), None)
    if not path.is_file():
        print(f"tailagent: no unit at {path}", file=sys.stderr)
        return 1
    systemctl = shutil.which("systemctl")
    ctl = [systemctl, *(["--user"] if user_mode else [])] if systemctl else []
    known = _systemd_file(ctl, path.name) if ctl else None
    if known is None:  # no systemd to ask: what to run once there is
        said, then = f"removed {path}", next_commands(unit, path, False, dest is not None)
    elif _same_file(known, path):
        refusal = _disable(ctl, path)
        if refusal:
            print(refusal, file=sys.stderr)
            return 1
        said, then = f"stopped, disabled and removed {path}", [f"{_shown(ctl)} daemon-reload"]
    else:
        other = f"; its {path.name} is {known}, left alone" if known else ""
        said, then = f"removed {path} (systemd ran nothing from it{other})", []
    try:
        path.unlink()
    except OSError as exc:
        print(f"tailagent: cannot remove {path}: {exc.strerror}", file=sys.stderr)
        return 1
    print(said + ("; next:" if then else ""))
    for line in then:
        print(f"  {line}")
    return 0


def _shown(ctl: list[str]) -> str:
    """systemctl as a person types it: `systemctl --user`, or `sudo systemctl`."""
    return "systemctl --user" if "--user" in ctl else "sudo systemctl"


def _disable(ctl: list[str], path: Path) -> str:
    """Stops and disables the unit; "" when done, else the line that says why not."""
    done = subprocess.run(
        [*ctl, "disable", "--now", path.name], capture_output=True, text=True, check=False
    )
    if done.returncode == 0:
        return ""
    why = (done.stderr.strip().splitlines() or ["it gave no reason"])[-1]
    return (
        f"tailagent: cannot stop and disable {path.name}: {why}; the unit stays at {path}: "
        f"run `{_shown(ctl)} disable --now {path.stem}`, then uninstall again"
    )


def _systemd_file(ctl: list[str], name: str) -> str | None:
    """The file systemd loads the unit `name` from ("" when it knows no such unit), or
    None when systemd does not answer (not booted with it, no user manager)."""
    shown = subprocess.run(
        [*ctl, "show", "--property=FragmentPath", "--value", name],
        capture_output=True, text=True, check=False,
    )  # fmt: skip
    return shown.stdout.strip() if shown.returncode == 0 else None


def _same_file(known: str, path: Path) -> bool:
    """Whether systemd's unit is this file (a `systemctl link` is a symlink to it): a
    unit of the same name elsewhere is another install, never disabled from here."""
    return bool(known) and Path(known).resolve() == path.resolve()
