"""`tailagent service install|uninstall`: a systemd unit written for this machine.

The unit runs tailagent from the interpreter it is installed in, on a unix socket
in its runtime directory (only tailscaled and the service's user can connect),
with its state in systemd's state directory and the hardening that still lets
the agent work in its workspace. Installing writes the file and says what to run
next; it starts nothing by itself.
"""

from __future__ import annotations

import getpass
import os
import sys
from dataclasses import dataclass
from pathlib import Path

SYSTEM_UNIT_DIR = Path("/etc/systemd/system")
UNIT_NAME = "tailagent.service"
TSNET_LISTEN = "127.0.0.1:3008"
CREDENTIAL_NAME = "tailscale-authkey"  # what tailagent.tsnet.node looks for

# What both units run and how systemd keeps it: the socket lives in the runtime
# directory ({runtime} is /run for the system unit, %t for a user manager).
_SERVICE = """\
Type=notify
NotifyAccess=main
WorkingDirectory={workspace}
ExecStart={python} -m tailagent serve --cwd {workspace}{config} \\
    {listen}
{credential}StateDirectory=tailagent
StateDirectoryMode=0700
RuntimeDirectory=tailagent
RuntimeDirectoryMode=0700
Restart=on-failure
RestartSec=2
WatchdogSec=30
TimeoutStopSec=30
UMask=0077
NoNewPrivileges=yes
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
ProtectKernelTunables=yes
ProtectKernelModules=yes
ProtectKernelLogs=yes
ProtectControlGroups=yes
ProtectClock=yes
ProtectHostname=yes
RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6{netlink}
RestrictNamespaces=yes
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
    python: str
    workspace: Path
    config: Path | None
    user: str
    home: Path
    tsnet: bool = False
    auth_key_file: Path | None = None

    def render(self) -> str:
        config = f" --config {self.config}" if self.config else ""
        runtime = "%t" if self.user_mode else "/run"
        # --tsnet: the node in the process forwards to a loopback TCP port (whois
        # names callers by its ip:port), and the key arrives as a systemd credential.
        listen = f"--listen unix:{runtime}/tailagent/tailagent.sock"
        if self.tsnet:
            listen = f"--tsnet --listen {TSNET_LISTEN}"
        credential = ""
        if self.auth_key_file is not None:
            credential = f"LoadCredential={CREDENTIAL_NAME}:{self.auth_key_file}\n"
        service = _SERVICE.format(
            python=self.python, workspace=self.workspace, config=config, listen=listen,
            credential=credential, runtime=runtime,
        )  # fmt: skip
        template = _USER if self.user_mode else _SYSTEM
        return template.format(
            service=service, workspace=self.workspace, user=self.user, home=self.home,
            after="" if self.tsnet else " tailscaled.service",
            # tsnet watches the host's routes over netlink.
            netlink=" AF_NETLINK" if self.tsnet else "",
        )  # fmt: skip

    @property
    def socket(self) -> str:
        runtime = os.environ.get("XDG_RUNTIME_DIR", f"/run/user/{os.getuid()}")
        return (
            f"{runtime}/tailagent/tailagent.sock"
            if self.user_mode
            else "/run/tailagent/tailagent.sock"
        )


def this_machine(
    user_mode: bool,
    workspace: Path,
    config: Path | None,
    tsnet: bool = False,
    auth_key_file: Path | None = None,
) -> Unit:
    user = os.environ.get("SUDO_USER") or getpass.getuser()
    home = Path(os.path.expanduser(f"~{user}"))
    return Unit(
        user_mode, sys.executable, workspace.resolve(), config, user, home, tsnet, auth_key_file
    )


def unit_path(user_mode: bool, dest: Path | None) -> Path:
    if dest is not None:
        return dest / UNIT_NAME
    if user_mode:
        base = os.environ.get("XDG_CONFIG_HOME") or str(Path.home() / ".config")
        return Path(base) / "systemd" / "user" / UNIT_NAME
    return SYSTEM_UNIT_DIR / UNIT_NAME


def next_commands(unit: Unit, installed: bool) -> list[str]:
    ctl = "systemctl --user" if unit.user_mode else "sudo systemctl"
    if not installed:
        return [f"{ctl} disable --now tailagent", f"{ctl} daemon-reload"]
    lines = [f"{ctl} daemon-reload", f"{ctl} enable --now tailagent"]
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
    unit = this_machine(user_mode, workspace, config, tsnet, auth_key_file)
    path = unit_path(user_mode, dest)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(unit.render())
    print(f"wrote {path}")
    print("nothing is started; next:")
    for line in next_commands(unit, installed=True):
        print(f"  {line}")
    return 0


def uninstall(user_mode: bool, dest: Path | None) -> int:
    path = unit_path(user_mode, dest)
    unit = this_machine(user_mode, Path.cwd(), None)
    if not path.exists():
        print(f"tailagent: no unit at {path}", file=sys.stderr)
        return 1
    path.unlink()
    print(f"removed {path}; next:")
    for line in next_commands(unit, installed=False):
        print(f"  {line}")
    return 0
