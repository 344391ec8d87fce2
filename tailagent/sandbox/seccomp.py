"""The seccomp filter every fenced process runs under: what the kernel refuses it outright.

A fence's namespaces give an agent its own view of the files, the processes, the network,
but one kernel serves every fence and the server. Some of the kernel's state is not in any
namespace (the keyring is per uid; the clock, swap, modules and the kernel log are the
box's), and some calls reach code an agent has no business reaching (a new user namespace
hands its maker every capability inside it, and with them the kernel's mount and netfilter
code, where most recent local root exploits began). A filter refuses those calls in every
process of the fence, whatever its uid or capabilities: bwrap loads it (`--seccomp FD`)
just before it starts the agent, and nothing inside can lift it.

The filter is libseccomp's (through `pyseccomp`, ctypes over the system's libseccomp.so.2),
exported as the BPF program bwrap loads; tailagent assembles no BPF of its own. The list
follows Docker's default profile (what it refuses a container without capabilities) and
Anthropic's sandbox-runtime (Claude Code's on Linux, which refuses io_uring too). Everything
not named is allowed, and a refused call fails with EPERM, as a call the kernel forbids
would, so programs report a clean error. Refused:

- the keyring (`keyctl`, `add_key`, `request_key`): one per uid, so one conversation's agent
  read a key another's had put there (issue 54);
- other processes' insides (`ptrace`, `process_vm_readv`/`writev`, `process_madvise`,
  `pidfd_getfd`, `kcmp`): an agent's work needs none of them, and a process that could
  reach into another would act as it (a command an answer approved, a tool the fence
  runs); debuggers (gdb, strace) do not run in a fence;
- the kernel's widest doors for an exploit (`perf_event_open`, `bpf`, `userfaultfd`, which
  stretches a kernel race until it is won, and `io_uring_*`, whose queued operations no
  filter can see; Docker's profile dropped it in 2024, and programs fall back to plain
  reads and writes);
- the mounts a fence is made of (`mount`, `umount2`, `pivot_root`, `chroot`, the new mount
  API) and `open_by_handle_at`/`name_to_handle_at`, which open a file by its inode around
  every mount (the "shocker" escape from Docker);
- the box's own state: swap, reboot, kexec, kernel modules, process accounting, the clock
  (`settimeofday`, `clock_settime`), the kernel log (`syslog`), quotas, I/O ports,
  `vhangup`. Each needs a capability no fenced process holds; refusing it keeps it so if
  one ever did;
- new namespaces: `setns`, and `clone`/`unshare` with any namespace flag. A user namespace
  is the door named above; the others need a capability the fence drops, so the rule reads
  simply "no new namespace". bwrap, `unshare`, rootless podman and Chrome's own sandbox do
  not start inside a fence (Playwright runs Chromium without it by default);
- `clone3`, with ENOSYS rather than EPERM: its flags are in memory a filter cannot read, and
  ENOSYS is what makes glibc and others fall back to `clone`, whose flags it can (Docker
  does the same);
- `ioctl` TIOCSTI and TIOCLINUX, which type into a terminal as whoever reads it (bwrap's
  `--new-session` already takes the terminal away; this holds if a caller forgets it).

Only this machine's own syscall ABI is let through. A call through another one the kernel
accepts (i386's `int 0x80` on x86-64, x32's numbers) kills the process: the same refusals
written again for each ABI's numbering (and i386's `socketcall` multiplexer) is where
filters leak, the compat entry is where kernel bugs have lived, and an agent's toolchains
are 64-bit. A 32-bit program dies in a fence with "Bad system call" (Docker instead filters
x86 and x32 too, for 32-bit images).

Not refused, because a namespace of the fence's own already separates it: sockets of any
family (abstract unix sockets live in the fence's network namespace; a socket with a path
is reached through the files the fence shows, so its allowlist decides), SysV IPC,
signals, the hostname. Nor `personality` (it changes only its caller's execution domain;
gdb and `setarch -R` use it) or `adjtimex`/`clock_adjtime` (they read the clock's state;
setting it needs CAP_SYS_TIME, and Docker allows them too).
"""

from __future__ import annotations

import contextlib
import errno
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

from tailagent.sandbox.bwrap import SandboxUnavailable

log = logging.getLogger("tailagent.sandbox")

INSTALL = (
    "install libseccomp (Debian, Ubuntu: `sudo apt-get install libseccomp2`; Fedora: "
    "`sudo dnf install libseccomp`; Arch: `sudo pacman -S libseccomp`)"
)

# Refused whatever their arguments, in every process of a fence; why, in the module's
# docstring, in the same order.
REFUSED: tuple[str, ...] = (
    *("keyctl", "add_key", "request_key"),
    *("ptrace", "process_vm_readv", "process_vm_writev", "process_madvise", "pidfd_getfd"),
    "kcmp",
    *("perf_event_open", "bpf", "userfaultfd"),
    *("io_uring_setup", "io_uring_enter", "io_uring_register"),
    *("mount", "umount2", "pivot_root", "chroot"),
    *("fsopen", "fsconfig", "fsmount", "fspick", "move_mount", "open_tree", "mount_setattr"),
    *("open_by_handle_at", "name_to_handle_at"),
    *("swapon", "swapoff", "reboot", "kexec_load", "kexec_file_load"),
    *("init_module", "finit_module", "delete_module", "acct", "settimeofday", "clock_settime"),
    *("syslog", "quotactl", "quotactl_fd", "lookup_dcookie", "iopl", "ioperm", "vhangup"),
    *("setns", "clone3"),
)
# Refused only with these arguments (the rules below), for `doctor` and the docs.
REFUSED_IF: dict[str, str] = {
    "clone": "with a namespace flag",
    "unshare": "with a namespace flag",
    "ioctl": "TIOCSTI or TIOCLINUX (typing into a terminal)",
}
# What a refused call returns, where not EPERM.
REFUSED_ERRNO: dict[str, int] = {"clone3": errno.ENOSYS}

_CLONE_NAMESPACES = (
    0x00020000,  # CLONE_NEWNS
    0x02000000,  # CLONE_NEWCGROUP
    0x04000000,  # CLONE_NEWUTS
    0x08000000,  # CLONE_NEWIPC
    0x10000000,  # CLONE_NEWUSER
    0x20000000,  # CLONE_NEWPID
    0x40000000,  # CLONE_NEWNET
)
# unshare's flags have CLONE_NEWTIME too; in clone's, that bit is the exit signal's.
_UNSHARE_NAMESPACES = (*_CLONE_NAMESPACES, 0x00000080)
_TERMINAL_INPUT = (0x5412, 0x541C)  # TIOCSTI, TIOCLINUX
_LOW32 = 0xFFFFFFFF  # ioctl's request is an int: its upper half is not compared


def _library() -> Any:
    """pyseccomp, once it has found libseccomp.so.2; else SandboxUnavailable."""
    try:
        import pyseccomp
    except ImportError:
        raise SandboxUnavailable(
            "pyseccomp, which tailagent needs, is not installed: reinstall tailagent "
            "(or `pip install pyseccomp`)"
        ) from None
    except (RuntimeError, OSError) as exc:  # RuntimeError: no libseccomp found
        raise SandboxUnavailable(f"no libseccomp on this box ({exc}): {INSTALL}") from None
    return pyseccomp


def _number(sc: Any, name: str) -> int | None:
    """The call's number on this machine's ABI; None for a name libseccomp does not know
    (a call newer than the installed libseccomp: a kernel that has it runs it unfiltered)
    or one that is not a call on this ABI (iopl off x86; libseccomp answers those with a
    negative pseudo-number that could never match)."""
    number = int(sc.resolve_syscall(sc.Arch.NATIVE, name))
    if number < 0:
        log.debug("seccomp: %s is not a call libseccomp knows on this machine; not filtered", name)
        return None
    return number


def _build() -> Any:
    """The filter, as libseccomp holds it (not loaded: bwrap loads its export)."""
    sc = _library()
    try:
        built = sc.SyscallFilter(sc.ALLOW)
        try:
            built.set_attr(sc.Attr.ACT_BADARCH, sc.KILL_PROCESS)
        except OSError:  # a kernel before 4.14 kills the thread only: still never runs
            built.set_attr(sc.Attr.ACT_BADARCH, sc.KILL)
        for name in REFUSED:
            number = _number(sc, name)
            if number is not None:
                built.add_rule(sc.ERRNO(REFUSED_ERRNO.get(name, errno.EPERM)), number)
        # clone's flags are its first argument everywhere but on s390, where it is the second.
        flags_arg = 1 if sc.system_arch() in (sc.Arch.S390, sc.Arch.S390X) else 0
        conditional = (
            ("clone", flags_arg, _CLONE_NAMESPACES, None),
            ("unshare", 0, _UNSHARE_NAMESPACES, None),
            ("ioctl", 1, _TERMINAL_INPUT, _LOW32),
        )
        for name, arg, values, mask in conditional:
            number = _number(sc, name)
            if number is None:
                continue
            for value in values:
                # A flag: any call with that bit set. A request: that exact request.
                compare = sc.Arg(arg, sc.MASKED_EQ, mask if mask else value, value)
                built.add_rule(sc.ERRNO(errno.EPERM), number, compare)
    except OSError as exc:
        raise SandboxUnavailable(f"libseccomp could not build the fence's filter: {exc}") from None
    return built


def write_filter(path: Path) -> Path:
    """Build the filter and write its BPF program to `path` (0600, replaced atomically),
    for `bwrap --seccomp FD` with FD open on it. SandboxUnavailable when libseccomp cannot
    be loaded or build it here; OSError when `path` cannot be written."""
    built = _build()
    fd, temp = tempfile.mkstemp(prefix=f".{path.name}.", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), 0o600)
            try:
                built.export_bpf(out)
            except OSError as exc:
                raise SandboxUnavailable(f"libseccomp could not export the filter: {exc}") from None
            os.fsync(out.fileno())
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        raise
    return path


def available() -> str | None:
    """None when a filter can be built here and this kernel can load one; else one line
    saying what to install."""
    status = Path("/proc/self/status")
    with contextlib.suppress(OSError):
        if "Seccomp:" not in status.read_text():
            return "this kernel has no seccomp (CONFIG_SECCOMP_FILTER): a fence needs one"
    try:
        built = _build()
        with tempfile.TemporaryFile() as scratch:
            built.export_bpf(scratch)
    except SandboxUnavailable as exc:
        return str(exc)
    except OSError as exc:
        return f"libseccomp could not export the fence's filter: {exc}"
    return None
