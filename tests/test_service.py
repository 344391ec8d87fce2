"""The systemd units: written for this machine, checked by systemd itself."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tailagent.service import Unit

SYSTEMD = Path(__file__).resolve().parent.parent / "systemd"
EXAMPLE = {
    "python": "/home/dev/.local/share/pipx/venvs/tailagent/bin/python",
    "workspace": Path("/home/dev/src/project"),
    "config": Path("/home/dev/.config/tailagent/tailagent.toml"),
    "user": "dev",
    "home": Path("/home/dev"),
}
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


@pytest.mark.parametrize("user_mode", [False, True], ids=["system", "user"])
def test_the_shipped_units_are_the_template_rendered_for_an_example_box(user_mode: bool) -> None:
    name = "tailagent-user.service" if user_mode else "tailagent.service"
    shipped = (SYSTEMD / name).read_text()
    assert shipped == Unit(user_mode, **EXAMPLE).render()  # type: ignore[arg-type]


@needs_systemd
@pytest.mark.parametrize("user_mode", [False, True], ids=["system", "user"])
def test_install_writes_a_unit_for_this_machine_that_systemd_accepts(
    tmp_path: Path, user_mode: bool
) -> None:
    result = install(tmp_path, *(["--user"] if user_mode else []))
    assert result.returncode == 0, result.stderr
    unit = (tmp_path / "tailagent.service").read_text()
    assert f"ExecStart={sys.executable} -m tailagent serve --cwd {tmp_path}" in unit
    assert f"--config {tmp_path / 'tailagent.toml'}" in unit
    assert "Type=notify" in unit and "WatchdogSec=" in unit and "Restart=on-failure" in unit
    assert ("User=" in unit) != user_mode
    assert "nothing is started" in result.stdout
    assert ("loginctl enable-linger" in result.stdout) == user_mode
    checked = verify(tmp_path / "tailagent.service", user_mode, tmp_path)
    assert checked.returncode == 0, checked.stdout + checked.stderr


@needs_systemd
def test_systemd_analyze_would_catch_a_broken_unit(tmp_path: Path) -> None:
    broken = tmp_path / "broken.service"
    broken.write_text("[Service]\nExecStart=/nonexistent/tailagent\n")
    assert verify(broken, False, tmp_path).returncode != 0


def test_uninstall_removes_the_unit(tmp_path: Path) -> None:
    install(tmp_path)
    result = subprocess.run(
        [sys.executable, "-m", "tailagent", "service", "uninstall", "--dest", str(tmp_path)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 0 and "disable --now tailagent" in result.stdout
    assert not (tmp_path / "tailagent.service").exists()
