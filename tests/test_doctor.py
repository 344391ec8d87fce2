"""`tailagent doctor` against the fake tailscaled, up and down."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import tailagent
from tailagent.statedir.lock import StateLock
from tests.conftest import RunningServer, start_server
from tests.tailnet import FakeTailscaled, whois
from tests.warm_start import cli_run


def doctor(*args: str) -> subprocess.CompletedProcess[str]:
    return cli_run(
        [sys.executable, "-m", "tailagent", "doctor", "--agent", "echo", *args],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_all_good_then_tailscaled_down(tmp_path: Path) -> None:
    fake = FakeTailscaled(tmp_path / "ts").start()
    server = start_server(tmp_path, "--tailscale-socket", str(fake.socket))
    try:
        listen = server.url.removeprefix("http://")
        fake.peers["100.64.0.1"] = whois("owner@example.com", name="devbox", ip="100.64.0.1")
        fake.serve = {"Web": {"devbox.tail1234.ts.net:443": {"Handlers": {"/": {
            "Proxy": server.url}}}}}  # fmt: skip
        fake.write()
        args = ("--listen", listen, "--state-dir", str(server.state_dir),
                "--tailscale-socket", str(fake.socket))  # fmt: skip
        good = doctor(*args)
        assert good.returncode == 0, good.stdout
        lines = good.stdout.splitlines()
        assert len(lines) == 11 and all(line.startswith("✓") for line in lines)
        assert "✓ worktrees: none kept" in lines  # a workspace that is no git repository
        assert "✓ sandbox: none needed: the echo agent runs no process" in lines
        assert lines[0].startswith(f"✓ install: package {Path(tailagent.__file__).parent} (Python ")
        assert any("tailscale serve: https://devbox.tail1234.ts.net ->" in line for line in lines)
        checks = {c["name"]: c for c in json.loads(doctor(*args, "--json").stdout)}
        assert checks["signing key"]["ok"] and checks["listener"]["ok"]

        fake.serve = {}
        fake.write()
        unserved = doctor(*args)
        assert unserved.returncode == 1
        assert "✗ tailscale serve: nothing serves" in unserved.stdout
        assert f"fix: sudo tailscale serve --bg {server.url}" in unserved.stdout

        fake.stop()
        down = doctor(*args)
        assert down.returncode == 1
        assert f"✗ tailscaled: tailscaled at {fake.socket} is not reachable" in down.stdout
        assert "fix: start tailscaled" in down.stdout
    finally:
        server.stop()
        fake.stop()


def test_nothing_listening_and_an_open_state_dir(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.mkdir(mode=0o755)
    state.chmod(0o755)
    result = doctor("--listen", "127.0.0.1:9", "--state-dir", str(state),
                    "--tailscale-socket", str(tmp_path / "none.sock"))  # fmt: skip
    assert result.returncode == 1
    assert "✗ listener: nothing answers on http://127.0.0.1:9" in result.stdout
    assert "✗ state dir" in result.stdout and "chmod 700" in result.stdout


def test_doctor_checks_the_running_servers_agent_and_survives_a_closed_pipe(
    server: RunningServer,
) -> None:
    """On the session's shared server (the echo agent; doctor's own default is claude):
    doctor only reads what runs there."""
    result = cli_run(
        [sys.executable, "-m", "tailagent", "doctor", "--json", "--state-dir",
         str(server.state_dir)], capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    agent = next(c for c in json.loads(result.stdout) if c["name"] == "agent")
    assert agent == {"name": "agent", "ok": True, "fix": "",
                     "detail": "echo (offline) (the running server's)"}  # fmt: skip
    # `true` has exited long before doctor writes: its write meets a closed pipe.
    piped = subprocess.run(
        f"{sys.executable} -m tailagent doctor --json --state-dir {server.state_dir} "
        "| true", shell=True, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert piped.stderr == "", piped.stderr


def test_another_state_dirs_server_is_not_taken_for_this_ones(
    server: RunningServer, tmp_path: Path
) -> None:
    """The session's shared server answers; doctor asks about an empty state dir."""
    empty = tmp_path / "empty"
    result = doctor("--listen", server.url.removeprefix("http://"), "--state-dir", str(empty))
    line = next(x for x in result.stdout.splitlines() if "listener:" in x)
    assert line.startswith(
        f"✗ listener: no server runs on the state dir {empty}; the "
        f"tailagent answering on {server.url} is another state dir's"
    )
    assert f"tailagent serve --state-dir {empty}" in line


def test_a_running_tsnet_servers_node_is_checked_without_repeating_tsnet(tmp_path: Path) -> None:
    """What the lock of a `serve --tsnet` says of it (held here as the server would)."""
    state = tmp_path / "state"
    lock = StateLock(state)
    lock.acquire()
    try:
        lock.describe("http://127.0.0.1:9", "echo", tsnet=True)
        result = doctor("--state-dir", str(state), "--tailscale-socket", str(tmp_path / "no"))
        names = [line.split(":")[0] for line in result.stdout.splitlines()]
        assert "✓ tsnet library" in names or "✗ tsnet library" in names, result.stdout
        assert not any("tailscaled" in name or "whois" in name for name in names)
    finally:
        lock.release()


def fake_node(bin_dir: Path, latest: str | None) -> dict[str, str]:
    """An environment whose `npx` exists and whose `npm view` answers `latest` (None:
    it fails, as npm does offline): doctor asks the registry, never this test."""
    bin_dir.mkdir()
    answer = f"echo {latest}" if latest else "echo 'npm error network' >&2; exit 1"
    (bin_dir / "npm").write_text(f'#!/bin/sh\n[ "$1 $3" = "view version" ] || exit 2\n{answer}\n')
    (bin_dir / "npx").write_text("#!/bin/sh\nexit 0\n")
    for tool in ("npm", "npx"):
        (bin_dir / tool).chmod(0o755)
    return {"PATH": f"{bin_dir}:/usr/bin:/bin", "HOME": str(bin_dir.parent), "COLUMNS": "80"}


def agent_line(tmp_path: Path, env: dict[str, str], *args: str) -> str:
    result = cli_run(
        [sys.executable, "-m", "tailagent", "doctor", "--state-dir", str(tmp_path / "state"),
         "--tailscale-socket", str(tmp_path / "none.sock"), *args],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    return next(line for line in result.stdout.splitlines() if " agent:" in line)


def test_doctor_names_the_package_and_version_a_preset_runs(tmp_path: Path) -> None:
    env = fake_node(tmp_path / "bin", "2.6.0")
    line = agent_line(tmp_path, env, "--agent", "codex")
    assert line == "✓ agent: codex through npx: @agentclientprotocol/codex-acp@2.6.0 (npm's latest)"
    config = tmp_path / "pinned.toml"
    config.write_text('[agent]\npackage_version = "2.1.0"\n')
    old = agent_line(tmp_path, env, "--agent", "codex", "--config", str(config))
    assert old == (
        "✓ agent: codex through npx: @agentclientprotocol/codex-acp@2.1.0 "
        "(agent.package_version), an old one: npm's latest is 2.6.0 — fix: set "
        "agent.package_version to 2.6.0, or remove it to run the latest"
    )
    result = cli_run(
        [sys.executable, "-m", "tailagent", "doctor", "--json", "--agent", "qwen", "--config",
         str(config), "--state-dir", str(tmp_path / "state")],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    agent = next(c for c in json.loads(result.stdout) if c["name"] == "agent")
    assert {k: agent[k] for k in ("package", "version", "pinned", "latest")} == {
        "package": "@qwen-code/qwen-code", "version": "2.1.0", "pinned": True,
        "latest": "2.6.0",
    }  # fmt: skip


def test_doctor_offline_says_it_could_not_check_the_latest(tmp_path: Path) -> None:
    env = fake_node(tmp_path / "bin", None)
    line = agent_line(tmp_path, env, "--agent", "opencode")
    assert line == (
        "✓ agent: opencode through npx: opencode-ai, its latest (could not ask npm which that is)"
    )
    config = tmp_path / "pinned.toml"
    config.write_text('[agent]\npackage_version = "1.0.0"\n')
    pinned = agent_line(tmp_path, env, "--agent", "claude-acp", "--config", str(config))
    assert pinned == (
        "✓ agent: claude-acp through npx: @agentclientprotocol/claude-agent-acp@1.0.0 "
        "(agent.package_version); could not ask npm for its latest"
    )


def test_doctor_checks_the_login_and_the_node_version_a_preset_asks_for(tmp_path: Path) -> None:
    """The package installed for qwen declares `engines.node >=22`; this box's node is 20:
    doctor says so, and that no login is found, each with its fix."""
    env = fake_node(tmp_path / "bin", "2.1.0")
    (tmp_path / "bin" / "node").write_text("#!/bin/sh\necho v20.19.1\n")
    (tmp_path / "bin" / "node").chmod(0o755)
    folder = tmp_path / ".cache" / "tailagent" / "agents" / "@qwen-code+qwen-code@2.1.0"
    package = folder / "node_modules" / "@qwen-code" / "qwen-code"
    package.mkdir(parents=True)
    (package / "package.json").write_text('{"name": "@qwen-code/qwen-code", "engines": '
                                          '{"node": ">=22.0.0"}}')  # fmt: skip
    (folder / ".installed").write_text("@qwen-code/qwen-code@2.1.0\n")
    config = tmp_path / "pinned.toml"
    config.write_text('[agent]\npackage_version = "2.1.0"\n')
    result = cli_run(
        [sys.executable, "-m", "tailagent", "doctor", "--agent", "qwen", "--config", str(config),
         "--state-dir", str(tmp_path / "state"), "--tailscale-socket", str(tmp_path / "no.sock")],
        capture_output=True, text=True, timeout=60, env=env,
    )  # fmt: skip
    lines = result.stdout.splitlines()
    node = next(line for line in lines if line.startswith(("✓ node:", "✗ node:")))
    assert node.startswith("✗ node: @qwen-code/qwen-code asks for Node >=22.0.0 (")
    assert "node is 20.19.1 — fix: install a Node.js >=22.0.0" in node
    login = next(line for line in lines if " agent login:" in line)
    assert login.startswith(f"✗ agent login: no login found in {tmp_path}/.qwen/oauth_creds.json")
    assert "fix: run `npx -y @qwen-code/qwen-code` once on the server" in login
    assert result.returncode == 1

    (tmp_path / "bin" / "node").write_text("#!/bin/sh\necho v22.3.0\n")
    keyed = {**env, "DASHSCOPE_API_KEY": "k"}
    again = cli_run(
        [sys.executable, "-m", "tailagent", "doctor", "--agent", "qwen", "--config", str(config),
         "--state-dir", str(tmp_path / "state"), "--tailscale-socket", str(tmp_path / "no.sock")],
        capture_output=True, text=True, timeout=60, env=keyed,
    ).stdout.splitlines()  # fmt: skip
    assert "✓ agent login: DASHSCOPE_API_KEY is set" in again
    assert any(line.startswith("✓ node:") and "node is 22.3.0" in line for line in again)


def test_tailscaled_as_the_service_user_is_said(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With tailscaled running as the server's own user, a connection of that user to
    either listener is taken for `tailscale serve`: doctor says what that means and what
    to do (tests/test_tailscaled_as_service_user.py shows it on a real tailnet)."""
    from tailagent.admin.doctor import _forwarder

    socket_file = tmp_path / "tailscaled.sock"
    socket_file.touch()
    monkeypatch.setattr("os.getuid", lambda: socket_file.stat().st_uid or 65534)
    if socket_file.stat().st_uid == 0:  # as root: the socket a service user's
        os.chown(socket_file, 65534, 65534)
    [said] = _forwarder(socket_file)
    assert said.name == "forwarded-for" and "runs as this server's own user" in said.detail
    assert said.fix.startswith("run tailscaled as root")
    assert "a unix-socket listener does not help here" in said.fix
    monkeypatch.setattr("os.getuid", lambda: 4242)
    assert _forwarder(socket_file) == []  # tailscaled as a user of its own
