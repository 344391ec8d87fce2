"""The fence's seccomp filter (tailagent/sandbox/seccomp.py), loaded by the real bwrap.

Every refusal is a call made from inside a bwrap sandbox twice, with the filter and without
it: with it the call fails as the module says (EPERM; ENOSYS for clone3; death for another
ABI), without it the same call succeeds or fails otherwise. So each test shows that the
filter, not the kernel's own checks, refused. The calls are harmless where they get
through: they act on the sandbox's own mount namespace or keyring, or carry an argument the
kernel rejects (a bad reboot magic, a missing file) before it does anything.

The sandboxes are run as root with every capability (bwrap keeps root's when it is not
asked to drop them), so the kernel itself would allow almost everything; and as `nobody`,
as a service user's agent runs. Numbers are x86-64's, written here rather than taken from
libseccomp, so the test does not check the module against itself.
"""

from __future__ import annotations

import json
import os
import platform
import pwd
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator, Sequence
from pathlib import Path

import pytest

from tailagent.sandbox import seccomp

BWRAP = shutil.which("bwrap")
NOBODY_PYTHON = "/usr/bin/python3"  # the venv's links into /root, which nobody cannot read
EPERM, ENOSYS = 1, 38

pytestmark = [
    pytest.mark.skipif(platform.machine() != "x86_64", reason="syscall numbers are x86-64's"),
    pytest.mark.skipif(BWRAP is None, reason="needs bubblewrap (bwrap)"),
    pytest.mark.skipif(
        seccomp.available() is not None, reason=f"no filter here: {seccomp.available()}"
    ),
]
needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="needs root: a sandbox with every capability, and runuser"
)

CLONE_FLAGS = {
    "CLONE_NEWNS": 0x00020000,
    "CLONE_NEWCGROUP": 0x02000000,
    "CLONE_NEWUTS": 0x04000000,
    "CLONE_NEWIPC": 0x08000000,
    "CLONE_NEWUSER": 0x10000000,
    "CLONE_NEWPID": 0x20000000,
    "CLONE_NEWNET": 0x40000000,
}
SIGCHLD, AT_FDCWD, NOWHERE = 17, -100, "/nonexistent-tailagent-probe"

# name: (x86-64 number, arguments). "PID" is the prober's pid, "BYTE" a pointer to a byte.
PROBES: dict[str, tuple[int, tuple[object, ...]]] = {
    # KEYCTL_GET_KEYRING_ID of the process keyring, made if missing; a key in it; a lookup.
    "keyctl": (250, (0, -2, 1)),
    "add_key": (248, ("user", "tailagent-probe", "x", 1, -2)),
    "request_key": (249, ("user", "tailagent-probe-none", None, 0)),
    "ptrace": (101, (0, 0, 0, 0)),  # PTRACE_TRACEME
    "process_vm_readv": (310, ("PID", None, 0, None, 0, 0)),
    "process_vm_writev": (311, ("PID", None, 0, None, 0, 0)),
    "process_madvise": (440, (-1, None, 0, 0, 0)),
    "pidfd_getfd": (438, (-1, 0, 0)),
    "kcmp": (312, ("PID", "PID", 0, 1, 1)),  # KCMP_FILE: is our fd 1 our fd 1
    "perf_event_open": (298, (None, 0, -1, -1, 0)),
    "bpf": (321, (0xFFFF, None, 0)),
    "userfaultfd": (323, (0o2000000 | 1,)),  # O_CLOEXEC | UFFD_USER_MODE_ONLY
    "io_uring_setup": (425, (0, None)),
    "io_uring_enter": (426, (-1, 0, 0, 0, None, 0)),
    "io_uring_register": (427, (-1, 0, None, 0)),
    "mount": (165, ("none", "/tmp", "tmpfs", 0, None)),  # the sandbox's own /tmp
    "umount2": (166, (NOWHERE, 0)),
    "pivot_root": (155, (NOWHERE, NOWHERE)),
    "chroot": (161, ("/",)),
    "fsopen": (430, ("tmpfs", 0)),
    "fsconfig": (431, (-1, 0, None, None, 0)),
    "fsmount": (432, (-1, 0, 0)),
    "fspick": (433, (AT_FDCWD, "/tmp", 0)),
    "move_mount": (429, (-1, None, -1, None, 0)),
    "open_tree": (428, (AT_FDCWD, "/tmp", 1)),  # OPEN_TREE_CLONE
    "mount_setattr": (442, (-1, None, 0, None, 0)),
    "open_by_handle_at": (304, (-1, None, 0)),
    "name_to_handle_at": (303, (AT_FDCWD, "/", None, None, 0)),
    "swapon": (167, (NOWHERE, 0)),
    "swapoff": (168, (NOWHERE,)),
    "reboot": (169, (0, 0, 0, None)),  # no magic: EINVAL before anything happens
    "kexec_load": (246, (0, 0, None, 0x4000)),  # an unknown flag: EINVAL
    "kexec_file_load": (320, (-1, -1, 0, None, 0x4000)),
    "init_module": (175, (None, 0, "")),
    "finit_module": (313, (-1, "", 0)),
    "delete_module": (176, ("tailagent_probe_none", 0o4000)),  # O_NONBLOCK
    "acct": (163, (NOWHERE,)),
    "settimeofday": (164, (None, None)),  # sets nothing
    "clock_settime": (227, (0, None)),
    "syslog": (103, (10, None, 0)),  # SYSLOG_ACTION_SIZE_BUFFER
    "quotactl": (179, (0, None, 0, None)),
    "quotactl_fd": (443, (-1, 0, 0, None)),
    "lookup_dcookie": (212, (0, None, 0)),
    "iopl": (172, (0,)),
    "ioperm": (173, (0, 0, 0)),
    "vhangup": (153, ()),  # bwrap --new-session: no terminal to hang up
    "setns": (308, (-1, 0)),
    "clone3": (435, (None, 0)),
    # stdin is /dev/null: without the filter, ENOTTY. The upper half of an ioctl's request
    # is ignored by the kernel, so it must not slip past the filter either.
    "ioctl:TIOCSTI": (16, (0, 0x5412, "BYTE")),
    "ioctl:TIOCSTI+upper": (16, (0, (1 << 32) | 0x5412, "BYTE")),
    "ioctl:TIOCLINUX": (16, (0, 0x541C, "BYTE")),
    **{f"clone:{name}": (56, (flag | SIGCHLD, 0, 0, 0, 0)) for name, flag in CLONE_FLAGS.items()},
    **{f"unshare:{name}": (272, (flag,)) for name, flag in CLONE_FLAGS.items()},
    "unshare:CLONE_NEWTIME": (272, (0x80,)),
    # x32's keyctl: x86-64's number with bit 30 set (this kernel may have no x32 at all).
    "x32:keyctl": (0x40000000 | 250, (0, -2, 1)),
}
# What the filter makes of each probe: an errno, or the signal that ended the prober.
EXPECTED = {
    name: "SIGSYS" if name.startswith("x32:") else ENOSYS if name == "clone3" else EPERM
    for name in PROBES
}

# Run inside the sandbox: each probe in a child of its own (an unshare or chroot there
# changes nothing for the next), which exits with the call's errno (0 when it worked).
PROBER = r"""
import ctypes, json, os, signal, sys
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
byte = ctypes.c_char(b"x")

def value(arg):
    if arg == "PID":
        return ctypes.c_long(os.getpid())
    if arg == "BYTE":
        return ctypes.byref(byte)
    if isinstance(arg, str):
        return arg.encode()
    return arg if arg is None else ctypes.c_long(arg)

def probe(number, args):
    ctypes.set_errno(0)
    result = libc.syscall(ctypes.c_long(number), *map(value, args))
    if result == 0 and number == 56:  # the clone's child: gone at once
        os._exit(0)
    if result > 0 and number == 56:
        os.waitpid(result, 0)
    return 0 if result >= 0 else ctypes.get_errno()

results = {}
for name, (number, args) in json.loads(sys.argv[1]).items():
    child = os.fork()
    if child == 0:
        os._exit(probe(number, args))
    _, status = os.waitpid(child, 0)
    if os.WIFSIGNALED(status):
        results[name] = signal.Signals(os.WTERMSIG(status)).name
    else:
        results[name] = os.WEXITSTATUS(status)
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def bpf(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return seccomp.write_filter(tmp_path_factory.mktemp("seccomp") / "fence.bpf")


def fenced(
    command: Sequence[str],
    bpf: Path | None,
    user: str | None = None,
    binds: Sequence[str] = (),
) -> subprocess.CompletedProcess[str]:
    """`command` in a bwrap sandbox like the fence's (read-only root, a private /tmp, a pid
    namespace, a session of its own), under the filter when `bpf` is given."""
    assert BWRAP is not None
    argv = [BWRAP, "--ro-bind", "/", "/", "--dev", "/dev", "--proc", "/proc", "--tmpfs", "/tmp"]
    argv += [*binds, "--unshare-pid", "--die-with-parent", "--new-session"]
    if user is not None:
        argv = ["runuser", "-u", user, "--", *argv]
    with open(bpf or os.devnull, "rb") as program:
        if bpf is not None:
            argv += ["--seccomp", str(program.fileno())]
        return subprocess.run(
            [*argv, "--", *command],
            stdin=subprocess.DEVNULL,
            capture_output=True,
            text=True,
            timeout=120,
            pass_fds=(program.fileno(),),
        )


# The interpreter itself, not a venv's link to it: a checkout (and its venv) under /tmp
# is under the sandbox's private /tmp. The probes run isolated (-I): no packages needed.
INTERPRETER = os.path.realpath(sys.executable)


def python(user: str | None) -> str:
    return NOBODY_PYTHON if user else INTERPRETER


def probed(bpf: Path | None, user: str | None = None) -> dict[str, object]:
    ran = fenced([python(user), "-I", "-c", PROBER, json.dumps(PROBES)], bpf, user)
    assert ran.returncode == 0, ran.stderr
    return json.loads(ran.stdout)


def nobody_can() -> Iterator[str]:
    """Why `nobody` cannot run the probes here, if it cannot."""
    if shutil.which("runuser") is None:
        yield "needs runuser (util-linux)"
    try:
        pwd.getpwnam("nobody")
    except KeyError:
        yield "no user nobody"
    if not os.access(NOBODY_PYTHON, os.X_OK):
        yield f"needs {NOBODY_PYTHON}"


def test_every_refusal_has_a_probe() -> None:
    """A call added to the filter without a probe here fails this test."""
    probed_names = {name.partition(":")[0] for name in PROBES}
    assert set(seccomp.REFUSED) <= probed_names
    assert set(seccomp.REFUSED_IF) <= probed_names


def test_filter_file_is_private_and_replaced_whole(tmp_path: Path) -> None:
    path = tmp_path / "fence.bpf"
    assert seccomp.write_filter(path) == path
    first = path.stat()
    assert stat.S_IMODE(first.st_mode) == 0o600
    assert first.st_size > 0 and first.st_size % 8 == 0  # struct sock_filter: 8 bytes each
    seccomp.write_filter(path)
    # A new file renamed over the old one: a bwrap that opened the old one reads it whole.
    assert path.stat().st_ino != first.st_ino
    assert path.read_bytes() and [p.name for p in tmp_path.iterdir()] == ["fence.bpf"]


def test_available_here() -> None:
    """This box has libseccomp2 (every Debian and Ubuntu has)."""
    assert seccomp.available() is None


def test_filter_is_loaded(bpf: Path) -> None:
    show = "import re; print(re.findall(r'Seccomp.*', open('/proc/self/status').read()))"
    with_filter = fenced([INTERPRETER, "-I", "-c", show], bpf)
    without = fenced([INTERPRETER, "-I", "-c", show], None)
    assert with_filter.returncode == 0 == without.returncode, with_filter.stderr
    filters = int(with_filter.stdout.split("Seccomp_filters:\\t")[1].split("'")[0])
    filters_before = int(without.stdout.split("Seccomp_filters:\\t")[1].split("'")[0])
    assert "'Seccomp:\\t2'" in with_filter.stdout
    assert filters == filters_before + 1


@needs_root
def test_refused_as_root_with_every_capability(bpf: Path) -> None:
    """Root in the sandbox keeps its capabilities: without the filter the kernel allows
    most of these (a new namespace, a mount, a chroot, the keyring), so only the filter
    refuses them; every one gets another answer without it."""
    refused, allowed = probed(bpf), probed(None)
    assert refused == EXPECTED
    same = {name: allowed[name] for name in PROBES if allowed[name] == refused[name]}
    assert same == {}, "these fail without the filter too, so the test proves nothing"
    worked = {name for name, result in allowed.items() if result == 0}
    assert {"keyctl", "add_key", "ptrace", "mount", "chroot", "fsopen", "open_tree"} <= worked
    assert {f"unshare:{name}" for name in CLONE_FLAGS} <= worked
    assert {f"clone:{name}" for name in CLONE_FLAGS} <= worked


@needs_root
def test_refused_as_nobody(bpf: Path) -> None:
    """As a service user's agent runs: bwrap makes the sandbox in a user namespace. The
    kernel itself refuses the privileged calls there, but not the keyring, ptrace, a
    nested user namespace or userfaultfd; the filter refuses them all."""
    if reasons := list(nobody_can()):
        pytest.skip("; ".join(reasons))
    refused, allowed = probed(bpf, "nobody"), probed(None, "nobody")
    assert refused == EXPECTED
    differ = {name for name in PROBES if allowed[name] != refused[name]}
    assert {
        "keyctl",
        "add_key",
        "request_key",
        "ptrace",
        "process_vm_readv",
        "kcmp",
        "userfaultfd",
        "clone3",
        "clone:CLONE_NEWUSER",
        "unshare:CLONE_NEWUSER",
        "ioctl:TIOCSTI",
        "x32:keyctl",
    } <= differ
    assert allowed["keyctl"] == allowed["unshare:CLONE_NEWUSER"] == 0


@needs_root
@pytest.mark.parametrize("user", [None, "nobody"])
def test_unshare_command_cannot_make_a_user_namespace(bpf: Path, user: str | None) -> None:
    if user and (reasons := list(nobody_can())):
        pytest.skip("; ".join(reasons))
    unshare = shutil.which("unshare")
    if unshare is None:
        pytest.skip("needs unshare (util-linux)")
    refused = fenced([unshare, "-U", "true"], bpf, user)
    allowed = fenced([unshare, "-U", "true"], None, user)
    assert allowed.returncode == 0, allowed.stderr
    assert refused.returncode != 0
    assert "Operation not permitted" in refused.stderr


def test_i386_calls_kill_the_process(bpf: Path, tmp_path: Path) -> None:
    """`int $0x80` from a 64-bit program enters the kernel's i386 ABI, as a 32-bit program's
    calls do: keyctl there (i386's number 288) must not get through a filter written for
    x86-64's numbers. The filter lets no foreign ABI through: the process is killed."""
    cc = shutil.which("cc") or shutil.which("gcc")
    if cc is None:
        pytest.skip("needs a C compiler for the int $0x80 probe (none here)")
    source = tmp_path / "int80.c"
    source.write_text(
        "#include <stdio.h>\n"
        "int main(void) {\n"
        "    long result;\n"
        "    /* i386 keyctl(KEYCTL_GET_KEYRING_ID, KEY_SPEC_PROCESS_KEYRING, create) */\n"
        '    __asm__ volatile ("int $0x80" : "=a"(result) : "a"(288), "b"(0), "c"(-2), "d"(1)'
        ' : "memory");\n'
        '    printf("%ld\\n", result);\n'
        "    return 0;\n"
        "}\n"
    )
    built = subprocess.run([cc, "-O0", "-o", tmp_path / "int80", source], capture_output=True)
    if built.returncode != 0:
        pytest.skip(f"the int $0x80 probe did not build: {built.stderr[-200:]!r}")
    binds = ["--ro-bind", str(tmp_path), "/tmp/probe"]
    allowed = fenced(["/tmp/probe/int80"], None, binds=binds)
    # A kernel without IA32 emulation answers int $0x80 with ENOSYS or SIGSEGV.
    if allowed.returncode in (128 + signal.SIGSEGV, -signal.SIGSEGV) or (
        allowed.returncode == 0 and int(allowed.stdout) < 0
    ):
        pytest.skip(f"this kernel has no i386 ABI to test (IA32 emulation): {allowed}")
    assert allowed.returncode == 0, allowed.stderr
    refused = fenced(["/tmp/probe/int80"], bpf, binds=binds)
    assert refused.stdout == ""
    # bwrap, the sandbox's pid 1, reports its child killed by SIGSYS as 128 + SIGSYS.
    assert refused.returncode in (128 + signal.SIGSYS, -signal.SIGSYS), refused


CONTROLS = r"""
import os, subprocess, threading
done = []
thread = threading.Thread(target=done.append, args=("thread",))
thread.start(); thread.join()
child = os.fork()
if child == 0:
    os._exit(7)
assert os.waitstatus_to_exitcode(os.waitpid(child, 0)[1]) == 7
done.append("fork")
done.append(subprocess.run(["sh", "-c", "echo sh"], capture_output=True, text=True).stdout.strip())
git = "cd /tmp && git init -q work && cd work && echo hi > f && git add f && " \
      "git -c user.name=t -c user.email=t@t commit -qm first && git rev-list --count HEAD"
done.append(subprocess.run(["sh", "-c", git], capture_output=True, text=True).stdout.strip())
print(" ".join(done))
"""


@pytest.mark.parametrize("user", [None, pytest.param("nobody", marks=needs_root)])
def test_ordinary_work_goes_on(bpf: Path, user: str | None) -> None:
    """Under the filter: python, threads (glibc's clone3 falls back to clone), fork,
    subprocess, sh and a git commit."""
    if user and (reasons := list(nobody_can())):
        pytest.skip("; ".join(reasons))
    ran = fenced([python(user), "-I", "-c", CONTROLS], bpf, user)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.split() == ["thread", "fork", "sh", "1"]
