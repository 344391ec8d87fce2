"""The one-file binary (tailagent/binary/build.py), run as a user on a box without
Python would: PATH=/usr/bin:/bin, no virtualenv, no PYTHONPATH or PYTHONHOME.

.ci/run builds dist/tailagent before the suite; here it is rebuilt only when it is
missing or older than the sources (about a minute, once)."""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

import pytest

from tailagent import __version__
from tests.build_lock import building
from tests.conftest import RunningServer, start_server
from tests.real_tailnet import Tailnet, module_tailnet
from tests.test_acp import FAKE as FAKE_ACP_AGENT
from tests.test_claude import FAKE_CLI as FAKE_CLAUDE_CLI
from tests.test_real_tailnet import peers_seen_from, send
from tests.test_service import needs_systemd, unit_visible, verify
from tests.test_tsnet import dns_name, login_of, start_tsnet

ROOT = Path(__file__).resolve().parent.parent
BINARY = ROOT / "dist" / "tailagent"
SOURCES = [
    *ROOT.joinpath("tailagent").rglob("*.py"),
    *ROOT.joinpath("tailagent", "web", "templates").iterdir(),
    *ROOT.joinpath("tailagent", "web", "static").iterdir(),
    ROOT / "tailagent" / "binary" / "pins.txt",
    ROOT / "tailagent" / "tailnet" / "tsnet" / "libtailagent_tsnet.so",
]


def stale() -> bool:
    if not BINARY.is_file():
        return True
    built = BINARY.stat().st_mtime
    return any(path.stat().st_mtime > built for path in SOURCES if path.exists())


@pytest.fixture(scope="session")
def binary() -> Path:
    if importlib.util.find_spec("PyInstaller") is None:
        pytest.skip("PyInstaller is not installed (pip install -e '.[dev]' brings it)")
    with building(ROOT / ".cache" / "binary.lock"):
        if stale():
            built = subprocess.run(
                [sys.executable, str(ROOT / "tailagent" / "binary" / "build.py")],
                capture_output=True, text=True, timeout=900,
            )  # fmt: skip
            assert built.returncode == 0, built.stdout[-3000:] + built.stderr[-3000:]
    return BINARY


@pytest.fixture(scope="module")
def plain_env(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """A box with no Python of ours: system PATH, a home of its own, nothing else."""
    home = tmp_path_factory.mktemp("home")
    return {"PATH": "/usr/bin:/bin", "HOME": str(home), "LANG": "C.UTF-8"}


def run(
    command: list[str], *args: str, env: dict[str, str], stdin: str | None = None
) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=180, env=env, input=stdin
    )


@pytest.fixture(scope="module")
def server(
    binary: Path, plain_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[RunningServer]:
    running = start_server(tmp_path_factory.mktemp("binary"), command=[str(binary)], env=plain_env)
    yield running
    assert running.stop() == 0, running.log()


def user_env(plain_env: dict[str, str], server: RunningServer) -> dict[str, str]:
    return {**plain_env, "TAILAGENT_STATE_DIR": str(server.state_dir)}


def test_version_names_the_binary_and_what_it_carries(
    binary: Path, plain_env: dict[str, str]
) -> None:
    shown = run([str(binary)], "--version", env=plain_env)
    assert shown.returncode == 0, shown.stderr
    lines = shown.stdout.splitlines()
    assert lines[0] == f"tailagent {__version__}"
    assert lines[1].startswith(f"binary {binary} (Python ")
    for name in ("a2a-sdk", "claude-agent-sdk", "agent-client-protocol"):
        assert f"  {name} {metadata.version(name)}" in lines
    go_mod = (ROOT / "tailagent" / "tailnet" / "tsnet" / "go.mod").read_text()
    tailscale = re.search(r"tailscale\.com (v\S+)", go_mod)
    assert tailscale is not None
    assert f"  tailscale.com (tsnet) {tailscale.group(1)}" in lines


def test_serve_and_call_from_the_binary(
    binary: Path, plain_env: dict[str, str], server: RunningServer
) -> None:
    called = run([str(binary)], "call", "hello", env=user_env(plain_env, server))
    assert called.returncode == 0, called.stdout + called.stderr
    assert "echo: hello" in called.stdout
    assert called.stdout.rstrip().endswith("[completed]")
    # Each mend checks its dependency's version through importlib.metadata: the binary
    # carries what they read, so none is left out.
    assert "mend left out" not in server.log(), server.log()


def test_a_permission_prompt_is_answered_with_the_binary(
    binary: Path, plain_env: dict[str, str], server: RunningServer
) -> None:
    env = user_env(plain_env, server)
    asked = run([str(binary)], "call", "ask", env=env)
    assert asked.returncode == 3, asked.stdout + asked.stderr
    allow = next(  # the follow-up names the binary as it was run, not `tailagent`
        line.strip()
        for line in asked.stdout.splitlines()
        if line.strip().startswith(f"{binary} call allow")
    )
    answered = run([str(binary)], *shlex.split(allow)[1:], env=env)
    assert answered.returncode == 0, answered.stdout + answered.stderr
    assert "✓ rm -rf build: completed" in answered.stdout
    # The binary's `audit` reads the decision from the server's store.
    task_id = asked.stdout.split("task ", 1)[1].split()[0]
    audit = run([str(binary)], "audit", "--json", env=env)
    assert audit.returncode == 0, audit.stderr
    row = next(r for r in map(json.loads, audit.stdout.splitlines()) if r["task_id"] == task_id)
    assert row["decision"] == "allow" and row["answered_by"].startswith("token:local")


def test_the_binary_verifies_a_signed_card(
    binary: Path, plain_env: dict[str, str], server: RunningServer
) -> None:
    shown = run([str(binary)], "card", server.url, env=plain_env)
    assert shown.returncode == 0, shown.stderr
    assert "signature: valid" in shown.stdout


def test_doctor_says_it_runs_from_the_binary(
    binary: Path, plain_env: dict[str, str], server: RunningServer
) -> None:
    checked = run([str(binary)], "doctor", "--json", env=user_env(plain_env, server))
    checks = {check["name"]: check for check in json.loads(checked.stdout)}
    assert checks["install"]["detail"].startswith(f"binary {binary} (Python ")
    # The server running on the state dir is found where it listens, not on the default port.
    assert checks["listener"]["ok"], checks["listener"]
    found = f"tailagent answers on {server.url} (the running server's)"
    assert checks["listener"]["detail"] == found


@needs_systemd
def test_service_install_writes_a_unit_that_runs_the_binary(
    binary: Path, plain_env: dict[str, str], tmp_path: Path
) -> None:
    workspace = unit_visible("binary-service")  # not /tmp: the system unit has its own
    try:
        installed = run(
            [str(binary)], "service", "install", "--dest", str(tmp_path),
            "--workspace", str(workspace), env=plain_env,
        )  # fmt: skip
    finally:
        shutil.rmtree(workspace)
    assert installed.returncode == 0, installed.stderr
    unit = (tmp_path / "tailagent.service").read_text()
    assert f"ExecStart={binary} serve --cwd {workspace}" in unit
    checked = verify(tmp_path / "tailagent.service", False, tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@dataclass
class AcpBinary:
    """The binary serving the fake ACP agent (the agent is its own program, with its own
    Python: only tailagent is the binary). Its tests share one start, as a start unpacks a
    whole Python: a new one is made only when a test has killed the last."""

    binary: Path
    env: dict[str, str]
    tmp: pytest.TempPathFactory
    current: RunningServer | None = None

    def running(self) -> RunningServer:
        if self.current is None or self.current.process.poll() is not None:
            agent = shlex.join([sys.executable, str(FAKE_ACP_AGENT)])
            self.current = start_server(self.tmp.mktemp("acp"), "--agent-command", agent,
                                        command=[str(self.binary)], env=self.env)  # fmt: skip
        return self.current


@pytest.fixture(scope="module")
def acp_binary(
    binary: Path, plain_env: dict[str, str], tmp_path_factory: pytest.TempPathFactory
) -> Iterator[AcpBinary]:
    servers = AcpBinary(binary, plain_env, tmp_path_factory)
    yield servers
    if servers.current is not None and servers.current.process.poll() is None:
        assert servers.current.stop() == 0, servers.current.log()


def test_an_acp_agent_behind_the_binary(
    binary: Path, plain_env: dict[str, str], acp_binary: AcpBinary
) -> None:
    running = acp_binary.running()
    called = run([str(binary)], "call", "tool hello", env=user_env(plain_env, running))
    assert called.returncode == 0, called.stdout + called.stderr + running.log()
    assert "turn 1 of session" in called.stdout
    # tailagent's own MCP server, which the agent starts from the binary itself
    # (a token's turn: the tool answers that no person asked for it).
    tools = run([str(binary)], "call", "mcp:list_peers", env=user_env(plain_env, running))
    assert "mcp list_peers error: " in tools.stdout, tools.stdout + running.log()
    assert "no person's turn is running" in tools.stdout


def descendants(pid: int) -> set[int]:
    """Every process under `pid`, as `ps --forest` would show them (read from /proc)."""
    parents = {}
    for stat in Path("/proc").glob("[0-9]*/stat"):
        with contextlib.suppress(OSError):  # a process that ended while listed
            parents[int(stat.parent.name)] = int(stat.read_text().rsplit(")", 1)[1].split()[1])
    found, level = set(), {pid}
    while level:
        level = {child for child, parent in parents.items() if parent in level}
        found |= level
    return found


def running_pids(pids: set[int]) -> set[int]:
    """Those of `pids` still running (a zombie has ended: only its exit code is left)."""
    left = set()
    for pid in pids:
        with contextlib.suppress(OSError):
            if Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z":
                left.add(pid)
    return left


def unpacked_dir(pid: int) -> Path | None:
    """Where the bootloader unpacked the process's Python, as it told its child."""
    with contextlib.suppress(OSError):
        for variable in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0"):
            name, _, value = variable.decode().partition("=")
            if name == "_PYI_APPLICATION_HOME_DIR":
                return Path(value)
    return None


def test_a_killed_binary_takes_its_server_and_agent_with_it(
    binary: Path, plain_env: dict[str, str], acp_binary: AcpBinary
) -> None:
    """`kill -9` reaches only the bootloader, the process the user started: the server
    it unpacked and ran stops too, as on a SIGTERM, and with it the server's agent; the
    ~130 MB the bootloader unpacked into /tmp go as well. (The ACP tests' shared server:
    after this one, the next that wants it starts another.)"""
    running = acp_binary.running()
    under: set[int] = set()
    try:
        called = run([str(binary)], "call", "tool hello", env=user_env(plain_env, running))
        assert called.returncode == 0, called.stdout + called.stderr + running.log()
        under = descendants(running.process.pid)  # the server, the agent's sandbox, the agent
        commands = [Path(f"/proc/{pid}/cmdline").read_bytes() for pid in under]
        assert any(str(FAKE_ACP_AGENT).encode() in command for command in commands), commands
        unpacked = next(found for pid in under if (found := unpacked_dir(pid)) is not None)
        assert unpacked.is_dir()
        running.process.kill()
        running.process.wait()
        deadline = time.monotonic() + 60  # the server's own stop, however slow the box
        while (left := running_pids(under)) or unpacked.exists():
            assert time.monotonic() < deadline, f"still there: {left} {unpacked}\n{running.log()}"
            time.sleep(0.1)
        assert re.search(r" INFO tailagent: stopped$", running.log(), re.MULTILINE), running.log()
    finally:
        running.stop()
        for pid in running_pids(under):  # none when it passed: no orphans of a failure
            os.kill(pid, signal.SIGKILL)


def test_claude_through_the_sdk_behind_the_binary(
    binary: Path, plain_env: dict[str, str], tmp_path: Path
) -> None:
    config = tmp_path / "tailagent.toml"
    config.write_text(f'[claude]\ncli_path = "{FAKE_CLAUDE_CLI}"\n')
    env = {**plain_env, "ANTHROPIC_API_KEY": "test-key"}
    running = start_server(
        tmp_path, "--agent", "claude", "--config", str(config), command=[str(binary)], env=env
    )
    try:
        called = run([str(binary)], "call", "hello", env=user_env(env, running))
        assert called.returncode == 0, called.stdout + called.stderr + running.log()
        assert "[completed]" in called.stdout.splitlines()
        assert f"Claude Code CLI: {FAKE_CLAUDE_CLI} (claude.cli_path)" in running.log()
    finally:
        running.stop()


def test_without_a_claude_cli_the_binary_says_where_it_looked(
    binary: Path, plain_env: dict[str, str], tmp_path: Path
) -> None:
    """The binary leaves the SDK's 384 MB CLI out: with none on PATH, one line says so."""
    assert shutil.which("claude", path=plain_env["PATH"]) is None
    args = ("--agent", "claude", "--state-dir", str(tmp_path / "s"))
    failed = run([str(binary)], "serve", "--listen", "127.0.0.1:0", "--cwd", str(tmp_path), *args,
                 env=plain_env)  # fmt: skip
    assert failed.returncode != 0
    (line,) = failed.stderr.strip().splitlines()
    assert "no Claude Code CLI (this tailagent binary does not carry one" in line, line
    assert "claude.cli_path" in line
    checked = run([str(binary)], "doctor", *args, env=plain_env)
    assert "✗ agent: no Claude Code CLI (this tailagent binary does not carry one" in checked.stdout


def test_bad_input_is_answered_by_the_binary_as_by_the_package(
    binary: Path, plain_env: dict[str, str], tmp_path: Path
) -> None:
    bad_config = tmp_path / "bad.toml"
    bad_config.write_text("[agent]\nidle_timout = 5\n")
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()
    port = taken.getsockname()[1]
    cases = {
        "a bad config": ("--config", str(bad_config)),
        "a port in use": ("--listen", f"127.0.0.1:{port}"),
        "a missing agent": ("--agent-command", "/nonexistent/agent --acp"),
    }
    package = [sys.executable, "-m", "tailagent"]
    package_env = {k: v for k, v in os.environ.items() if not k.startswith("TAILAGENT_")}
    try:
        for case, flags in cases.items():
            answers = []
            for command, env in (([str(binary)], plain_env), (package, package_env)):
                state = tmp_path / f"state-{len(answers)}-{case.replace(' ', '-')}"
                failed = run(command, "serve", "--state-dir", str(state),
                             "--cwd", str(tmp_path), *flags, env=env)  # fmt: skip
                # One line says why (after the log's own lines, if any).
                line = failed.stderr.strip().splitlines()[-1]
                assert failed.returncode != 0 and line.startswith("tailagent"), (case, line)
                answers.append((failed.returncode, line.replace(str(state), "STATE")))
            assert answers[0] == answers[1], case
    finally:
        taken.close()


@pytest.fixture(scope="module")
def tailnet(binary: Path) -> Iterator[Tailnet]:
    yield from module_tailnet({"callerbox": {"proxy": True}, "agentbox": {}})


def test_serve_tsnet_from_the_binary_joins_and_knows_its_caller(
    binary: Path, plain_env: dict[str, str], tailnet: Tailnet, tmp_path: Path
) -> None:
    caller = tailnet.nodes["callerbox"]
    login = login_of(caller)
    config = f'[access]\nallowed_logins = ["{login}"]\n'
    agent = start_tsnet(
        tailnet, tmp_path, "binagent", config=config, command=[str(binary)], base_env=plain_env
    )
    try:
        response = send(caller, f"http://{dns_name('binagent')}/", "hello from a node")
        assert response.status_code == 200, response.text
        assert response.json()["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
        assert f"user:{login} (tailnet connection)" in agent.last_access_line()
        # `peers` from the binary on the caller's box (through its tailscaled) finds it.
        seen = peers_seen_from(caller, tmp_path / "known.json", [str(binary)], plain_env)
        rows = {row["peer"]: row for row in seen}
        assert rows[dns_name("binagent")]["signature"] == "valid (key from jku, not pinned)"
    finally:
        assert agent.stop() == 0, agent.log()


def test_serve_tailnet_from_the_binary_adds_and_removes_its_serve_entry(
    binary: Path, plain_env: dict[str, str], tailnet: Tailnet, tmp_path: Path
) -> None:
    box = tailnet.nodes["agentbox"]
    server = start_server(tmp_path, "--tailnet", "--tailnet-port", "8443",
                          "--tailscale-socket", str(box.socket),
                          command=[str(binary)], env=plain_env)  # fmt: skip
    try:
        served = json.loads(box.tailscale("serve", "status", "--json"))
        assert served["Web"][f"{box.dns_name}:8443"]["Handlers"]["/"]["Proxy"] == server.url
    finally:
        assert server.stop() == 0, server.log()
    served = json.loads(box.tailscale("serve", "status", "--json"))
    assert f"{box.dns_name}:8443" not in served.get("Web", {})


def test_tokens_and_keys_from_the_binary(
    binary: Path, plain_env: dict[str, str], server: RunningServer
) -> None:
    env = user_env(plain_env, server)
    added = run([str(binary)], "token", "add", "ci", "--role", "approver", env=env)
    assert added.returncode == 0, added.stderr
    token = next(word for word in added.stdout.split() if len(word) > 30)
    listed = run([str(binary)], "token", "list", env=env)
    assert listed.returncode == 0, listed.stderr
    assert re.search(r"^\W*ci\b.*\bapprover\b", listed.stdout, re.MULTILINE), listed.stdout
    # The new token reaches the server started by the binary.
    called = run([str(binary)], "call", "hello", "--url", server.url, "--token", token, env=env)
    assert called.returncode == 0, called.stdout + called.stderr
    shown = run([str(binary)], "keys", "show", env=env)
    assert shown.returncode == 0 and "ES256" in shown.stdout, shown.stdout + shown.stderr
