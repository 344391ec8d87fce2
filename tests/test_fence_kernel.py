"""Red team, the kernel (issue 54 section 4), through a real server: what one fenced agent
tried on the kernel's shared state, and how it fails now.

Before issue 54, a root agent wrote `/proc/sys/kernel/core_pattern` (the next crash then
runs its program as root), and Bob's agent put a key in the user keyring that Carol's read
(the keyring is per uid, not per namespace). Now `/proc/sys` is read-only in every fence,
and a seccomp filter refuses the keyring, ptrace, mounts and new user namespaces.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.test_isolation import make_project
from tests.test_sandbox import Box, attempt, got_through, two_people

HOSTILE = Path(__file__).parent / "hostile_acp_agent.py"


def python(code: str) -> str:
    return f'python3 -c "{code}"'


# add_key("user", "stolen", "carol's secret", @u): a key id when the keyring is reachable.
ADD_KEY = python(
    "import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
    "key = libc.syscall(248, b'user', b'stolen', b'planted by bob', 14, -4); "
    "print(key) if key > 0 else exit(ctypes.get_errno())"
)
# keyctl(KEYCTL_SEARCH, @u, "user", "stolen"): Carol's agent looks for Bob's key.
FIND_KEY = python(
    "import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
    "key = libc.syscall(250, 10, -4, b'user', b'stolen', 0); "
    "print(key) if key > 0 else exit(ctypes.get_errno())"
)
PTRACE_SELF = python(
    "import ctypes; libc = ctypes.CDLL(None, use_errno=True); "
    "exit(ctypes.get_errno() if libc.ptrace(0, 0, 0, 0) else 0)"
)


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Box]:
    tmp = tmp_path_factory.mktemp("fence-kernel")
    home = Path(tempfile.mkdtemp(prefix="tailagent-home-", dir="/var/tmp"))
    make_project(tmp / "workspace", {"calc.py": "def add(a, b):\n    return a + b\n"})
    env = {**os.environ, "HOME": str(home)}
    serve = ("--agent-command", f"{sys.executable} {HOSTILE}", "--isolation", "worktree")
    with two_people(tmp, home, env, *serve) as box:
        yield box


async def test_the_kernel_s_shared_state_is_out_of_reach(box: Box) -> None:
    with open("/proc/sys/kernel/core_pattern") as knob:  # noqa: ASYNC230 (a short read)
        pattern = knob.read()
    plan = {
        "run": [
            ADD_KEY,
            "keyctl show @u",  # keyutils, where installed: refused either way
            "echo '|/tmp/payload' > /proc/sys/kernel/core_pattern",
            "echo 1 > /proc/sys/vm/overcommit_memory",
            "echo b > /proc/sysrq-trigger",
            "test -s /proc/keys",  # the keys of every process on the box: shown empty
            "unshare -U -r true",  # a user namespace of its own: every capability inside it
            "mount -t tmpfs none /tmp",
            PTRACE_SELF,
        ]
    }
    got, _ = await attempt(box.bob, plan)
    assert got_through(got) == {}, got
    assert got[f"run {ADD_KEY}"].startswith("refused: exit 1 ")  # EPERM, from the filter
    found, _ = await attempt(box.alice, {"run": [FIND_KEY]})
    assert found[f"run {FIND_KEY}"].startswith("refused: exit 1 "), found
    with open("/proc/sys/kernel/core_pattern") as knob:  # noqa: ASYNC230
        assert knob.read() == pattern
    # Controls: the agent's ordinary work (threads, subprocesses, git) goes on.
    work = {
        "run": ["git status --short", python("import threading; print(threading.active_count())")]
    }
    done, _ = await attempt(box.bob, work)
    assert all(value.startswith("ok") for value in done.values()), done
