"""The shipped system unit lets each agent's sandbox be made.

A box that boots the service and then refuses to start it is the worst first day, and
systemd's hardening can forbid exactly what bubblewrap needs (`RestrictNamespaces=yes`
forbids every namespace; `ProtectKernelTunables=` covers /proc, after which the kernel
refuses a /proc for a new pid namespace). No systemd runs as PID 1 on the machines the
suite runs on, so the unit's settings that touch this are applied to a test process by
hand, as systemd would apply them (a mount namespace with the same mounts, the unit's
user, no new privileges), and the sandbox's own check runs inside. The same with
`ProtectKernelTunables=yes` put back must fail: the check can tell.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tailagent.sandbox import bwrap
from tailagent.service import SHIPPED

UNIT = "tailagent@.service"
# Kinds of namespace, by the bwrap flag that makes them (mnt: always; user: unprivileged).
KINDS = {
    "--unshare-pid": "pid",
    "--unshare-ipc": "ipc",
    "--unshare-uts": "uts",
    "--unshare-cgroup-try": "cgroup",
    "--unshare-net": "net",
}

needs = pytest.mark.skipif(
    shutil.which("unshare") is None or shutil.which("runuser") is None or bwrap.find() is None,
    reason="needs unshare, runuser (util-linux) and bubblewrap (.ci/run installs it)",
)


def directives(text: str) -> dict[str, str]:
    return dict(
        line.split("=", 1) for line in text.splitlines() if "=" in line and line[0].isalpha()
    )


def as_the_unit(unit: dict[str, str]) -> str:
    """A shell script that sets up what the unit's settings would, then runs the sandbox
    check as the unit's user (`nobody`, as `tailagent@nobody`)."""
    steps = ["set -e", "mount --make-rprivate /"]
    if unit.get("PrivateTmp") == "yes":
        steps.append("mount -t tmpfs tmpfs /tmp")
    if unit.get("ProtectKernelTunables") == "yes":
        steps += [
            f"mount --bind {p} {p} && mount -o remount,bind,ro {p}"
            for p in ("/proc/sys", "/proc/sysrq-trigger")
        ]
    if unit.get("ProtectKernelLogs") == "yes":
        steps.append("mount --bind /dev/null /proc/kmsg")
    if unit.get("ProtectSystem") == "strict":
        steps.append("mount -o remount,bind,ro /")
    probe = bwrap.probe_argv(bwrap.find(), network=True)  # type: ignore[arg-type]
    no_new = "setpriv --no-new-privs " if unit.get("NoNewPrivileges") == "yes" else ""
    steps.append(f"exec runuser -u nobody -- {no_new}{' '.join(probe)}")
    return "\n".join(steps)


def run_as_the_unit(unit: dict[str, str]) -> subprocess.CompletedProcess[str]:
    script = as_the_unit(unit)
    return subprocess.run(
        ["unshare", "-m", "sh", "-c", script], capture_output=True, text=True, timeout=30
    )


def test_the_unit_allows_exactly_the_namespaces_a_sandbox_is_made_of() -> None:
    unit = directives((Path(__file__).parent.parent / "systemd" / UNIT).read_text())
    allowed = set(unit["RestrictNamespaces"].split())
    probe = bwrap.probe_argv(Path("/usr/bin/bwrap"), network=True)
    needed = {"mnt", "user"} | {KINDS[flag] for flag in probe if flag in KINDS}
    assert allowed == needed


@needs
def test_a_sandbox_can_be_made_under_the_units_settings() -> None:
    unit = directives(SHIPPED[UNIT].render())
    done = run_as_the_unit(unit)
    assert done.returncode == 0, done.stderr


@needs
def test_the_check_would_catch_a_unit_that_covers_proc() -> None:
    unit = {**directives(SHIPPED[UNIT].render()), "ProtectKernelTunables": "yes"}
    done = run_as_the_unit(unit)
    assert done.returncode != 0 and "proc" in done.stderr, done.stderr
