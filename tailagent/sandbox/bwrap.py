"""bubblewrap: the program that makes each fence, and the check that it can make one here.

tailagent writes no namespace code of its own: `bwrap` (Flatpak's sandbox, and Claude
Code's on Linux) takes a list of mounts and namespaces on its command line and runs a
program inside them. What can stop it is the box, not tailagent: no `bwrap` installed,
user namespaces switched off (a sysctl, Ubuntu's AppArmor rule for unconfined programs,
or a systemd unit's `RestrictNamespaces=`). The check runs the same kind of fence a
conversation gets around `true`, so a box that passes it can fence every agent, and one
that fails says which of those it is and what to do.

The system's own `/usr/bin/bwrap` is used rather than a copy brought by pip: on Ubuntu
24.04 and later only that path has the AppArmor profile that lets an unprivileged
program make a user namespace, and its build is the distribution's.
"""

from __future__ import annotations

import asyncio
import os
import shutil
from pathlib import Path

INSTALL = (
    "install bubblewrap (Debian, Ubuntu: `sudo apt-get install bubblewrap`; Fedora: "
    "`sudo dnf install bubblewrap`; Arch: `sudo pacman -S bubblewrap`)"
)
OFF = 'or set sandbox.mode = "off" to run agents unfenced (every report then says so)'
# The namespaces every fence asks for; a systemd unit must allow these (see systemd/).
NAMESPACE_FLAGS = ("--unshare-pid", "--unshare-ipc", "--unshare-uts", "--unshare-cgroup-try")
PROBE_TIMEOUT = 10.0
# The kernel's knob a fence must never write (the next crash runs its program as root),
# and how a shell says it may not.
CORE_PATTERN = "/proc/sys/kernel/core_pattern"
REFUSALS = ("Read-only file system", "Permission denied")
SECCOMP_FD = 9


class SandboxUnavailable(Exception):
    """No fence can be made on this box; str() is what the person reads, fix included."""


def find(configured: Path | None = None) -> Path | None:
    """The bwrap `sandbox.bwrap` names, else the system's: on PATH, else where
    distributions put it."""
    if configured is not None:
        return configured if os.access(configured, os.X_OK) else None
    found = shutil.which("bwrap")
    if found:
        return Path(found)
    standard = Path("/usr/bin/bwrap")
    return standard if os.access(standard, os.X_OK) else None


def probe_argv(bwrap: Path, network: bool) -> list[str]:
    """A fence like a conversation's (read-only root, private /proc, no capabilities) around
    `true`; with `network`, a namespace of its own too (sandbox.network allowlist/none)."""
    argv = [str(bwrap), "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc"]
    argv += ["--cap-drop", "ALL", *NAMESPACE_FLAGS, "--die-with-parent"]
    if network:
        argv.append("--unshare-net")
    return [*argv, "--", shutil.which("true") or "/bin/true"]


def explain(stderr: str) -> str:
    """bwrap's own error, and the likely cause in words a person can act on."""
    said = stderr.strip().splitlines()[-1] if stderr.strip() else "no message"
    lowered = said.lower()
    if "user namespace" in lowered or "uid map" in lowered or "operation not permitted" in lowered:
        cause = (
            "this box does not let programs make user namespaces: allow them "
            "(`sudo sysctl kernel.unprivileged_userns_clone=1`; on Ubuntu 24.04+, bwrap's "
            "AppArmor profile must be installed, as the bubblewrap package does; under systemd, "
            "the unit's RestrictNamespaces= must allow user mnt pid ipc uts cgroup net)"
        )
    else:
        cause = "bwrap could not make a sandbox here"
    return f"{cause} (bwrap said: {said})"


async def _run(argv: list[str]) -> tuple[int, str]:
    """A probe's exit status and what it said on stderr; SandboxUnavailable if it did
    not run."""
    try:
        child = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.DEVNULL,
            stderr=asyncio.subprocess.PIPE,
        )
        _, stderr = await asyncio.wait_for(child.communicate(), timeout=PROBE_TIMEOUT)
    except (OSError, TimeoutError) as exc:
        raise SandboxUnavailable(f"{argv[0]} did not run: {exc}; {OFF}") from None
    assert child.returncode is not None
    return child.returncode, stderr.decode(errors="replace")


async def check(network: bool, configured: Path | None = None) -> Path:
    """The bwrap to fence agents with, once a fence was made with it here; else
    SandboxUnavailable saying why and what to do."""
    bwrap = find(configured)
    if bwrap is None and configured is not None:
        raise SandboxUnavailable(f"sandbox.bwrap: {configured} is not an executable; {OFF}")
    if bwrap is None:
        raise SandboxUnavailable(f"no bubblewrap (bwrap) on this box: {INSTALL}, {OFF}")
    code, stderr = await _run(probe_argv(bwrap, network))
    if code != 0:
        raise SandboxUnavailable(f"{explain(stderr)}; {OFF}")
    return bwrap


async def check_kernel(bwrap: Path, proc_options: list[str], seccomp_filter: Path) -> str:
    """That a fence made with `proc_options` and `seccomp_filter` has the filter loaded
    and cannot write the kernel's knobs: it tries to open CORE_PATTERN for writing (and
    writes nothing). What it saw, else SandboxUnavailable: a fenced agent could then make
    the next crash run its program as root, or reach the kernel's shared state."""
    argv = probe_argv(bwrap, network=True)
    at = argv.index("--cap-drop")
    argv[at:at] = [*proc_options, "--seccomp", str(SECCOMP_FD)]
    script = (  # the shell's builtins only: the server's PATH may hold nothing
        'while read -r key value; do [ "$key" = Seccomp: ] && mode=$value; '
        'done < /proc/self/status; [ "$mode" = 2 ] || exit 3; '
        f": >> {CORE_PATTERN}"
    )
    argv[argv.index("--") + 1 :] = ["/bin/sh", "-c", script]
    code, stderr = await _run([*with_seccomp(seccomp_filter), *argv])
    said = stderr.strip().splitlines()[-1] if stderr.strip() else ""
    if code == 3:
        raise SandboxUnavailable(f"the seccomp filter did not load in a fence here; {OFF}")
    if said.startswith("bwrap:"):
        raise SandboxUnavailable(f"a fence with the seccomp filter did not start ({said}); {OFF}")
    if code != 0 and any(word in said for word in REFUSALS):
        return "the kernel's knobs read-only, the seccomp filter loaded"
    seen = "opened it" if code == 0 else f"said: {said!r}"
    raise SandboxUnavailable(
        f"a fence here could write {CORE_PATTERN} (the probe {seen}), and so run a "
        f"program as root at the next crash; {OFF}"
    )


def with_seccomp(seccomp_filter: Path) -> list[str]:
    """What runs bwrap with the filter open on SECCOMP_FD (`--seccomp` reads it there):
    a shell that opens it and becomes bwrap, so a fence is one command line wherever it
    is run (a subprocess, a launcher script), with no descriptor to pass along."""
    return ["/bin/sh", "-c", f'exec "$@" {SECCOMP_FD}<"$0"', str(seccomp_filter)]
