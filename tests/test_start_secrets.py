"""A starting server's `TS_AUTHKEY`, seen by another process while it starts (issue 42).

Another process of the server's user may read /proc/<pid>/environ, fd/* and mem of a
process that is dumpable. tailagent makes itself not dumpable in its first lines
(tailagent/process/undumpable.py) and `serve` takes the key out of its environ in place
(tailagent/process/secret_env.py, no exec), so what is left is Python's own start,
before any code of ours. tests/secret_probe.py is that other process, run with runuser
as `nobody`, started before the server and handed its pid at its exec, polling until the
server says where it serves. As root the probe reads everything (the kernel lets root),
so the server runs as nobody when the probe is of its user, with this checkout and the
venv's packages run by the system's python3 (tests/test_sandbox_nobody.py: nobody cannot
run the venv's).
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from tests.conftest import SERVING, START_TIMEOUT, RunningServer
from tests.test_sandbox_nobody import PACKAGES, PATH, PYTHON, REPO, USER, as_nobody, give

PROBE = Path(__file__).with_name("secret_probe.py")
KINDS = ("environ", "fd", "mem")


def why_not() -> str | None:
    """Why nobody cannot run the probe and the server on this box; None when it can."""
    if os.geteuid() != 0:
        return "needs root, to run the probe and the server as nobody (CI runs as root)"
    if shutil.which("runuser") is None:
        return "needs runuser (util-linux), to run the probe as nobody"
    try:
        pwd.getpwnam(USER)
    except KeyError:
        return f"no user {USER} on this box"
    ours = f"{sys.version_info[0]}.{sys.version_info[1]}"
    theirs = as_nobody(str(PYTHON), "-c", "import sys; print('%d.%d' % sys.version_info[:2])")
    if theirs.stdout.strip() != ours:
        return f"{PYTHON} as nobody is not Python {ours}, whose packages it would import"
    for path in (REPO / "tailagent" / "__main__.py", PROBE, *PACKAGES):
        if as_nobody("test", "-r", str(path)).returncode != 0:
            return f"nobody cannot read {path}: put the checkout where every user can read it"
    return None


@pytest.fixture(scope="module")
def nobody() -> pwd.struct_passwd:
    reason = why_not()
    if reason is not None:
        pytest.skip(reason)
    return pwd.getpwnam(USER)


@pytest.fixture
def base(nobody: pwd.struct_passwd) -> Iterator[Path]:
    """A home, a state dir and a workspace of nobody's (pytest's tmp dirs are root's 0700)."""
    top = Path(tempfile.mkdtemp(prefix="tailagent-start-", dir="/var/tmp"))
    top.chmod(0o755)
    for name in ("home", "state", "workspace"):
        (top / name).mkdir(mode=0o700)
        give(top / name, nobody)
    yield top
    shutil.rmtree(top, ignore_errors=True)


def environment(base: Path, key: str) -> dict[str, str]:
    pythonpath = os.pathsep.join(map(str, (REPO, *PACKAGES)))
    return {"PATH": PATH, "LANG": "C.UTF-8", "HOME": str(base / "home"),
            "PYTHONPATH": pythonpath, "TS_AUTHKEY": key}  # fmt: skip


def as_user(name: str) -> dict[str, Any]:
    """Popen's arguments that make the child (this very pid) that user's, or root's."""
    if name == "root":
        return {}
    return {"user": name, "group": pwd.getpwnam(name).pw_gid, "extra_groups": []}


def probe(key: str) -> subprocess.Popen[str]:
    """The probe as nobody, once it is ready to be handed a pid."""
    argv = ["runuser", "-u", USER, "--", str(PYTHON), str(PROBE), key]
    started = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert started.stdout is not None and started.stdout.readline() == "ready\n"
    return started


def watch(started: subprocess.Popen[str], pid: int, until: Any) -> dict[str, Any]:
    """What the probe saw of `pid` from its exec until `until()` is true."""
    assert started.stdin is not None
    started.stdin.write(f"{pid}\n")
    started.stdin.flush()
    until()
    out, _ = started.communicate("stop\n", timeout=30)
    return json.loads(out)  # type: ignore[no-any-return]


def serve(
    base: Path, key: str, user: str, watcher: subprocess.Popen[str]
) -> tuple[dict[str, Any], RunningServer]:
    """`tailagent serve` as `user`, the key in its environment, watched from its exec
    until it says where it serves: (what the probe saw, the running server)."""
    python = str(PYTHON) if user != "root" else sys.executable
    argv = [python, "-m", "tailagent", "serve", "--listen", "127.0.0.1:0", "--agent", "echo",
            "--state-dir", str(base / "state"), "--cwd", str(base / "workspace")]  # fmt: skip
    log_path = base / f"server-{user}.log"
    with log_path.open("w") as log:
        process = subprocess.Popen(
            argv, env=environment(base, key), stdout=log, stderr=subprocess.STDOUT,
            cwd=base, text=True, **as_user(user),
        )  # fmt: skip

    def serving() -> None:
        deadline = time.monotonic() + START_TIMEOUT
        while not SERVING.search(log_path.read_text()) and process.poll() is None:
            assert time.monotonic() < deadline, log_path.read_text()
            time.sleep(0.02)

    seen = watch(watcher, process.pid, serving)
    match = SERVING.search(log_path.read_text())
    assert match, log_path.read_text()
    return seen, RunningServer(match.group(1), process, base / "state", log_path)


def python_start_cpu(base: Path) -> float:
    """CPU seconds the same python3, as nobody, takes to start and end doing nothing:
    the part of a start that comes before any code of ours."""
    process = subprocess.Popen([str(PYTHON), "-c", "pass"], env=environment(base, "x"),
                               cwd=base, **as_user(USER))  # fmt: skip
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    assert process.returncode == 0
    return usage.ru_utime + usage.ru_stime


def states(seen: dict[str, Any], kind: str) -> list[str]:
    return [state for _, state in seen[kind]]


def test_a_process_of_the_servers_user_reads_its_key_only_while_python_starts(
    base: Path,
) -> None:
    key = f"tskey-auth-{uuid.uuid4().hex}"
    # The probe reads, as nobody, what nobody's processes hold: a plain one's environ.
    sleeper = subprocess.Popen(["sleep", "60"], env={"TS_AUTHKEY": key}, **as_user(USER))
    try:
        control = watch(probe(key), sleeper.pid, lambda: time.sleep(0.2))
    finally:
        sleeper.kill()
        sleeper.wait()
    assert states(control, "environ") == ["secret"] and states(control, "mem") == ["secret"]

    seen, server = serve(base, key, USER, probe(key))
    try:
        # Closed once, closed for good: no second window (an exec would open one). Closed
        # is when the key's own places (environ, memory) first refused; before that, a
        # launcher's exec into Python may refuse the fds for a moment, then list them.
        closed = min(t for kind in ("environ", "mem") for t, s in seen[kind] if s == "refused")
        for kind in KINDS:
            after = [state for t, state in seen[kind] if t >= closed]
            assert states(seen, kind)[-1] == "refused" and set(after) == {"refused"}, seen
        # Seen, if at all, only while Python itself started: the server had used no more
        # CPU than the interpreter takes to start and end, and 50 ms (5 ticks) for the
        # package's import up to its first line. Made not dumpable after serve's
        # imports, it was seen until 0.20 - 0.25 s of CPU (docs/measured.md), last in
        # the memfd that handed it over across an exec.
        start = python_start_cpu(base)
        assert seen["cpu"] is None or seen["cpu"] <= start + 0.05, (seen, start)
        # And once started, the key is not in its environ, even for root.
        assert key.encode() not in Path(f"/proc/{server.process.pid}/environ").read_bytes()
    finally:
        assert server.stop() == 0, server.log()


def test_another_user_reads_nothing_of_a_starting_server(base: Path) -> None:
    """The server as root (a service's user), the probe as nobody: the kernel refuses
    another user's process from the exec on, dumpable or not."""
    key = f"tskey-auth-{uuid.uuid4().hex}"
    seen, server = serve(base, key, "root", probe(key))
    try:
        assert {state for kind in KINDS for state in states(seen, kind)} == {"refused"}, seen
        assert seen["cpu"] is None
    finally:
        assert server.stop() == 0, server.log()
