"""Red team, the uid (issue 54 section 2), through a real server run as root, as CI runs it:
each conversation's agent is a uid of its own, never 0, never another conversation's.

Before issue 54 a root server ran its agents as root: whatever the kernel checks by
owner rather than by capability (`/proc/sys`, a root-owned file bound in, the keyring of
uid 0) was theirs, and every agent shared it with every other.
"""

from __future__ import annotations

import json
import os
import pwd
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.a2a_helpers import A2A
from tests.conftest import start_server
from tests.test_isolation import make_project
from tests.test_sandbox import Box, attempt, got_through, refused_start, two_people

HOSTILE = Path(__file__).parent / "hostile_acp_agent.py"
pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="agents change uid only under root")


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Box]:
    tmp = tmp_path_factory.mktemp("fence-users")
    home = Path(tempfile.mkdtemp(prefix="tailagent-home-", dir="/var/tmp"))
    make_project(tmp / "workspace", {"calc.py": "def add(a, b):\n    return a + b\n"})
    root_only = tmp / "root-only.txt"
    root_only.write_text("root's alone")
    root_only.chmod(0o600)
    config = tmp / "tailagent.toml"
    config.write_text(f'[sandbox]\nexpose = ["{root_only}"]\n')  # shown, yet not its to read
    env = {**os.environ, "HOME": str(home)}
    serve = ("--agent-command", f"{sys.executable} {HOSTILE}", "--isolation", "worktree")
    with two_people(tmp, home, env, *serve, "--config", str(config)) as box:
        yield box


WHO = "echo $(id -u) $(id -g) $(id -G)"
COMMIT = "echo $RANDOM >> notes.txt && git add notes.txt && git commit -qm mine"


async def test_each_conversation_s_agent_is_a_uid_of_its_own(box: Box) -> None:
    root_only = box.workspace.parent / "root-only.txt"
    bob, bob_turn = await attempt(box.bob, {"run": [WHO, COMMIT]})
    alice, _ = await attempt(box.alice, {"run": [WHO]})
    bob_ids = bob[f"run {WHO}"].removeprefix("ok: ").split()
    alice_ids = alice[f"run {WHO}"].removeprefix("ok: ").split()
    # Not root; its group its own and no other; another conversation, another uid.
    assert bob_ids[0] != "0" and bob_ids == [bob_ids[0]] * 3, bob
    assert alice_ids[0] not in ("0", bob_ids[0]), alice
    # Its own git goes on across turns, over what tailagent's git wrote at the turn's end.
    assert bob[f"run {COMMIT}"].startswith("ok: "), bob
    again, _ = await attempt(box.bob, {"run": [WHO, COMMIT]}, bob_turn.context_id)
    assert again[f"run {WHO}"] == bob[f"run {WHO}"]  # the same uid, turn after turn
    assert again[f"run {COMMIT}"].startswith("ok: "), again
    # What root alone may do, it may not: a root-only file shown to it, bwrap's own pid 1.
    denied, _ = await attempt(
        box.bob, {"read": [str(root_only)], "signal": ["1"]}, bob_turn.context_id
    )
    assert got_through(denied) == {}, denied
    assert "EACCES" in denied[f"read {root_only}"]
    assert json.dumps(denied).count("EPERM") == 1  # the signal


@pytest.mark.parametrize(
    ("user", "said"),
    [
        ("nosuchuser", "sandbox.user: no user 'nosuchuser' on this box (name an existing"),
        ("root", "sandbox.user: 'root' is root, and agents never run as root"),
    ],
)
def test_a_sandbox_user_that_cannot_be_is_refused_in_one_line(
    tmp_path: Path, user: str, said: str
) -> None:
    last = refused_start(tmp_path, f'[sandbox]\nuser = "{user}"\n')
    assert last.startswith(f"tailagent: cannot fence the agent: {said}"), last


async def test_sandbox_user_runs_every_agent_as_that_account(tmp_path: Path) -> None:
    nobody = pwd.getpwnam("nobody")
    make_project(tmp_path / "workspace")
    config = tmp_path / "tailagent.toml"
    config.write_text('[sandbox]\nuser = "nobody"\n')
    server = start_server(
        tmp_path, "--agent-command", f"{sys.executable} {HOSTILE}", "--config", str(config)
    )
    try:
        got, _ = await attempt(A2A(server.url, server.token), {"run": [WHO]})
        assert got[f"run {WHO}"] == f"ok: {nobody.pw_uid} {nobody.pw_gid} {nobody.pw_gid}", got
    finally:
        server.stop()


def test_handing_over_never_follows_a_link_out(tmp_path: Path) -> None:
    """What the agent leaves in its directory is handed to its uid, links as links: a
    link to a folder of root's stays pointing at a folder of root's."""
    from tailagent.sandbox.users import hand_over

    directory = tmp_path / "conversation"
    (directory / "a" / "b").mkdir(parents=True)
    (directory / "a" / "b" / "file").write_text("written by tailagent's git")
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "secret").write_text("root's")
    (directory / "a" / "out").symlink_to(outside)
    hand_over(directory, 65534, 65534)
    inside = [directory, directory / "a", directory / "a" / "b", directory / "a" / "b" / "file"]
    assert {p.lstat().st_uid for p in [*inside, directory / "a" / "out"]} == {65534}
    assert (outside.stat().st_uid, (outside / "secret").stat().st_uid) == (0, 0)
