"""Each conversation's agent is fenced by the operating system (issue 41): tried as an
attacker would, through a real server, with an agent that acts on the system directly.

Two people, Alice and Bob, each with a conversation and so a repository of its own. The
hostile agent (tests/hostile_acp_agent.py) carries out Bob's plan: read Alice's work and
commits, the state dir's secrets, the service user's keys, the server's environment;
plant files every later agent would run; signal the server; write into the base. Each
attempt must fail, checked from outside the sandbox too; the controls (its own
directory, git there, subprocesses, temp files, system files) must work.
"""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
import pytest
from google.protobuf.json_format import MessageToDict

from tailagent.access.tokens import TokenStore
from tailagent.sandbox.cgroups import Cgroups
from tests.a2a_helpers import A2A, Turn, data_parts, texts, user_message
from tests.conftest import RunningServer, start_server
from tests.test_isolation import make_project
from tests.warm_start import cli_run

HOSTILE = Path(__file__).parent / "hostile_acp_agent.py"
DB_PASSWORD = "hunter2-from-the-operator"
SECRETS = {
    ".ssh/id_ed25519": "-----BEGIN OPENSSH PRIVATE KEY----- the owner's",
    ".aws/credentials": "[default]\naws_secret_access_key = the owner's",
    ".config/gh/hosts.yml": "oauth_token: the owner's",
    ".config/chromium/Default/Cookies": "the owner's desk sign-in cookie",
    # Secrets no list names (issue 54): a home of the agent's own holds none of them.
    ".vault-token": "hvs.the owner's vault token",
    ".cargo/credentials.toml": "token = 'the owner's crates.io token'",
    ".bash_history": "export AWS_SECRET_ACCESS_KEY=the owner's",
    ".local/state/tailagent/local-token": "the other tailagent's admin token",
}
PLANTED = (".bashrc", ".claude/settings.json", ".npmrc", ".config/git/config", ".profile")


@dataclass
class Box:
    server: RunningServer
    home: Path
    workspace: Path
    alice: A2A
    bob: A2A

    def worktrees(self) -> list[Path]:
        """The conversations' folders (not the links named by short id that lead there)."""
        root = self.server.state_dir / "worktrees"
        return [
            p
            for p in root.iterdir()
            if p.is_dir() and not p.is_symlink() and not p.name.startswith(".")
        ]


def make_home(home: Path) -> None:
    """The service user's home: secrets, and the files an agent would plant in."""
    for name, text in SECRETS.items():
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text(text)
    for name in PLANTED:
        (home / name).parent.mkdir(parents=True, exist_ok=True)
        (home / name).write_text("# the owner's\n")


@pytest.fixture(scope="module")
def box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Box]:
    tmp = tmp_path_factory.mktemp("fence")
    # Not under /tmp, which every sandbox replaces with its own: a real home is elsewhere.
    home = Path(tempfile.mkdtemp(prefix="tailagent-home-", dir="/var/tmp"))
    make_home(home)
    workspace = tmp / "workspace"
    make_project(workspace, {"calc.py": "def add(a, b):\n    return a + b\n"})
    env = {**os.environ, "HOME": str(home), "DB_PASSWORD": DB_PASSWORD}
    command = f"{sys.executable} {HOSTILE}"
    with two_people(tmp, home, env, "--agent-command", command, "--isolation", "worktree") as box:
        yield box


@contextlib.contextmanager
def two_people(tmp: Path, home: Path, env: dict[str, str], *serve: str) -> Iterator[Box]:
    """A server started with `serve` and the service user's `home`, and Alice and Bob,
    each with a token of their own; the home goes with the server. The tokens are added
    to the state dir as `tailagent token add` adds them, without a CLI run for each:
    here they are only the way in."""
    server = start_server(tmp, *serve, env=env)
    try:
        tokens = TokenStore(server.state_dir)
        alice = A2A(server.url, tokens.add("alice", ("caller", "approver")))
        bob = A2A(server.url, tokens.add("bob", ("caller", "approver")))
        yield Box(server, home, tmp / "workspace", alice, bob)
    finally:
        server.stop()
        shutil.rmtree(home, ignore_errors=True)


async def attempt(agent: A2A, plan: dict[str, list[str]], context_id: str | None = None):  # type: ignore[no-untyped-def]
    """Runs the plan in the agent's conversation; the results, and the turn."""
    turn = await agent.turn(user_message(json.dumps(plan), context_id=context_id))
    while turn.final_state == "input_required":  # a terminal command: a person allows it
        assert data_parts(turn.last_message)[0]["kind"] == "permission_request"
        turn = await agent.turn(user_message("allow", task_id=turn.task_id))
    said = "".join(texts(a.artifact) for a in turn.artifacts("response"))
    return json.loads(said[said.index("{") :]), turn


def head_of(repository: Path) -> str:
    """A conversation's last commit, read by the test's own git, outside any sandbox."""
    return subprocess.run(  # the repository is the agent's uid's: git's ownership check
        ["git", "-c", "safe.directory=*", "-C", str(repository), "log", "-1", "--format=%H"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip


def bobs_plan(box: Box, alice_tree: Path, commit: str, server_pid: int) -> dict[str, list[str]]:
    """Everything Bob's agent tries on what is not his: Alice's work and commits, the
    state dir, the service user's secrets, the server's process, planted files, the
    base; and the same through a terminal a person allows."""
    state, home, pid = box.server.state_dir, box.home, str(server_pid)
    return {
        "list": [str(alice_tree), str(state), str(home / ".ssh"), f"/proc/{pid}/fd"],
        "read": [
            str(alice_tree / "secret.txt"),
            str(state / "local-token"),
            str(state / "tokens.json"),
            str(state / "signing-keys.json"),
            str(state / "desk-secret"),
            f"/proc/{pid}/environ",
            *(str(home / name) for name in SECRETS),
            str(box.workspace / "calc.py"),
        ],
        "write": [
            *(str(home / name) for name in PLANTED),
            str(box.workspace / "planted.py"),
            str(state / "planted"),
        ],
        "signal": [pid],
        "run": [
            f"git show {commit}:secret.txt",
            f"git cat-file -p {commit}",
            "git log --all -p | grep -c 'secret plan'",
            f"cat {state}/local-token",
        ],
        "terminal": [f"cat {state}/local-token; cat {alice_tree}/secret.txt; env"],
    }


def nothing_got_through(
    box: Box, got: dict[str, str], plan: dict[str, list[str]], secret: str
) -> None:
    """Each attempt refused, the approved terminal ran and saw none of it, and from
    outside: nothing planted in the home, the base or the state dir."""
    terminal = got.pop(f"terminal {plan['terminal'][0]}")
    assert got_through(got) == {}
    assert terminal.startswith("ran: ")  # it ran (approved), and saw none of it:
    for leaked in (secret, box.server.token, DB_PASSWORD):
        assert leaked not in json.dumps(got) and leaked not in terminal
    for name in PLANTED:
        assert (box.home / name).read_text() == "# the owner's\n", name
    state = box.server.state_dir
    assert not (box.workspace / "planted.py").exists() and not (state / "planted").exists()


# What an agent does in its own directory, which the fence must leave working.
OWN_WORK = {
    "write": ["notes.txt"],
    "read": ["notes.txt", "calc.py", "/etc/hostname", "/etc/os-release"],
    "run": ["git status --short", "python3 -c 'print(6 * 7)'", "ls /proc | grep -c ."],
    "temp": ["-"],
}


def own_work_done(got: dict[str, str]) -> None:
    assert [k for k, v in got.items() if not v.startswith("ok")] == [], got
    assert got["run python3 -c 'print(6 * 7)'"] == "ok: 42"
    assert "notes.txt" in got["run git status --short"]
    assert got["temp -"].startswith("ok: /tmp/")


def audit(state: Path) -> list[dict[str, Any]]:
    """`tailagent audit --json`: the decisions, as the operator reads them."""
    done = cli_run(
        [sys.executable, "-m", "tailagent", "audit", "--json", "--state-dir", str(state)],
        capture_output=True, text=True, timeout=30, check=True,
    )  # fmt: skip
    return [json.loads(line) for line in done.stdout.splitlines()]


def got_through(results: dict[str, str]) -> dict[str, str]:
    """The attempts that reached anything. A listing of a hidden directory may answer
    with the empty place that hides it (the path down to the agent's own directory is
    made of such places), so a listing got through only if it names something there."""
    allowed_listing = {"ok: ", "ok: worktrees"}
    return {
        k: v
        for k, v in results.items()
        if not v.startswith("refused") and not (k.startswith("list ") and v in allowed_listing)
    }


async def test_bob_s_agent_reaches_nothing_that_is_not_his(box: Box) -> None:
    state = box.server.state_dir
    secret = "the secret plan of alice"
    wrote, alice_turn = await attempt(box.alice, {"run": [f"echo '{secret}' > secret.txt"]})
    assert wrote == {f"run echo '{secret}' > secret.txt": "ok: "}
    [alice_tree] = [tree for tree in box.worktrees() if (tree / "secret.txt").exists()]
    assert (alice_tree / "secret.txt").read_text().strip() == secret

    plan = bobs_plan(box, alice_tree, head_of(alice_tree), box.server.process.pid)
    got, bob_turn = await attempt(box.bob, plan)

    nothing_got_through(box, got, plan, secret)
    assert box.server.process.poll() is None
    # The person's allowing of the terminal is audited with how the command was fenced.
    [row] = [entry for entry in audit(state) if "local-token" in entry["input"]]
    assert row["decision"] == "allow" and row["fence"] == "sandbox on, network on"
    again = await box.alice.turn(user_message("{}", context_id=alice_turn.context_id))
    assert again.final_state == "completed"
    assert bob_turn.final_state == "completed"


async def test_the_agent_works_in_its_own_directory(box: Box) -> None:
    got, _ = await attempt(box.bob, OWN_WORK)
    own_work_done(got)


async def test_a_fenced_conversation_merges_into_the_persons_checkout(box: Box) -> None:
    """As root each conversation's repository is its agent's uid's: the merge's fetch
    from it (git upload-pack, run by the server) must not be refused as git's "dubious
    ownership", which it was while the fetch left `safe.directory` out."""
    got, turn = await attempt(box.alice, {"run": ["echo from the fence > fenced.txt"]})
    assert got == {"run echo from the fence > fenced.txt": "ok: "}, got
    [tree] = [t for t in box.worktrees() if (t / "fenced.txt").exists()]
    assert tree.stat().st_uid != os.getuid()  # the agent's own uid, not the server's
    merged = await box.alice.send(user_message(context_id=turn.context_id, data={"kind": "merge"}))
    assert "merged (squash) into main" in texts(merged.message), merged
    assert (box.workspace / "fenced.txt").read_text() == "from the fence\n"


# --- Claude Code: the CLI, and whatever it runs (its tools, hooks, MCP servers) ------------


FAKE_CLI = Path(__file__).parent / "fake_claude_cli.py"


@pytest.fixture(scope="module")
def claude_box(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Box]:
    """Claude Code through the Claude Agent SDK, its CLI a hostile fake speaking the real
    stream-json protocol; the service user's home has a Claude login and settings."""
    tmp = tmp_path_factory.mktemp("claude-fence")
    home = Path(tempfile.mkdtemp(prefix="tailagent-home-", dir="/var/tmp"))
    make_home(home)
    (home / ".claude" / ".credentials.json").write_text('{"claudeAiOauth": "the owner\'s"}')
    workspace = tmp / "workspace"
    make_project(workspace, {"calc.py": "def add(a, b):\n    return a + b\n"})
    config = tmp / "tailagent.toml"
    config.write_text(f'[claude]\ncli_path = "{FAKE_CLI}"\n')
    env = {**os.environ, "HOME": str(home), "DB_PASSWORD": DB_PASSWORD, "FAKE_CLAUDE_LOG": "-"}
    with two_people(tmp, home, env, "--agent", "claude", "--config", str(config)) as box:
        yield box


async def claude_attempt(agent: A2A, plan: dict[str, list[str]]) -> dict[str, str]:
    turn = await agent.turn("attack " + json.dumps(plan))
    assert turn.final_state == "completed", texts(turn.last_message)
    said = "".join(texts(a.artifact) for a in turn.artifacts("response"))
    return json.loads(said[said.index("{") :])


async def test_claude_code_and_what_it_runs_are_fenced_too(claude_box: Box) -> None:
    box = claude_box
    state = box.server.state_dir
    wrote = await claude_attempt(box.alice, {"write": ["secret.txt"]})
    assert wrote == {"write secret.txt": "ok: wrote"}
    [alice_tree] = [tree for tree in box.worktrees() if (tree / "secret.txt").exists()]
    server_pid = str(box.server.process.pid)
    plan = {
        "read": [
            str(alice_tree / "secret.txt"),
            str(state / "local-token"),
            f"/proc/{server_pid}/environ",
            *(str(box.home / name) for name in SECRETS),
        ],
        "write": [str(box.home / name) for name in PLANTED] + [str(box.workspace / "x.py")],
        "signal": [server_pid],
        "list": [str(alice_tree), str(state)],
    }
    got = await claude_attempt(box.bob, plan)
    assert got_through(got) == {}
    for name in PLANTED:
        assert (box.home / name).read_text() == "# the owner's\n", name
    # Its own login it reads (and may refresh); its settings it reads and cannot change.
    own = await claude_attempt(
        box.bob,
        {
            "read": [str(box.home / ".claude" / ".credentials.json")],
            "write": [str(box.home / ".claude" / "settings.json"), str(box.home / ".claude.json")],
        },
    )
    assert own[f"read {box.home / '.claude' / '.credentials.json'}"].startswith("ok: ")
    assert own[f"write {box.home / '.claude' / 'settings.json'}"].startswith("refused")
    assert own[f"write {box.home / '.claude.json'}"] == "ok: wrote"  # its private copy
    assert not (box.home / ".claude.json").exists()  # the person's home, untouched


async def test_a_repositorys_own_claude_settings_are_not_read(claude_box: Box) -> None:
    """A repository's `.claude/settings*.json` (which the agent may write in its
    worktree) could allow tools without asking: only the person's own settings load."""
    await claude_box.alice.turn("hello")
    log = claude_box.server.log()
    argvs = [line for line in log.splitlines() if 'fake-claude-log: {"argv"' in line]
    assert argvs and all("--setting-sources=user" in line for line in argvs)
    assert all("blockReadsOutsideWorkingDirectories" in line for line in argvs)


# --- the network modes, mode = off, and a box with no sandbox ------------------------------


@pytest.fixture
def origin() -> Iterator[str]:
    """An HTTP server on the host's loopback, at 127.0.0.2 (not in the fence's NO_PROXY,
    so a client inside sends to it through the proxy)."""
    server = http.server.ThreadingHTTPServer(("127.0.0.2", 0), OriginHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"127.0.0.2:{server.server_address[1]}"
    server.shutdown()
    server.server_close()


class OriginHandler(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        body = b"from the origin"
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *_: object) -> None:
        pass


async def metadata(server: RunningServer, turn: Turn) -> dict[str, Any]:
    """The task's metadata as a client reads it (GetTask)."""
    task = await A2A(server.url, server.token).get(turn.task_id)
    return MessageToDict(task).get("metadata", {})


def fetch(url: str) -> str:
    """A command line that GETs `url` with Python's urllib (which honours the proxy
    variables, as agents' HTTP clients do)."""
    return f"python3 -c \"import urllib.request as u; print(u.urlopen('{url}').read().decode())\""


def start_fenced(tmp: Path, config: str) -> RunningServer:
    """A server in `tmp` running the hostile agent under `config`."""
    tmp.mkdir(parents=True, exist_ok=True)
    path = tmp / "tailagent.toml"
    path.write_text(config)
    make_project(tmp / "workspace")
    command = f"{sys.executable} {HOSTILE}"
    return start_server(tmp, "--agent-command", command, "--config", str(path))


async def test_network_none_reaches_nothing(tmp_path: Path, origin: str) -> None:
    server = start_fenced(tmp_path, '[sandbox]\nnetwork = "none"\n')
    try:
        port = server.url.rsplit(":", 1)[1]
        got, _ = await attempt(
            A2A(server.url, server.token),
            {"connect": [f"127.0.0.1:{port}", origin], "run": [fetch(f"http://{origin}/")]},
        )
        assert got_through(got) == {}
    finally:
        server.stop()


async def test_network_allowlist_reaches_only_what_it_names(tmp_path: Path, origin: str) -> None:
    config = f'[sandbox]\nnetwork = "allowlist"\nallow_hosts = ["{origin}"]\n'
    server = start_fenced(tmp_path, config)
    try:
        port = server.url.rsplit(":", 1)[1]
        other = origin.replace("127.0.0.2", "127.0.0.3")
        plan = {
            "connect": [f"127.0.0.1:{port}", origin],  # direct: no way out at all
            "run": [
                fetch(f"http://{origin}/"),
                fetch(f"http://{other}/"),  # the same origin under an address not named
                fetch(f"http://127.0.0.1:{port}/healthz"),  # loopback: the fence's own
            ],
        }
        got, turn = await attempt(A2A(server.url, server.token), plan)
        allowed = got.pop(f"run {fetch(f'http://{origin}/')}")
        assert allowed == "ok: from the origin"
        assert got_through(got) == {}
        async with httpx.AsyncClient(headers={"Authorization": f"Bearer {server.token}"}) as c:
            metrics = (await c.get(f"{server.url}/metrics")).text
        assert "tailagent_sandbox_proxy_refused 1.0" in metrics  # the address not named
        assert (await metadata(server, turn))["sandbox"] == {"mode": "on", "network": "allowlist"}
    finally:
        server.stop()


async def test_mode_off_is_said_everywhere(tmp_path: Path) -> None:
    server = start_fenced(tmp_path, '[sandbox]\nmode = "off"\n')
    try:
        async with httpx.AsyncClient() as client:
            health = (await client.get(f"{server.url}/healthz")).json()
        assert health["sandbox"] == {"mode": "off", "network": "unfenced"}
        assert "WARNING tailagent: sandbox: OFF (sandbox.mode = off)" in server.log()
        got, turn = await attempt(
            A2A(server.url, server.token), {"read": [str(server.state_dir / "local-token")]}
        )
        assert got_through(got) != {}  # unfenced, it reads the state dir: what off means
        assert (await metadata(server, turn))["sandbox"]["mode"] == "off"
    finally:
        server.stop()


def refused_start(tmp_path: Path, config: str) -> str:
    """`serve` of the hostile agent under `config`, which must refuse to start: its last
    line on stderr (and no traceback)."""
    path = tmp_path / "tailagent.toml"
    path.write_text(config)
    done = cli_run(
        [sys.executable, "-m", "tailagent", "serve", "--listen", "127.0.0.1:0",
         "--state-dir", str(tmp_path / "state"), "--config", str(path),
         "--agent-command", f"{sys.executable} {HOSTILE}"],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert done.returncode == 1 and "Traceback" not in done.stderr, done.stderr
    return done.stderr.strip().splitlines()[-1]


def test_with_no_sandbox_to_be_had_serve_refuses_and_says_what_to_do(tmp_path: Path) -> None:
    last = refused_start(tmp_path, f'[sandbox]\nbwrap = "{tmp_path / "no-bwrap"}"\n')
    assert last.startswith("tailagent: cannot fence the agent: sandbox.bwrap: ")
    assert 'sandbox.mode = "off"' in last


def test_doctor_says_whether_a_sandbox_can_be_made_here(tmp_path: Path) -> None:
    def doctor(config: str) -> str:
        path = tmp_path / "tailagent.toml"
        path.write_text(config)
        done = cli_run(
            [sys.executable, "-m", "tailagent", "doctor", "--agent-command", "hostile",
             "--config", str(path), "--state-dir", str(tmp_path / "state"), "--json"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        [check] = [c for c in json.loads(done.stdout) if c["name"] == "sandbox"]
        return f"{check['ok']} {check['detail']} | {check['fix']}"

    on = doctor("")
    assert on.startswith("True on (")
    # What freezes an agent between turns, as the server will find it (cgroups.py).
    found, said = Cgroups.find()
    assert f"; between turns frozen by {said};" in on
    assert said.startswith("the cgroup freezer, under " if found else "signals (")
    missing = doctor(f'[sandbox]\nbwrap = "{tmp_path / "no-bwrap"}"\n')
    assert missing.startswith("False no sandbox can be made here | sandbox.bwrap: ")
    assert doctor('[sandbox]\nmode = "off"\n').startswith("True OFF (sandbox.mode = off)")
