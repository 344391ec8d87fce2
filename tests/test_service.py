"""The systemd units: written for this machine, checked by systemd itself."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from tailagent.service import SHIPPED

SYSTEMD = Path(__file__).resolve().parent.parent / "systemd"
needs_systemd = pytest.mark.skipif(
    shutil.which("systemd-analyze") is None,
    reason="systemd-analyze is not installed (.ci/run installs Debian's systemd)",
)


def install(tmp: Path, *flags: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "tailagent", "service", "install", *flags, "--dest", str(tmp),
         "--workspace", str(tmp), "--config", str(tmp / "tailagent.toml")],
        capture_output=True, text=True, timeout=30,
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
    tmp_path: Path, user_mode: bool
) -> None:
    result = install(tmp_path, *(["--user"] if user_mode else []))
    assert result.returncode == 0, result.stderr
    unit = (tmp_path / "tailagent.service").read_text()
    script = Path(sys.executable).with_name("tailagent")  # never `python -m` in the workspace
    assert f"ExecStart={script} serve --cwd {tmp_path}" in unit
    assert f"--config {tmp_path / 'tailagent.toml'}" in unit
    assert "Type=notify" in unit and "WatchdogSec=" in unit and "Restart=on-failure" in unit
    assert ("User=" in unit) != user_mode
    assert "nothing is started" in result.stdout
    assert (
        "systemctl" in result.stdout and f"link {tmp_path / 'tailagent.service'}" in result.stdout
    )
    assert ("loginctl enable-linger" in result.stdout) == user_mode
    checked = verify(tmp_path / "tailagent.service", user_mode, tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@needs_systemd
def test_systemd_analyze_would_catch_a_broken_unit(tmp_path: Path) -> None:
    broken = tmp_path / "broken.service"
    broken.write_text("[Service]\nExecStart=/nonexistent/tailagent\n")
    assert verify(broken, False, tmp_path).returncode != 0


# A systemctl that records what it is asked: no test touches the real systemd. `show`
# names the unit's file ($FAKE_UNIT_FILE); `disable` fails when $FAKE_DISABLE_FAILS is set.
FAKE_SYSTEMCTL = """#!/bin/sh
echo "$*" >> "$FAKE_SYSTEMCTL_LOG"
case "$*" in
  *show*) echo "$FAKE_UNIT_FILE" ;;
  *disable*) if [ -n "$FAKE_DISABLE_FAILS" ]; then echo "$FAKE_DISABLE_FAILS" >&2; exit 1; fi ;;
esac
"""


def uninstall(
    tmp: Path, *flags: str, unit_file: str = "", fails: str = ""
) -> tuple[Any, list[str]]:
    """`service uninstall` with the fake systemctl first on PATH: (its result, the
    systemctl commands it ran)."""
    bin_dir = tmp / "fake-bin"
    bin_dir.mkdir(exist_ok=True)
    (bin_dir / "systemctl").write_text(FAKE_SYSTEMCTL)
    (bin_dir / "systemctl").chmod(0o755)
    log = tmp / "systemctl.log"
    env = {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}", "FAKE_SYSTEMCTL_LOG": str(log),
           "FAKE_UNIT_FILE": unit_file, "FAKE_DISABLE_FAILS": fails}  # fmt: skip
    result = subprocess.run(
        [sys.executable, "-m", "tailagent", "service", "uninstall", *flags],
        capture_output=True, text=True, timeout=30, env=env,
    )  # fmt: skip
    return result, log.read_text().splitlines() if log.exists() else []


def test_uninstall_stops_and_disables_the_unit_then_removes_it(tmp_path: Path) -> None:
    install(tmp_path)
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


def test_install_checks_the_workspace_and_warns_about_root(tmp_path: Path) -> None:
    missing = subprocess.run(
        [sys.executable, "-m", "tailagent", "service", "install", "--dest", str(tmp_path),
         "--workspace", str(tmp_path / "nope")], capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert missing.returncode == 2 and "is not a directory" in missing.stderr
    assert not (tmp_path / "tailagent.service").exists()
    env = {k: v for k, v in os.environ.items() if k != "SUDO_USER"}
    as_root = subprocess.run(
        [sys.executable, "-m", "tailagent", "service", "install", "--dest", str(tmp_path),
         "--workspace", str(tmp_path)], capture_output=True, text=True, timeout=30, env=env,
    )  # fmt: skip
    assert as_root.returncode == 0
    assert ("runs the agent as root" in as_root.stderr) == (os.getuid() == 0)


def test_the_installed_unit_runs_in_a_workspace_holding_a_tailagent_folder(tmp_path: Path) -> None:
    """A checkout of this project as the workspace: its `tailagent/` must not shadow
    the installed package (the unit's command is what systemd would run)."""
    (tmp_path / "tailagent").mkdir()
    (tmp_path / "tailagent" / "__init__.py").write_text("raise ImportError('the wrong one')\n")
    assert install(tmp_path).returncode == 0
    line = next(
        ln for ln in (tmp_path / "tailagent.service").read_text().splitlines()
        if ln.startswith("ExecStart=")
    )  # fmt: skip
    command = line.removeprefix("ExecStart=").split(" serve ")[0].split()
    result = subprocess.run([*command, "--version"], cwd=tmp_path, capture_output=True,
                            text=True, timeout=30)  # fmt: skip
    assert result.returncode == 0 and result.stdout.startswith("tailagent "), result.stderr
