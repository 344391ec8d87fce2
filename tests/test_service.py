"""The systemd units: written for this machine, checked by systemd itself."""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tailagent.service import SHIPPED
from tests.conftest import start_server
from tests.warm_start import cli_run

ROOT = Path(__file__).resolve().parent.parent
SYSTEMD = ROOT / "systemd"
needs_systemd = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None,
    reason="systemd-analyze is not installed (.ci/run installs Debian's systemd)",
)


def unit_visible(name: str) -> Path:
    """A new directory the system unit sees as this box does: not under /tmp, /var/tmp
    or /dev, which it has of its own. The checkout's cache, unless the checkout itself
    is under one of them (a clone in /tmp), then the home's."""
    hidden = (Path("/tmp"), Path("/var/tmp"), Path("/dev"))
    for base in (ROOT / ".cache", Path.home() / ".cache" / "tailagent-tests"):
        if not any(base.resolve().is_relative_to(h) for h in hidden):
            made = base / f"{name}-{uuid.uuid4().hex[:8]}"
            made.mkdir(parents=True)
            return made
    raise RuntimeError("neither the checkout nor the home is outside /tmp")


@pytest.fixture
def outside() -> Iterator[Path]:
    """A workspace holding a config file, outside /tmp: the system unit has a /tmp of
    its own (PrivateTmp=yes), and install refuses what the unit would not see."""
    workspace = unit_visible("service")
    (workspace / "tailagent.toml").write_text('log_level = "info"\n')
    yield workspace
    shutil.rmtree(workspace)


def install(
    tmp: Path, *flags: str, workspace: Path | None = None, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`service install --dest TMP` of a unit working in `workspace` (default: TMP)."""
    workspace = workspace or tmp
    return cli_run(
        [sys.executable, "-m", "tailagent", "service", "install", *flags, "--dest", str(tmp),
         "--workspace", str(workspace)], capture_output=True, text=True, timeout=30, env=env,
    )  # fmt: skip


def verify(path: Path, user_mode: bool, tmp: Path) -> subprocess.CompletedProcess[str]:
    runtime = tmp / "runtime"
    runtime.mkdir(mode=0o700, exist_ok=True)
    args = ["systemd-analyze", *(["--user"] if user_mode else []), "verify", str(path)]
    env = {**os.environ, "XDG_RUNTIME_DIR": str(runtime)}
    return subprocess.run(args, capture_output=True, text=True, timeout=60, env=env)


@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_the_shipped_units_are_the_template_with_systemds_specifiers(name: str) -> None:
    assert (SYSTEMD / name).read_text() == SHIPPED[name].render()
    assert "/home/dev" not in (SYSTEMD / name).read_text()


@needs_systemd
@pytest.mark.parametrize("name", sorted(SHIPPED))
def test_systemd_accepts_the_shipped_units_as_they_are(name: str, tmp_path: Path) -> None:
    unit = SHIPPED[name]
    # A template is verified as one of its instances.
    path = tmp_path / name.replace("@.", "@nobody.")
    path.write_text((SYSTEMD / name).read_text())
    checked = verify(path, unit.user_mode, tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@needs_systemd
@pytest.mark.parametrize("user_mode", [False, True], ids=["system", "user"])
def test_install_writes_a_unit_for_this_machine_that_systemd_accepts(
    tmp_path: Path, outside: Path, user_mode: bool
) -> None:
    config = outside / "tailagent.toml"
    mode = ["--user"] if user_mode else []
    result = install(tmp_path, *mode, "--config", str(config), workspace=outside)
    assert result.returncode == 0, result.stderr
    unit = (tmp_path / "tailagent.service").read_text()
    script = Path(sys.executable).with_name("tailagent")  # never `python -m` in the workspace
    assert f"ExecStart={script} serve --cwd {outside}" in unit
    assert f"--config {config}" in unit
    assert "Type=notify" in unit and "WatchdogSec=" in unit and "Restart=on-failure" in unit
    assert ("User=" in unit) != user_mode
    assert "nothing is started" in result.stdout
    assert (
        "systemctl" in result.stdout and f"link {tmp_path / 'tailagent.service'}" in result.stdout
    )
    assert ("loginctl enable-linger" in result.stdout) == user_mode
    checked = verify(tmp_path / "tailagent.service", user_mode, tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


def exec_start(unit: Path) -> list[str]:
    """The unit's ExecStart= as systemd splits it: quotes, \\-escapes, %% and $$."""
    text = unit.read_text().replace("\\\n", " ")
    line = next(ln for ln in text.splitlines() if ln.startswith("ExecStart="))
    words = shlex.split(line.removeprefix("ExecStart="))
    return [w.replace("%%", "%").replace("$$", "$") for w in words]


@needs_systemd
def test_the_serve_options_given_to_install_are_the_units_serve(
    tmp_path: Path, outside: Path
) -> None:
    """--agent, --isolation and a quoted --agent-command reach serve as given: the
    unit's own command line, run, serves them."""
    agent = f"{sys.executable} -c 'print(\"100% $HOME\")'"
    result = install(
        tmp_path, "--user", "--agent", "echo", "--isolation", "shared", "--log-format",
        "json", "--agent-command", agent, workspace=outside,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert "tailagent doctor --agent echo" in result.stdout
    unit = tmp_path / "tailagent.service"
    assert verify(unit, True, tmp_path).returncode == 0
    words = exec_start(unit)
    serve = words.index("serve")
    assert words[serve + 1 :] == [
        "--cwd", str(outside), "--agent", "echo", "--agent-command", agent,
        "--isolation", "shared", "--log-format", "json",
        "--listen", "unix:%t/tailagent/tailagent.sock",
    ]  # fmt: skip
    # The unit's command, on a loopback port here rather than systemd's socket; the
    # agent command is left out, as it would take the place of echo.
    options = words[serve + 1 : words.index("--agent-command")] + words[-6:-2]
    server = start_server(tmp_path, *options, command=words[:serve])
    try:
        assert '"level"' in server.log_path.read_text()  # --log-format json
        called = cli_run(
            [sys.executable, "-m", "tailagent", "call", "--url", server.url,
             "--state-dir", str(server.state_dir), "hello"],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert called.returncode == 0, called.stderr
        assert "hello" in called.stdout
        card = httpx.get(f"{server.url}/.well-known/agent-card.json", timeout=10).json()
        assert "echo" in str(card).lower()
    finally:
        server.process.terminate()
        server.process.wait(timeout=30)


@needs_systemd
def test_systemd_analyze_would_catch_a_broken_unit(tmp_path: Path) -> None:
    broken = tmp_path / "broken.service"
    broken.write_text("[Service]\nExecStart=/nonexistent/tailagent\n")
    assert verify(broken, False, tmp_path).returncode != 0


# A systemctl that records what it is asked: no test touches the real systemd. `show`
# names the unit's file ($FAKE_UNIT_FILE), or the manager's version; `disable` fails when
# $FAKE_DISABLE_FAILS is set, or as systemctl does once the file is gone; with
# $FAKE_NO_SYSTEMD set, everything fails as on a box not booted with systemd.
FAKE_SYSTEMCTL = """#!/bin/sh
if [ -n "$FAKE_NO_SYSTEMD" ]; then
  echo "System has not been booted with systemd as init system (PID 1). Can't operate." >&2
  echo "Failed to connect to bus: Host is down" >&2; exit 1
fi
echo "$*" >> "$FAKE_SYSTEMCTL_LOG"
case "$*" in
  *Version*) echo 252 ;;
  *show*) echo "$FAKE_UNIT_FILE" ;;
  *disable*) if [ -n "$FAKE_DISABLE_FAILS" ]; then echo "$FAKE_DISABLE_FAILS" >&2; exit 1; fi
    if [ ! -f "$FAKE_UNIT_FILE" ]; then echo "Unit file does not exist." >&2; exit 1; fi ;;
esac
"""


def fake_systemd(tmp: Path, unit_file: str = "", **more: str) -> dict[str, str]:
    """The environment that puts the fake systemctl first on PATH."""
    bin_dir = tmp / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "systemctl").write_text(FAKE_SYSTEMCTL)
    (bin_dir / "systemctl").chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}",
            "FAKE_SYSTEMCTL_LOG": str(tmp / "systemctl.log"), "FAKE_UNIT_FILE": unit_file,
            **more}  # fmt: skip


def uninstall(
    tmp: Path, *flags: str, unit_file: str = "", fails: str = "", **env: str
) -> tuple[Any, list[str]]:
    """`service uninstall` with the fake systemctl first on PATH: (its result, the
    systemctl commands it ran)."""
    result = cli_run(
        [sys.executable, "-m", "tailagent", "service", "uninstall", *flags],
        capture_output=True, text=True, timeout=30,
        env=fake_systemd(tmp, unit_file, FAKE_DISABLE_FAILS=fails, **env),
    )  # fmt: skip
    log = tmp / "systemctl.log"
    return result, log.read_text().splitlines() if log.exists() else []


def test_uninstall_stops_and_disables_the_unit_then_removes_it(
    tmp_path: Path, outside: Path
) -> None:
    assert install(tmp_path, workspace=outside).returncode == 0
    unit = tmp_path / "tailagent.service"
    result, ran = uninstall(tmp_path, "--dest", str(tmp_path), unit_file=str(unit))
    assert result.returncode == 0, result.stderr
    assert ran == ["show --property=FragmentPath --value tailagent.service",
                   "disable --now tailagent.service"]  # fmt: skip
    assert result.stdout.splitlines() == [
        f"stopped, disabled and removed {unit}; next:",
        "  sudo systemctl daemon-reload",
    ]
    assert not unit.exists()


def test_install_checks_the_workspace_and_warns_about_root(tmp_path: Path, outside: Path) -> None:
    missing = cli_run(
        [sys.executable, "-m", "tailagent", "service", "install", "--dest", str(tmp_path),
         "--workspace", str(tmp_path / "nope")], capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert missing.returncode == 2 and "is not a directory" in missing.stderr
    assert not (tmp_path / "tailagent.service").exists()
    env = {k: v for k, v in os.environ.items() if k != "SUDO_USER"}
    as_root = install(tmp_path, workspace=outside, env=env)
    assert as_root.returncode == 0
    assert ("runs the agent as root" in as_root.stderr) == (os.getuid() == 0)


def test_the_installed_unit_runs_in_a_workspace_holding_a_tailagent_folder(tmp_path: Path) -> None:
    """A checkout of this project as the workspace: its `tailagent/` must not shadow
    the installed package (the unit's command is what systemd would run)."""
    (tmp_path / "tailagent").mkdir()
    (tmp_path / "tailagent" / "__init__.py").write_text("raise ImportError('the wrong one')\n")
    assert install(tmp_path, "--user").returncode == 0
    line = next(
        ln for ln in (tmp_path / "tailagent.service").read_text().splitlines()
        if ln.startswith("ExecStart=")
    )  # fmt: skip
    command = line.removeprefix("ExecStart=").split(" serve ")[0].split()
    result = subprocess.run([*command, "--version"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=30)  # fmt: skip
    assert result.returncode == 0 and result.stdout.startswith("tailagent "), result.stderr


def test_install_without_systemd_says_so_before_anything(tmp_path: Path) -> None:
    """Without a systemd to run it, every `systemctl` printed next would fail "Failed
    to connect to bus": install says so and writes nothing, unless --dest asks for the
    file (for another box), which it writes with a note."""
    xdg = tmp_path / "config"
    env = fake_systemd(tmp_path, FAKE_NO_SYSTEMD="1", XDG_CONFIG_HOME=str(xdg))
    refused = cli_run(
        [sys.executable, "-m", "tailagent", "service", "install", "--user", "--workspace",
         str(tmp_path)], capture_output=True, text=True, timeout=30, env=env,
    )  # fmt: skip
    assert refused.returncode == 1 and refused.stdout == ""
    assert refused.stderr.startswith("tailagent: no systemd user manager answers for ")
    assert "Failed to connect to bus: Host is down" in refused.stderr
    assert "enable-linger" in refused.stderr and "--dest" in refused.stderr
    assert not xdg.exists()
    system = cli_run(
        [sys.executable, "-m", "tailagent", "service", "install", "--workspace", str(tmp_path)],
        capture_output=True, text=True, timeout=30, env=env,
    )  # fmt: skip
    assert system.returncode == 1
    assert system.stderr.startswith("tailagent: systemd is not running on this box (PID 1 is ")
    assert "run `tailagent serve` under the supervisor this box has" in system.stderr
    written = install(tmp_path / "units", "--user", workspace=tmp_path, env=env)
    assert written.returncode == 0, written.stderr
    assert written.stderr.startswith("note: no systemd user manager answers for ")
    assert (tmp_path / "units" / "tailagent.service").is_file()
    no_systemctl = {**os.environ, "PATH": str(tmp_path / "empty")}
    missing = install(tmp_path / "none", "--user", workspace=tmp_path, env=no_systemctl)
    assert missing.stderr.startswith("note: systemctl is not installed: ")


def test_install_refuses_what_the_unit_would_not_see_or_serve_would_refuse(
    tmp_path: Path, outside: Path
) -> None:
    under_tmp = install(tmp_path, workspace=tmp_path)
    assert under_tmp.returncode == 2 and under_tmp.stdout == ""
    assert under_tmp.stderr == (
        f"tailagent: the workspace {tmp_path} is under /tmp, and the system unit has a /tmp "
        "of its own (PrivateTmp=yes), so it would not see it: use one elsewhere (such as in "
        "your home), or a --user unit\n"
    )
    config = tmp_path / "tailagent.toml"
    config.write_text("")
    config_under_tmp = install(tmp_path, "--config", str(config), workspace=outside)
    assert config_under_tmp.returncode == 2
    assert f"the config file {config} is under /tmp" in config_under_tmp.stderr
    assert not (tmp_path / "tailagent.service").exists()
    # A user unit has no /tmp of its own.
    assert install(tmp_path, "--user", workspace=tmp_path).returncode == 0
    both = install(tmp_path / "x", "--user", "--tsnet", "--tailnet", workspace=outside)
    assert both.returncode == 2 and "are two ways onto the tailnet: pick one" in both.stderr
    missing = install(
        tmp_path / "x", "--user", "--config", str(outside / "no.toml"), workspace=outside
    )
    assert missing.returncode == 2 and "cannot read: No such file" in missing.stderr
    bad = install(tmp_path / "x", "--user", "--tailnet-port", "0", workspace=outside)
    assert bad.returncode == 2 and "tailnet_port" in bad.stderr
    unnamed = install(tmp_path / "x", "--user", "--service", "agents", workspace=outside)
    assert unnamed.returncode == 2 and "tailnet_service: must be svc:" in unnamed.stderr
    assert not (tmp_path / "x").exists()
    # A Tailscale Service the unit's server serves under goes into its command line.
    served = install(tmp_path / "y", "--user", "--service", "svc:agents", workspace=outside)
    assert served.returncode == 0, served.stderr
    assert " --service svc:agents" in (tmp_path / "y" / "tailagent.service").read_text()


def test_uninstall_leaves_no_enable_link_behind(tmp_path: Path) -> None:
    """`systemctl enable` links the unit into default.target.wants: with systemd, disable
    removes that link before the file goes; without it, uninstall removes it itself, and
    leaves another unit's link alone."""
    xdg = tmp_path / "config"
    units = xdg / "systemd" / "user"
    unit = units / "tailagent.service"
    env = fake_systemd(tmp_path, str(unit), XDG_CONFIG_HOME=str(xdg))
    for systemd_runs in (True, False):
        installed = cli_run(
            [sys.executable, "-m", "tailagent", "service", "install", "--user",
             "--workspace", str(tmp_path)], capture_output=True, text=True, timeout=30, env=env,
        )  # fmt: skip
        assert installed.returncode == 0, installed.stderr
        assert "systemctl --user link" not in installed.stdout  # already on systemd's path
        wants = units / "default.target.wants"
        wants.mkdir(exist_ok=True)
        (wants / unit.name).symlink_to(unit)
        other = wants / "other.service"
        other.unlink(missing_ok=True)
        other.symlink_to(units / "other.service")
        more = {} if systemd_runs else {"FAKE_NO_SYSTEMD": "1"}
        result, ran = uninstall(tmp_path, "--user", unit_file=str(unit),
                                XDG_CONFIG_HOME=str(xdg), **more)  # fmt: skip
        assert result.returncode == 0, result.stderr
        assert not unit.exists() and not (wants / unit.name).is_symlink()
        assert other.is_symlink()
        if systemd_runs:  # the fake disable leaves the link, as a manual one would be
            assert ran[-1] == "--user disable --now tailagent.service"
            assert result.stdout.startswith(f"stopped, disabled and removed {unit}")
        else:
            assert result.stdout == (
                f"removed {unit} (no systemd answers here: nothing ran from it), and the "
                f"links to it: {wants / unit.name}\n"
            )
