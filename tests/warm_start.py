"""tailagent processes for the tests, forked from a Python that has imported them already.

Nearly all of the suite's CPU is Python processes starting, and ~1 s of each
`tailagent serve`'s ~1.5 s, ~0.4 s of a CLI run's ~0.6 s, is importing a2a-sdk,
Hypercorn, httpx and ours (docs/measured.md, "The suite"). So each test worker keeps
one process that has made those imports (`python -m tests.warm_start`), and a start
asks it to fork: the child takes the test's environment, working directory, standard
streams (passed over a unix socket) and command line, and runs `tailagent` from there
as `python -m tailagent` would, down to the interpreter's exit (threads joined, atexit,
streams flushed), made not dumpable when its environment may hold a secret, as the
package's import does. It is the real program on real sockets; only imports are shared.

What a fork cannot be, it is not used for (`may_fork`): a `serve` whose environment
holds a secret (the server takes those out of the block the kernel laid out at exec,
which a fork never had), another interpreter or program (the one-file binary, `-I`),
a2a's tracing turned on (left out at import), or an environment whose Python or locale
settings differ from the preloaded process's (its streams' encoding and buffering were
set at its start). `COLD_STARTS=1` in the environment starts everything the plain way.

The preloaded process keeps the modules as they were when it started: a source
edited while the suite runs is seen by plain starts only, so run again after an edit.

A fork is the preloaded process's child, not the test's: that process reaps it and
reports its exit status, which `WarmProcess` reads as `subprocess.Popen` would.
"""

from __future__ import annotations

import atexit
import contextlib
import json
import os
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from tailagent.process.undumpable import may_hold_a_secret

ROOT = Path(__file__).resolve().parent.parent
PROGRAM = [sys.executable, "-m", "tailagent"]
CHANNEL = "WARM_START_CHANNEL"  # names the preloaded process's end of its socket
# Imported before any fork, beyond `tailagent.cli`: what a `serve` start loads on its
# way to "serving on", and what `call`, `tasks` and `watch` load.
PRELOADED = (
    "uvloop",
    "tailagent.config.sources",
    "tailagent.process.secret_env",
    "tailagent.output.logs",
    "tailagent.server",
    "tailagent.agents.echo",
    "tailagent.client.call",
    "tailagent.client.tasks",
    "httpcore",
    "anyio",
)
# The options of subprocess.run that `cli_run` forks with.
RUN_OPTIONS = {"capture_output", "text", "timeout", "env", "input", "stdin", "stdout", "stderr"}
RUN_OPTIONS |= {"check", "cwd"}
# Read once, when an interpreter starts (its streams, its locale): a fork has the
# preloaded process's, so an environment that differs here starts cold.
AT_START = ("PYTHON", "LC_", "LANG")


def may_fork(argv: Sequence[str], env: dict[str, str]) -> bool:
    """Whether `argv` with `env` may be forked (see the module's docstring)."""
    if list(argv[:3]) != PROGRAM or os.environ.get("COLD_STARTS", "") not in ("", "0"):
        return False
    if argv[3:4] == ["serve"] and may_hold_a_secret(env):
        return False
    if env.get("OTEL_INSTRUMENTATION_A2A_SDK_ENABLED", "false") != "false":
        return False
    names = {name for name in {*env, *os.environ} if name.startswith(AT_START)}
    return all(env.get(name) == os.environ.get(name) for name in names)


class WarmStarts:
    """The test worker's end of its preloaded process: one per worker, started on the
    first fork, ended when the worker exits (and the forks still running with it)."""

    def __init__(self) -> None:
        ours, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._process = subprocess.Popen(
            [sys.executable, "-m", "tests.warm_start"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            cwd=ROOT,
            pass_fds=(theirs.fileno(),),
            env={**os.environ, CHANNEL: str(theirs.fileno())},
        )
        theirs.close()
        self._socket = ours
        self._lock = threading.Lock()
        self._exits: dict[int, int] = {}
        atexit.register(self.close)

    def close(self) -> None:
        """Ends the preloaded process, and the forks still running with it; waited
        for, so its CPU and theirs count in the worker's (`/usr/bin/time`)."""
        self._socket.close()
        self._process.wait(timeout=30)

    def start(
        self, argv: list[str], env: dict[str, str], streams: tuple[int, int, int], cwd: str
    ) -> WarmProcess:
        """Forks `tailagent <argv[3:]>` with `env`, `cwd`, this process's umask, and
        `streams` as its stdin, stdout and stderr."""
        umask = os.umask(0o077)  # read only by setting it: set back at once
        os.umask(umask)
        request = {
            "argv": [os.fsdecode(word) for word in argv[3:]],  # as exec would: bytes, Paths
            "env": {os.fsdecode(k): os.fsdecode(v) for k, v in env.items()},
            "cwd": cwd,
            "umask": umask,
        }
        with self._lock:
            socket.send_fds(self._socket, [json.dumps(request).encode()], list(streams))
            while True:
                for message in self._read(timeout=60.0):
                    if "started" in message:
                        return WarmProcess(self, message["started"], message["fork"], argv)
                    if "failed" in message:
                        raise RuntimeError(f"the preloaded process: {message['failed']}")

    def exit_status(self, fork: int, timeout: float) -> int | None:
        """The exit status of the `fork`th fork (numbered, as a pid is used again),
        waiting up to `timeout` seconds for it; None if it runs. The lock is let go
        between short reads, so other threads may start forks."""
        deadline = time.monotonic() + timeout
        while True:
            with self._lock:
                if fork in self._exits:
                    return self._exits[fork]
                left = deadline - time.monotonic()
                if not self._read(timeout=min(max(left, 0.0), 0.1)) and left <= 0:
                    return self._exits.get(fork)

    def _read(self, timeout: float) -> list[dict[str, Any]]:
        """The messages that arrived within `timeout`; exits are also kept."""
        messages = []
        while select.select([self._socket], [], [], timeout)[0]:
            packet = self._socket.recv(65536)
            if not packet:
                raise RuntimeError(f"the preloaded process ended ({self._process.wait()})")
            message = json.loads(packet)
            if "exited" in message:
                self._exits[message["exited"]] = message["status"]
            messages.append(message)
            timeout = 0
        return messages


class WarmProcess:
    """A fork, seen as `subprocess.Popen` shows a child: its pid, signals, poll and
    wait, and `returncode` (negative for the signal that ended it)."""

    def __init__(self, starts: WarmStarts, pid: int, fork: int, args: list[str]) -> None:
        self._starts = starts
        self._fork = fork
        self.pid = pid
        self.args = args
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self._starts.exit_status(self._fork, timeout=0)
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None:
            bound = 1e9 if timeout is None else timeout
            self.returncode = self._starts.exit_status(self._fork, bound)
        if self.returncode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:  # not one that has ended: its pid may be another's now
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


_starts: WarmStarts | None = None
_starting = threading.Lock()


def warm_starts() -> WarmStarts:
    """This worker's preloaded process, started on first use."""
    global _starts
    with _starting:
        if _starts is None:
            _starts = WarmStarts()
        return _starts


def start_serve(argv: list[str], env: dict[str, str], log: Path) -> WarmProcess:
    """A forked `tailagent serve`, its output appended to `log`."""
    with open(log, "ab") as out, open(os.devnull, "rb") as null:
        streams = (null.fileno(), out.fileno(), out.fileno())
        return warm_starts().start(argv, env, streams, os.getcwd())


def cli_run(args: list[str], **options: Any) -> subprocess.CompletedProcess[Any]:
    """`subprocess.run(args, **options)`, forked when `args` is `python -m tailagent …`
    (`may_fork`) and the options are the ones used here; else that very call."""
    given = options.get("env")
    env = dict(os.environ if given is None else given)  # env={} is an empty environment
    if not may_fork(args, env) or not set(options) <= RUN_OPTIONS:
        return subprocess.run(args, **options)
    capture = options.get("capture_output", False)
    data = options.get("input")
    if isinstance(data, str):
        data = data.encode()
    feed, stdin = _stream(subprocess.PIPE if data is not None else options.get("stdin"), 0)
    out, stdout = _stream(subprocess.PIPE if capture else options.get("stdout"), 1)
    how = subprocess.PIPE if capture else options.get("stderr")
    err, stderr = _stream(how, 2) if how != subprocess.STDOUT else (None, os.dup(stdout))
    cwd = str(options.get("cwd") or os.getcwd())
    try:
        process = warm_starts().start(args, env, (stdin, stdout, stderr), cwd)
    finally:
        for fd in (stdin, stdout, stderr):
            os.close(fd)
    output, errors = _communicate(process, feed, data, out, err, options.get("timeout"))
    if options.get("text"):
        output, errors = (_text(output), _text(errors))
    done = subprocess.CompletedProcess(args, process.wait(), output, errors)
    if options.get("check"):
        done.check_returncode()
    return done


def _stream(how: Any, standard: int) -> tuple[int | None, int]:
    """(our end or None, the child's own descriptor) of one standard stream, as
    `subprocess` reads `how`: PIPE, DEVNULL, None (ours), a descriptor or a file."""
    if how == subprocess.PIPE:
        read, write = os.pipe()
        return (read, write) if standard else (write, read)
    if how == subprocess.DEVNULL:
        return None, os.open(os.devnull, os.O_RDWR)
    if how is None:
        return None, os.dup(standard)
    return None, os.dup(how if isinstance(how, int) else how.fileno())


def _communicate(
    process: WarmProcess,
    stdin: int | None,
    data: bytes | None,
    stdout: int | None,
    stderr: int | None,
    timeout: float | None,
) -> tuple[bytes | None, bytes | None]:
    """Writes `data` to the child and reads its output until both streams end, as
    `Popen.communicate` does; past `timeout` the child is killed (TimeoutExpired)."""
    if stdin is not None:
        feed = threading.Thread(target=_feed, args=(stdin, data or b""), daemon=True)
        feed.start()
    chunks: dict[int, list[bytes]] = {fd: [] for fd in (stdout, stderr) if fd is not None}
    open_fds = list(chunks)
    deadline = None if timeout is None else time.monotonic() + timeout
    try:
        while open_fds:
            left = None if deadline is None else deadline - time.monotonic()
            if left is not None and left <= 0:
                process.kill()
                process.wait()
                raise subprocess.TimeoutExpired(
                    process.args, timeout or 0, b"".join(chunks.get(stdout or -1, [])), None
                )
            for fd in select.select(open_fds, [], [], left)[0]:
                chunk = os.read(fd, 65536)
                if chunk:
                    chunks[fd].append(chunk)
                else:
                    open_fds.remove(fd)
        if deadline is not None:
            left = max(deadline - time.monotonic(), 0.0)
            try:
                process.wait(left)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
                raise
    finally:
        for fd in chunks:
            os.close(fd)
    return (
        b"".join(chunks[stdout]) if stdout is not None else None,
        b"".join(chunks[stderr]) if stderr is not None else None,
    )


def _feed(fd: int, data: bytes) -> None:
    with contextlib.suppress(BrokenPipeError), open(fd, "wb") as pipe:
        pipe.write(data)


def _text(data: bytes | None) -> str | None:
    """Bytes as `subprocess` gives them in text mode: decoded, newlines universal."""
    if data is None:
        return None
    return data.decode().replace("\r\n", "\n").replace("\r", "\n")


# The preloaded process itself, below: `python -m tests.warm_start`.


def _preload() -> None:
    """The imports a `serve` start makes, in its order: a2a-sdk's tracing is left out
    before a2a's server modules come in (tailagent/mends/tracing.py), as `serve` does."""
    import importlib

    os.environ.setdefault("OTEL_INSTRUMENTATION_A2A_SDK_ENABLED", "false")
    import tailagent.cli  # noqa: F401
    from tailagent.mends.tracing import untraced_unless_enabled

    untraced_unless_enabled()
    for name in PRELOADED:
        importlib.import_module(name)


def _reap(children: dict[int, int], channel: socket.socket) -> None:
    """Reports every child that has ended, by its fork's number."""
    while children:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == 0:
            return
        report = {"exited": children.pop(pid, 0), "status": os.waitstatus_to_exitcode(status)}
        with contextlib.suppress(OSError):  # the worker gone: the next read says so
            channel.send(json.dumps(report).encode())


def _end(children: dict[int, int]) -> None:
    """Stops the forks a worker left running, as a signal from systemd would: each has
    10 s to end, then is killed. Each is reaped, so its CPU counts in ours."""
    for pid in children:
        os.kill(pid, signal.SIGTERM)
    deadline = time.monotonic() + 10
    while children and time.monotonic() < deadline:
        pid, _ = os.waitpid(-1, os.WNOHANG)
        if pid:
            children.pop(pid, None)
        else:
            time.sleep(0.05)
    for pid in children:
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)


def _become(request: dict[str, Any], streams: list[int], keep_out: list[int]) -> None:
    """In the fork: the program's streams, environment, directory, umask and command
    line."""
    import tailagent
    from tailagent.process.undumpable import not_dumpable

    signal.set_wakeup_fd(-1)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    for fd in keep_out:
        os.close(fd)
    for standard, fd in enumerate(streams):
        os.dup2(fd, standard)
    for fd in streams:
        if fd > 2:
            os.close(fd)
    os.chdir(request["cwd"])
    os.umask(request["umask"])
    os.environ.clear()
    os.environ.update(request["env"])
    if may_hold_a_secret(os.environ):
        not_dumpable()  # what the package's import does for such an environment
    sys.argv = [str(Path(tailagent.__file__).with_name("__main__.py")), *request["argv"]]
    sys.orig_argv = [*PROGRAM, *request["argv"]]


def _serve_forks() -> None:
    """Forks for each request on the socket until the worker closes it. Returns only
    in a fork, made ready to run its command."""
    channel = socket.socket(fileno=int(os.environ.pop(CHANNEL)))
    children: dict[int, int] = {}  # pid -> the fork's number (a pid is used again)
    forks = 0
    wakeup = os.pipe()
    for fd in wakeup:
        os.set_blocking(fd, False)
    signal.set_wakeup_fd(wakeup[1])
    signal.signal(signal.SIGCHLD, lambda *_: None)
    while True:
        ready, _, _ = select.select([channel, wakeup[0]], [], [])
        if wakeup[0] in ready:
            os.read(wakeup[0], 4096)
            _reap(children, channel)
        if channel not in ready:
            continue
        packet, streams, _, _ = socket.recv_fds(channel, 1 << 20, 3)
        if not packet:  # the worker is done: so are its forks
            _end(children)
            sys.exit(0)
        try:
            pid = os.fork()
        except OSError as exc:
            channel.send(json.dumps({"failed": str(exc)}).encode())
            continue
        if pid == 0:
            _become(json.loads(packet), streams, [channel.detach(), *wakeup])
            return
        for fd in streams:
            os.close(fd)
        forks += 1
        children[pid] = forks
        channel.send(json.dumps({"started": pid, "fork": forks}).encode())


if __name__ == "__main__":
    _preload()
    _serve_forks()  # returns in a fork, its sys.argv that program's
    from tailagent.cli import run

    run()
