"""The state dir is its user's alone, through a real `tailagent serve`: one left open
(by hand, or by an older tailagent) is closed at start with a warning that names it,
every file in it ends 0600 (the task database and its WAL files among them), and a dir
that cannot be closed stops the start, named."""

from __future__ import annotations

import os
import shutil
import signal
import stat
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.a2a_helpers import A2A
from tests.conftest import RunningServer, start_server
from tests.warm_start import cli_run


def modes(state_dir: Path) -> dict[str, str]:
    """Each file and directory of the state dir (itself as "."), by path, with its mode."""
    found = {".": stat.S_IMODE(state_dir.stat().st_mode)}
    for root, dirs, files in os.walk(state_dir):
        for name in dirs + files:
            path = Path(root, name)
            found[str(path.relative_to(state_dir))] = stat.S_IMODE(path.lstat().st_mode)
    return {path: f"{mode:04o}" for path, mode in found.items()}


def private(state_dir: Path) -> dict[str, str]:
    """What a private state dir shows: 0700 directories, 0600 files."""
    return {path: "0700" if (state_dir / path).is_dir() else "0600" for path in modes(state_dir)}


async def one_task(server: RunningServer) -> None:
    """A turn, so the database has written its WAL."""
    turn = await A2A(server.url, server.token).turn("hello")
    assert turn.final_state == "completed"


@pytest.fixture
def loose_umask() -> Iterator[None]:
    """The umask most boxes have (022), so nothing is private unless tailagent makes it so."""
    old = os.umask(0o022)
    yield
    os.umask(old)


@pytest.mark.usefixtures("loose_umask")
async def test_a_new_state_dir_holds_only_private_files(tmp_path: Path) -> None:
    server = start_server(tmp_path)
    try:
        await one_task(server)
        assert {"tailagent.db", "tailagent.db-wal", "tailagent.db-shm"} <= set(
            modes(server.state_dir)
        )
        assert modes(server.state_dir) == private(server.state_dir)
    finally:
        assert server.stop() == 0, server.log()


@pytest.mark.usefixtures("loose_umask")
async def test_an_open_state_dir_is_closed_at_start(tmp_path: Path) -> None:
    first = start_server(tmp_path)
    await one_task(first)
    first.stop(signal.SIGKILL)  # as a crash leaves it: the WAL files stay behind
    state_dir = first.state_dir
    # As an older tailagent, or a `mkdir` and a copy under umask 022, left it.
    (state_dir / "extra").mkdir(mode=0o755)
    for path in [state_dir, *state_dir.iterdir()]:
        path.chmod(0o755 if path.is_dir() else 0o644)
    assert modes(state_dir)["tailagent.db-wal"] == "0644"
    server = start_server(tmp_path, state_dir=state_dir)
    try:
        assert modes(state_dir) == private(state_dir)
        assert (
            f"the state dir {state_dir} was open to other users; closed: itself (0755),"
            in server.log()
        )
        assert "tailagent.db-wal (0644)" in server.log()
        await one_task(server)
        assert modes(state_dir) == private(state_dir)
    finally:
        assert server.stop() == 0, server.log()


def test_a_state_dir_that_cannot_be_closed_stops_the_start(tmp_path: Path) -> None:
    if shutil.which("chattr") is None:
        pytest.skip("no chattr to make a directory whose mode cannot change")
    state_dir = tmp_path / "state"
    state_dir.mkdir(mode=0o755)
    state_dir.chmod(0o755)
    if subprocess.run(["chattr", "+i", str(state_dir)], capture_output=True).returncode != 0:
        pytest.skip("chattr +i needs root on a filesystem that has the immutable flag")
    try:
        result = cli_run(
            [sys.executable, "-m", "tailagent", "serve", "--agent", "echo", "--listen",
             "127.0.0.1:0", "--state-dir", str(state_dir), "--cwd", str(tmp_path)],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    finally:
        subprocess.run(["chattr", "-i", str(state_dir)], check=True)
    assert result.returncode == 2, result.stderr
    assert result.stderr.strip().splitlines()[-1] == (
        f"tailagent: {state_dir} is open to other users (0755) and cannot be closed: "
        f"Operation not permitted; have its owner run `chmod -R go= {state_dir}`, or give "
        "tailagent a state dir of its own (--state-dir)"
    )
