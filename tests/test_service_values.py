"""What `service install` writes into a unit: every value either read back by systemd
exactly as given, or refused in one line before anything is written (a newline in
the workspace once put `ExecStartPre=` into the unit)."""

from __future__ import annotations

import os
import shlex
import sys
from pathlib import Path

import pytest

from tailagent.agent_kinds import KINDS
from tailagent.service import install as install_in_process
from tailagent.service.unit import Unit
from tests.test_service import exec_start, install, needs_systemd, outside, verify

__all__ = ["outside"]  # the fixture, used here by name

INJECTED = "ExecStartPre=touch pwned"  # a file name too: no slash


def refused(result_stderr: str, name: str) -> None:
    """One line, naming the value, no traceback."""
    assert result_stderr.startswith(f"tailagent: {name} "), result_stderr
    assert result_stderr.count("\n") == 1 and "Traceback" not in result_stderr
    assert "control character" in result_stderr


@pytest.mark.parametrize(
    ("what", "control"),
    [("workspace", "\n"), ("workspace", "\r"), ("config", "\x1b"), ("agent-command", "\n"),
     ("public-url", "\x85"), ("hostname", "\t"), ("auth-key-file", "\n"), ("user", "\n")],
)  # fmt: skip
def test_install_refuses_a_control_character_in_any_value_it_would_write(
    tmp_path: Path, what: str, control: str
) -> None:
    """Each value given on the command line or by the environment (the user comes from
    $SUDO_USER), in a --user unit whose workspace may be under /tmp."""
    hostile = f"x{control}{INJECTED}"
    workspace = tmp_path / "ws"
    workspace.mkdir()
    flags: list[str] = ["--user"]
    env = dict(os.environ)
    name = f"the serve option --{what}"
    if what == "workspace":
        workspace = tmp_path / hostile
        workspace.mkdir()
        name = "the workspace"
    elif what == "config":
        config = tmp_path / hostile
        config.write_text("")
        flags += ["--config", str(config)]
        name = "the config file"
    elif what == "auth-key-file":
        flags += ["--tsnet", "--auth-key-file", str(tmp_path / hostile)]
        name = "the auth key file"
    elif what == "user":
        env["SUDO_USER"] = hostile
        name = "the user"
    else:
        flags += [f"--{what}", hostile]
    dest = tmp_path / "units"
    result = install(dest, *flags, workspace=workspace, env=env)
    assert result.returncode == 2 and result.stdout == ""
    refused(result.stderr, name)
    assert repr(hostile)[1:-1] in result.stderr  # the value, escaped onto its line
    assert not dest.exists()


def test_a_nul_or_a_control_in_a_value_no_command_line_can_carry_is_refused_too(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """NUL cannot pass through argv; the home and the command come from the box."""
    code = install_in_process(
        True, tmp_path, None, tmp_path, options={"--agent-command": "echo\0hi"}
    )
    assert code == 2 and not (tmp_path / "tailagent.service").exists()
    refused(capsys.readouterr().err, "the serve option --agent-command")
    unit = Unit(True, ("/opt/py thon/bin/tailagent",), str(tmp_path), None, "dev", "/home/dev")
    assert unit.refusal() == ""
    for name, changed in [
        ("the command that runs tailagent", {"command": ("/opt/x\x00/tailagent",)}),
        ("the home", {"home": "/home/dev\n" + INJECTED}),
        ("the workspace", {"workspace": "/srv/ws\x7f"}),
        ("the search path", {"search_path": "/bin\x9b"}),
    ]:
        fields = {**unit.__dict__, **changed}
        reason = Unit(**fields).refusal()
        assert reason.startswith(f"{name} ") and "control character" in reason, reason
        assert "\n" not in reason


def test_a_workspace_whose_end_systemd_would_not_read_back_is_refused(tmp_path: Path) -> None:
    """WorkingDirectory= is the rest of its line: systemd strips white space there, and a
    backslash at the end continues the line into the next directive."""
    for odd in ("ws\\", "ws "):
        workspace = tmp_path / odd
        workspace.mkdir()
        result = install(tmp_path / "units", "--user", workspace=workspace)
        assert result.returncode == 2, result.stderr
        assert result.stderr.startswith("tailagent: the workspace ")
        assert "would not read back as it is" in result.stderr
        assert not (tmp_path / "units").exists()


@needs_systemd
def test_a_hostile_but_legal_workspace_is_read_back_by_systemd_as_it_is(
    tmp_path: Path, outside: Path
) -> None:
    """Spaces, quotes, a backslash, `;`, `%` (a specifier to systemd) and `$` (a
    variable in ExecStart=): each directive holds the path, escaped its own way, and
    systemd verifies the unit without a word of warning."""
    workspace = outside / "a b; 100%z $HOME \"q\" 'p' \\n"
    workspace.mkdir()
    config = workspace / "my %i.toml"
    config.write_text('log_level = "info"\n')
    result = install(tmp_path, "--config", str(config), workspace=workspace)
    assert result.returncode == 0, result.stderr
    unit = tmp_path / "tailagent.service"
    checked = verify(unit, False, tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr
    assert str(unit) not in checked.stdout + checked.stderr  # no line of it warned about
    words = exec_start(unit)
    assert words[words.index("--cwd") + 1] == str(workspace)
    assert words[words.index("--config") + 1] == str(config)
    lines = unit.read_text().replace("\\\n", " ").splitlines()
    working = next(ln for ln in lines if ln.startswith("WorkingDirectory="))
    assert working.removeprefix("WorkingDirectory=").replace("%%", "%") == str(workspace)
    writable = next(ln for ln in lines if ln.startswith("ReadWritePaths="))
    paths = [w.replace("%%", "%") for w in shlex.split(writable.removeprefix("ReadWritePaths="))]
    # Beside the workspace: what every agent writes in the home (its login, its state),
    # and npm's and the caches' folders, each a "-" path that may be missing.
    homes = {entry for kind in KINDS.values() for entry in kind.home.writable}
    assert paths[0] == str(workspace) and len(paths) == 1 + len(homes) + 2, paths
    assert all(p.startswith("-/") for p in paths[1:]), paths
    assert {
        e for e in (*homes, ".npm", ".cache") if not any(p.endswith(f"/{e}") for p in paths)
    } == set()


def test_the_python_of_a_path_with_a_space_is_one_word_of_the_command(tmp_path: Path) -> None:
    """The interpreter's path is a word of ExecStart= however it is spelled."""
    unit = Unit(True, (sys.executable + " x", "-P", "-m", "tailagent"), "/w", None, "u", "/h")
    lines = unit.render().replace("\\\n", " ").splitlines()
    command = next(ln for ln in lines if ln.startswith("ExecStart="))
    words = shlex.split(command.removeprefix("ExecStart="))
    assert words[:5] == [sys.executable + " x", "-P", "-m", "tailagent", "serve"]
