"""A bad setting stops the start with one line naming the file, the key and the problem."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from tailagent.config import ConfigError, parse_listen
from tailagent.config.sources import load_settings
from tests.warm_start import cli_run


def serve(*args: str, cwd: Path | None = None) -> subprocess.CompletedProcess[str]:
    return cli_run(
        [sys.executable, "-m", "tailagent", "serve", *args],
        capture_output=True,
        text=True,
        timeout=20,
        cwd=cwd,
    )


@pytest.mark.parametrize(
    ("toml", "expected"),
    [
        ('agnet = "echo"\n', "agnet: unknown key; did you mean 'agent'?"),
        ("[agent]\nidle_timout = 3\n", "did you mean 'agent.idle_timeout'?"),
        ('agent = "robot"\n', "agent: must be one of echo, claude"),
        ("max_body_bytes = -1\n", "max_body_bytes: must be a positive integer"),
        ('listen = "0.0.0.0:3008"\n', "expose it on your tailnet with `tailscale serve`"),
        ('public_url = "ftp://x"\n', "public_url: must be an http(s) URL"),
        ("listen = [1\n", "not valid TOML"),
        ('[tsnet]\nhostname = "claude_agent"\n', "tsnet.hostname: must be a DNS label"),
        ('[tsnet]\nhttps = "maybe"\n', "tsnet.https: must be one of auto, on, off"),
        ('[tsnet]\nadvertise_tags = ["agent"]\n', "tags start with 'tag:'"),
        ('listen = "unix:/tmp/t.sock"\n[tsnet]\nenabled = true\n', "use --listen 127.0.0.1:PORT"),
        ('tailnet_service = "agents"\n', "tailnet_service: must be svc: and a DNS label"),
        ('[workspace]\nshared_repository = "ext::sh -c id"\n', "neither an absolute path nor"),
        (
            '[desk]\npush_services = ["http://100.64.0.9:8080"]\n',
            "is not a push service: give a host (https is implied)",
        ),
        ('[desk]\npush_services = ["push service"]\n', "a push service is a host such as"),
        ("[desk]\npush_ttl = 0\n", "desk.push_ttl: must be a positive integer"),
    ],
)
def test_bad_config_file_stops_with_one_line(tmp_path: Path, toml: str, expected: str) -> None:
    config = tmp_path / "tailagent.toml"
    config.write_text(toml)
    result = serve("--config", str(config), "--state-dir", str(tmp_path / "s"))
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr
    assert str(config) in lines[0] and expected in lines[0]


def test_unreadable_config_file(tmp_path: Path) -> None:
    result = serve("--config", str(tmp_path / "missing.toml"))
    assert result.returncode == 2
    assert "missing.toml: (file): cannot read" in result.stderr


def test_non_loopback_flag_is_refused() -> None:
    result = serve("--listen", "0.0.0.0:3008")
    assert result.returncode == 2
    assert "command line: listen: refusing to listen on 0.0.0.0:3008" in result.stderr
    assert "tailscale serve" in result.stderr


def test_file_then_environment_then_flags(tmp_path: Path) -> None:
    config = tmp_path / "c.toml"
    config.write_text('name = "from-file"\nmax_permission_denials = 5\nlisten = "127.0.0.1:4000"\n')
    env = {"TAILAGENT_NAME": "from-env", "TAILAGENT_LISTEN": "127.0.0.1:4001"}
    settings = load_settings({"listen": "[::1]:4002"}, config, env)
    assert settings.max_permission_denials == 5
    assert settings.name == "from-env"
    assert settings.listen.host == "::1" and settings.listen.port == 4002
    with pytest.raises(ConfigError, match="environment: max_body_bytes"):
        load_settings({}, None, {"TAILAGENT_MAX_BODY_BYTES": "lots"})


def test_listen_forms() -> None:
    assert parse_listen("127.0.0.1:3008").bind() == "127.0.0.1:3008"
    assert parse_listen("[::1]:3008").bind() == "[::1]:3008"
    assert parse_listen("unix:/run/tailagent/sock").bind() == "unix:/run/tailagent/sock"
    for bad in ("10.0.0.5:80", "[::]:80", "example.com:80", "unix:relative", "3008"):
        with pytest.raises(ValueError):
            parse_listen(bad)


def test_state_dir_defaults_to_systemd_then_xdg(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("STATE_DIRECTORY", "/var/lib/tailagent:/var/lib/other")
    assert str(load_settings({}, None, {}).state_dir) == "/var/lib/tailagent"
    monkeypatch.delenv("STATE_DIRECTORY")
    monkeypatch.setenv("XDG_STATE_HOME", "/tmp/xdg")
    assert str(load_settings({}, None, {}).state_dir) == "/tmp/xdg/tailagent"


def test_port_in_use_is_one_clear_line(tmp_path: Path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        result = serve("--listen", f"127.0.0.1:{port}", "--state-dir", str(tmp_path / "s"))
    assert result.returncode == 1
    assert result.stderr.strip() == (
        f"tailagent: cannot listen on 127.0.0.1:{port}: Address already in use"
    )


def test_the_agent_and_its_table_in_one_file(tmp_path: Path) -> None:
    """`agent = "echo"` and an [agent] table cannot share a TOML file; the table's
    `name` chooses the agent instead."""
    config = tmp_path / "tailagent.toml"
    config.write_text('[agent]\nname = "echo"\nidle_timeout = 60\n')
    settings = load_settings({}, config, environ={})
    assert settings.agent == "echo" and settings.agent_process.idle_timeout == 60
    config.write_text('[agent]\nname = "robot"\n')
    with pytest.raises(ConfigError, match="agent: must be one of"):
        load_settings({}, config, environ={})


def test_help_names_the_real_default_agent() -> None:
    result = cli_run(
        [sys.executable, "-m", "tailagent", "serve", "--help"],
        capture_output=True, text=True, timeout=20, env={"COLUMNS": "200"},
    )  # fmt: skip
    assert "(default: claude)" in result.stdout


def test_the_old_name_of_repository_isolation_still_works_and_says_so(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """`worktree` was `repository`'s name until each conversation had a repository of
    its own: a config or a unit written then keeps working, told the new name once."""
    config = tmp_path / "c.toml"
    config.write_text('[workspace]\nisolation = "worktree"\n')
    assert load_settings({}, config, {}).workspace.isolation == "repository"
    assert 'is now called "repository"' in caplog.text
    caplog.clear()
    flags = load_settings({"workspace.isolation": "worktree"}, None, {})
    assert flags.workspace.isolation == "repository" and "repository" in caplog.text
    assert load_settings({}, None, {}).workspace.isolation == "repository"
    with pytest.raises(ConfigError, match="must be one of repository, shared"):
        load_settings({}, None, {"TAILAGENT_WORKSPACE_ISOLATION": "worktrees"})
