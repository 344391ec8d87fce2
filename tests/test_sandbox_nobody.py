"""The attacks of tests/test_sandbox.py with the server run by an unprivileged service
user, `nobody` (issue 41: "Run the suite as root (CI does) and these tests also as an
unprivileged service user").

As root, the fence is all that stands between Bob's agent and what is not his. As
`nobody` it must be too: everything there (the state dir, Alice's repository, the home
and its secrets, the server's /proc) belongs to the service user the agent runs as, so
file permissions let the agent through and only the fence refuses. bwrap then makes the
sandbox without privileges (in a user namespace), which is what a service does.

The server is `runuser -u nobody -- env ... /usr/bin/python3 -m tailagent`: this
interpreter (a venv) links into /root, which nobody cannot read, so the system's python3
of the same version runs this checkout's tailagent with this interpreter's packages.
Everything the server owns lives in a fresh tree under /var/tmp (pytest's tmp dirs are
root's, 0700), given to nobody and removed afterwards.
"""

from __future__ import annotations

import asyncio
import os
import pwd
import shutil
import signal
import subprocess
import sys
import sysconfig
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from tailagent.sandbox import bwrap as bubblewrap
from tests.a2a_helpers import A2A, texts, user_message
from tests.conftest import RunningServer, start_server
from tests.test_fence_kernel import ADD_KEY, FIND_KEY
from tests.test_fence_network import abstract_connect
from tests.test_handover import bare, shared_ref
from tests.test_isolation import make_project
from tests.test_sandbox import (
    DB_PASSWORD,
    HOSTILE,
    OWN_WORK,
    Box,
    attempt,
    bobs_plan,
    got_through,
    head_of,
    make_home,
    nothing_got_through,
    own_work_done,
)
from tests.test_sandbox_freeze import LINGER, SLEEP, grows, held, lingering_on, pids_of, size

USER = "nobody"
PYTHON = Path("/usr/bin/python3")
REPO = Path(__file__).resolve().parent.parent
PACKAGES = tuple(dict.fromkeys(Path(sysconfig.get_paths()[k]) for k in ("purelib", "platlib")))
PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"


@dataclass
class NobodyBox(Box):
    pid: int  # the server's own process (nobody's), not the runuser above it (root's)


def as_nobody(*argv: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["runuser", "-u", USER, "--", *argv], capture_output=True, text=True, timeout=30
    )


def why_not() -> str | None:
    """Why the server cannot run as nobody on this box, in words; None when it can."""
    if os.geteuid() != 0:
        return "needs root, to start the server as nobody with runuser (CI runs as root)"
    if shutil.which("runuser") is None:
        return "needs runuser (util-linux), to start the server as nobody"
    try:
        pwd.getpwnam(USER)
    except KeyError:
        return f"no user {USER} on this box to run the server as"
    if not os.access(PYTHON, os.X_OK):
        return f"needs {PYTHON}, a python3 nobody can run (a venv's may link where it cannot)"
    found = bubblewrap.find()
    if found is None:
        return "needs bubblewrap (bwrap), to fence the agents"
    ours = f"{sys.version_info[0]}.{sys.version_info[1]}"
    theirs = as_nobody(str(PYTHON), "-c", "import sys; print('%d.%d' % sys.version_info[:2])")
    if theirs.stdout.strip() != ours:
        said = theirs.stdout.strip() or theirs.stderr.strip()
        return f"{PYTHON} (as nobody: {said}) is not Python {ours}, whose packages it would import"
    for path in (REPO / "tailagent" / "__main__.py", HOSTILE, *PACKAGES):
        reach = ["test", "-r", str(path)] + (["-a", "-x", str(path)] if path.is_dir() else [])
        if as_nobody(*reach).returncode != 0:
            return (
                f"nobody cannot read {path} (a folder above it is closed to others): put the "
                "checkout and its venv where every user can read them"
            )
    probe = as_nobody(*bubblewrap.probe_argv(found, network=False))
    if probe.returncode != 0:
        return f"bwrap cannot make a sandbox as nobody here: {bubblewrap.explain(probe.stderr)}"
    return None


def give(top: Path, user: pwd.struct_passwd) -> None:
    """chown -R: `top` and all under it become the user's."""
    os.chown(top, user.pw_uid, user.pw_gid)
    for folder, dirs, files in os.walk(top):
        for name in dirs + files:
            os.chown(Path(folder) / name, user.pw_uid, user.pw_gid, follow_symlinks=False)


def as_service(home: Path) -> list[str]:
    """What runs this checkout's tailagent as nobody: its own HOME (runuser sets nobody's),
    tailagent and its packages imported from here."""
    pythonpath = os.pathsep.join(map(str, (REPO, *PACKAGES)))
    return ["runuser", "-u", USER, "--", "env", f"HOME={home}", f"PYTHONPATH={pythonpath}",
            str(PYTHON)]  # fmt: skip


def server_pid(runuser: int) -> int:
    """The server: runuser's one child (`env` execs python3)."""
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        if int(stat.rsplit(")", 1)[1].split()[1]) == runuser:
            return int(entry.name)
    raise AssertionError(f"runuser ({runuser}) has no child: no server")


def add_token(home: Path, state: Path, env: dict[str, str], name: str) -> str:
    """tests/test_tokens_and_owners.py's add_token, run by the service user: the token
    file is the server's, as its CLI writes it on a real box."""
    done = subprocess.run(
        [*as_service(home), "-m", "tailagent", "token", "add", name,
         "--role", "caller", "--role", "approver", "--state-dir", str(state)],
        capture_output=True, text=True, timeout=30, env=env,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    lines = done.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ta_")
    return lines[0]


def stop(server: RunningServer, pid: int) -> None:
    """SIGTERM to the server itself (runuser, given it, passes it on and SIGKILLs the
    server two seconds later, done or not); runuser ends when the server has."""
    if server.process.poll() is None:
        try:
            os.kill(pid, signal.SIGTERM)
            server.process.wait(timeout=15)
        except (ProcessLookupError, subprocess.TimeoutExpired):
            pass
    server.stop()


@pytest.fixture(scope="module")
def box() -> Iterator[NobodyBox]:
    reason = why_not()
    if reason is not None:
        pytest.skip(reason)
    nobody = pwd.getpwnam(USER)
    base = Path(tempfile.mkdtemp(prefix="tailagent-nobody-", dir="/var/tmp"))
    try:
        base.chmod(0o755)  # mkdtemp's is 0700: nobody could not reach what is inside
        home, state, workspace = base / "home", base / "state", base / "workspace"
        home.mkdir(mode=0o755)
        make_home(home)
        make_project(workspace, {"calc.py": "def add(a, b):\n    return a + b\n"})
        state.mkdir(mode=0o700)
        # The team's shared repository, the service user's as the state dir is.
        shared = bare(base / "team.git")
        config = base / "tailagent.toml"
        config.write_text(f'[workspace]\nshared_repository = "{shared}"\n')
        for top in (home, state, workspace, shared):
            give(top, nobody)
        env = {"PATH": PATH, "LANG": "C.UTF-8", "DB_PASSWORD": DB_PASSWORD}
        server = start_server(
            base, "--agent-command", f"{PYTHON} {HOSTILE}", "--isolation", "worktree",
            "--config", str(config), state_dir=state, env=env,
            command=[*as_service(home), "-m", "tailagent"],
        )  # fmt: skip
        pid = server_pid(server.process.pid)
        try:
            assert Path(f"/proc/{pid}").stat().st_uid == nobody.pw_uid, "not nobody's"
            alice = A2A(server.url, add_token(home, state, env, "alice"))
            bob = A2A(server.url, add_token(home, state, env, "bob"))
            with pytest.MonkeyPatch.context() as patch:
                # head_of: the test's own git (root's) reads a repository nobody owns.
                patch.setenv("GIT_CONFIG_COUNT", "1")
                patch.setenv("GIT_CONFIG_KEY_0", "safe.directory")
                patch.setenv("GIT_CONFIG_VALUE_0", "*")
                yield NobodyBox(server, home, workspace, alice, bob, pid)
        finally:
            stop(server, pid)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def alive(box: NobodyBox) -> bool:
    """The server (nobody's) and the runuser above it both still running."""
    return box.server.process.poll() is None and Path(f"/proc/{box.pid}").exists()


async def test_bob_s_agent_reaches_nothing_that_is_not_his(box: NobodyBox) -> None:
    """tests/test_sandbox.py's, with the server (and so every agent) run by nobody."""
    secret = "the secret plan of alice"
    wrote, alice_turn = await attempt(box.alice, {"run": [f"echo '{secret}' > secret.txt"]})
    assert wrote == {f"run echo '{secret}' > secret.txt": "ok: "}
    [alice_tree] = [tree for tree in box.worktrees() if (tree / "secret.txt").exists()]
    assert (alice_tree / "secret.txt").read_text().strip() == secret
    assert (alice_tree / "secret.txt").stat().st_uid == pwd.getpwnam(USER).pw_uid
    plan = bobs_plan(box, alice_tree, head_of(alice_tree), box.pid)
    got, bob_turn = await attempt(box.bob, plan)

    nothing_got_through(box, got, plan, secret)
    assert alive(box)
    again = await box.alice.turn(user_message("{}", context_id=alice_turn.context_id))
    assert again.final_state == "completed"
    assert bob_turn.final_state == "completed"


async def test_the_agent_works_in_its_own_directory(box: NobodyBox) -> None:
    got, _ = await attempt(box.bob, OWN_WORK)
    own_work_done(got)


async def test_what_issue_54_found_fails_as_nobody_too(box: NobodyBox, abstract: str) -> None:
    """The second part's attacks (tests/test_fence_network.py, test_fence_kernel.py,
    test_sandbox_home.py), with every agent run by the service user itself: its network
    (the server's port, a host's abstract socket), the keyring, its proxy's socket, the
    kernel's knobs and a secret of no listed name."""
    port = box.server.url.rsplit(":", 1)[1]
    vault = box.home / ".vault-token"
    vault.write_text("hvs.the-service-user-s")
    give(vault, pwd.getpwnam(USER))
    forged = (
        f"curl -sS --noproxy '*' --max-time 5 -H 'X-Forwarded-For: 100.64.0.7' "
        f"http://127.0.0.1:{port}/v1/tasks"
    )
    proxied = (
        f"curl -sSf --max-time 10 --noproxy '' -x http://127.0.0.1:3128 http://127.0.0.1:{port}/"
    )
    plan = {
        "connect": [f"127.0.0.1:{port}"],
        "read": [str(vault)],
        "run": [forged, proxied, ADD_KEY, "rm -f /run/tailagent-proxy/proxy.sock",
                "echo 1 > /proc/sys/vm/overcommit_memory", abstract_connect(abstract),
                "echo '|/tmp/x' > /proc/sys/kernel/core_pattern"],
    }  # fmt: skip
    got, _ = await attempt(box.bob, plan)
    assert got_through(got) == {}, got
    found, _ = await attempt(box.alice, {"run": [FIND_KEY]})
    assert found[f"run {FIND_KEY}"].startswith("refused: "), found
    assert alive(box)


async def test_a_fifo_fails_its_own_turn_only_as_nobody_too(box: NobodyBox) -> None:
    """tests/test_fence_git.py's: Bob's FIFO `.gitignore` fails his own turn, naming it,
    while Alice's turn, started meanwhile in her own conversation, completes."""
    bob = asyncio.create_task(attempt(box.bob, {"run": ["mkfifo .gitignore", "echo x > b"]}))
    _, alice_turn = await asyncio.wait_for(attempt(box.alice, {"run": ["echo a > a.txt"]}), 30)
    assert alice_turn.final_state == "completed"
    _, bob_turn = await asyncio.wait_for(bob, 30)
    assert bob_turn.final_state == "failed"
    said = texts(bob_turn.last_message)
    assert ".gitignore in " in said and "FIFO" in said, said
    assert alive(box)


async def test_what_a_turn_leaves_behind_is_stopped_as_nobody_too(box: NobodyBox) -> None:
    """tests/test_sandbox_freeze.py's: a detached process and a thread the agent leaves
    behind are stopped once its turn ends, by a server that is not root, and thawed for
    the next turn only."""
    got, turn = await attempt(box.bob, LINGER)
    grow = lingering_on(got["linger grow.txt"])
    lingerers = pids_of(box.server, str(grow))
    assert lingerers
    assert not grows(grow) and not grows(grow.with_name("thread.txt"), 0.3)
    assert {held(pid) for pid in lingerers} == {"stopped"}  # nobody has no cgroup to give
    before = size(grow)
    again, second = await attempt(box.bob, SLEEP, context_id=turn.context_id)
    assert second.final_state == "completed", again
    assert size(grow) > before and not grows(grow)


async def test_the_agent_cannot_reach_the_shared_repository_its_uid_owns(box: NobodyBox) -> None:
    """As nobody the shared repository is the agent's own uid's, as everything is: only
    the fence keeps it from rewriting another conversation's branch there. It finds no
    such repository; its own turn's commit is pushed there by the server."""
    shared = box.workspace.parent / "team.git"
    plan = {"run": [f"ls {shared}", f"git --git-dir={shared} update-ref refs/x HEAD",
                    "echo handed over > handed.txt"]}  # fmt: skip
    got, turn = await attempt(box.alice, plan)
    assert got["run echo handed over > handed.txt"] == "ok: ", got
    assert [k for k, v in got.items() if v.startswith("ok") and "handed" not in k] == [], got
    commit = shared_ref(shared, turn.context_id)
    assert commit and sh_show(shared, commit) == "handed over\n"
    assert not (shared / "refs" / "x").exists()


def sh_show(shared: Path, commit: str) -> str:
    """handed.txt as the commit in the shared repository holds it."""
    return subprocess.run(
        ["git", "-C", str(shared), "show", f"{commit}:handed.txt"],
        capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
