"""The suite's forked starts (tests/warm_start.py) behave as the plain ones.

Most servers and CLI runs of the suite are forked from a preloaded Python; these
tests hold that to what a plain `python -m tailagent` gives: the same output, exit
codes, streams and umask, and a plain start wherever a fork would differ.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import start_server
from tests.warm_start import PROGRAM, WarmProcess, cli_run, may_fork, warm_starts

CASES = {
    "help": ["--help"],
    "a mistyped command": ["cal", "hello"],
    "a bad flag": ["call", "--no-such-flag"],
    "a call to no server": ["call", "hi", "--url", "http://127.0.0.1:9"],
}


@pytest.mark.parametrize("case", CASES)
def test_a_forked_cli_run_gives_what_a_plain_one_gives(case: str, tmp_path: Path) -> None:
    env = {**os.environ, "COLUMNS": "80", "XDG_STATE_HOME": str(tmp_path)}
    argv = [*PROGRAM, *CASES[case]]
    assert may_fork(argv, env)
    forked = cli_run(argv, env=env, capture_output=True, text=True, timeout=60)
    plain = subprocess.run(argv, env=env, capture_output=True, text=True, timeout=60)
    assert (forked.returncode, forked.stdout, forked.stderr) == (
        plain.returncode,
        plain.stdout,
        plain.stderr,
    )


def test_a_forked_run_reads_its_stdin(tmp_path: Path) -> None:
    """`call -` reads the message from the stdin it was given."""
    server = start_server(tmp_path)
    try:
        env = {**os.environ, "TAILAGENT_TOKEN": server.token}
        argv = [*PROGRAM, "call", "-", "--url", server.url]
        done = cli_run(argv, env=env, input="from a pipe\n", capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        assert "echo: from a pipe" in done.stdout
    finally:
        server.stop()


def test_a_forked_server_has_its_starters_umask(tmp_path: Path) -> None:
    """What a server makes without choosing a mode follows the umask it was started
    with, as a plain start's would (a fork has the preloaded process's otherwise)."""
    warm_starts()  # the preloaded process runs already, under the worker's umask
    old = os.umask(0o027)
    try:
        server = start_server(tmp_path)
    finally:
        os.umask(old)
    try:
        status = Path(f"/proc/{server.process.pid}/status").read_text()
        assert "Umask:\t0027" in status.splitlines()
    finally:
        server.stop()


def test_a_forked_server_stops_as_a_plain_one_does(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    assert isinstance(server.process, WarmProcess)
    assert server.process.poll() is None
    with pytest.raises(subprocess.TimeoutExpired):
        server.process.wait(timeout=0.2)
    assert server.stop() == 0
    assert "stopped" in server.log()


def test_what_a_fork_cannot_be_starts_plain() -> None:
    """A server given a secret takes it out of its exec'd environment block, which a fork
    has not got; another interpreter, and a Python setting read at start, differ too."""
    env = dict(os.environ)
    assert not may_fork([*PROGRAM, "serve"], {**env, "TS_AUTHKEY": "tskey-auth-x"})
    assert may_fork([*PROGRAM, "call", "hi"], {**env, "TAILAGENT_TOKEN": "t"})
    assert not may_fork([sys.executable, "-I", "-m", "tailagent", "call"], env)
    assert not may_fork([*PROGRAM, "call"], {**env, "PYTHONIOENCODING": "latin-1"})
    assert not may_fork([*PROGRAM, "call"], {**env, "LC_ALL": "C"})
