"""Builds the one-file `tailagent` executable for Linux x86-64 with PyInstaller.

    python tailagent/binary/build.py [--out dist]

The file holds Python, tailagent, its dependencies and the embedded tailnet node;
it needs no Python, virtualenv or tailscaled on the box it is copied to. It does
not hold the Claude Code CLI that claude-agent-sdk bundles (384 MB, more than the
rest together): the binary finds `claude` on PATH or `claude.cli_path`.

Inputs are pinned: PyInstaller's version here, and the dependencies in pins.txt,
which this checks against what is installed (it builds from the environment it
runs in; nothing is fetched). Builds the embedded node first if it is missing.
"""

from __future__ import annotations

import argparse
import platform
import subprocess
import sys
import time
from importlib import metadata
from pathlib import Path

from tailagent.process import origin
from tailagent.tailnet.tsnet import build as node_build

HERE = Path(__file__).resolve().parent
ROOT = HERE.parent.parent
PYINSTALLER_VERSION = "6.22.3"
PINS = HERE / "pins.txt"
ENTRY = HERE / "entry.py"
NODE_LIBRARY = node_build.SOURCE / node_build.LIBRARY_NAME

# Modules imported by name at run time (backends, SQLAlchemy dialects, drivers),
# which PyInstaller's import graph cannot see.
COLLECT_SUBMODULES = (
    "a2a",
    "acp",
    "claude_agent_sdk",
    "sqlalchemy.dialects.sqlite",
    "sqlalchemy.dialects.postgresql",
)
HIDDEN_IMPORTS = ("aiosqlite", "asyncpg", "socksio")
# Read through importlib.metadata at run time (`--version`, the mends' version checks,
# opentelemetry's entry points).
COPY_METADATA = ("tailagent", *origin.CARRIED, "starlette", "opentelemetry-api")
# Test tools the import graph may reach, and drivers SQLAlchemy's hook names for
# dialects tailagent never uses (each would be a "not found" warning).
EXCLUDE = ("pytest", "mypy", "PyInstaller", "tkinter", "pysqlite2", "MySQLdb")


class BuildFailed(Exception):
    pass


def check_platform() -> None:
    if sys.platform != "linux" or platform.machine() not in ("x86_64", "AMD64"):
        raise BuildFailed(
            f"builds for Linux x86-64 only (this is {sys.platform} {platform.machine()})"
        )


def check_pins() -> None:
    """Every pinned dependency installed at its pinned version."""
    wrong = []
    for line in PINS.read_text().splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        name, _, pinned = line.partition("==")
        try:
            installed = metadata.version(name)
        except metadata.PackageNotFoundError:
            installed = "not installed"
        if installed != pinned:
            wrong.append(f"{name} {installed} (pinned {pinned})")
    if wrong:
        raise BuildFailed(
            "installed dependencies differ from tailagent/binary/pins.txt: "
            + ", ".join(wrong)
            + "; run: pip install -e '.[dev]' -c tailagent/binary/pins.txt"
        )
    try:
        found = metadata.version("pyinstaller")
    except metadata.PackageNotFoundError:
        found = "not installed"
    if found != PYINSTALLER_VERSION:
        raise BuildFailed(
            f"needs PyInstaller {PYINSTALLER_VERSION} (found {found}): "
            f"pip install pyinstaller=={PYINSTALLER_VERSION}, or pip install -e '.[dev]'"
        )


def ensure_node_library() -> None:
    if NODE_LIBRARY.is_file():
        return
    try:
        node_build.build(NODE_LIBRARY.parent)
    except node_build.BuildFailed as exc:
        raise BuildFailed(f"the embedded tailnet node could not be built: {exc}") from None


def tailagent_modules() -> list[str]:
    """Every module of tailagent but this build tooling (backends load by name)."""
    package = ROOT / "tailagent"
    names = []
    for path in sorted(package.rglob("*.py")):
        parts = path.relative_to(ROOT).with_suffix("").parts
        if parts[1:2] != ("binary",):
            names.append(".".join(parts[:-1] if parts[-1] == "__init__" else parts))
    return names


def pyinstaller_args(out: Path, work: Path) -> list[str]:
    args = [
        str(ENTRY),
        "--onefile",
        "--name=tailagent",
        f"--distpath={out}",
        f"--workpath={work}",
        f"--specpath={work}",
        "--noconfirm",
        "--log-level=WARN",
        f"--add-binary={NODE_LIBRARY}:tailagent/tailnet/tsnet",
        # The approval desk's templates, script and style (tailagent/web).
        f"--add-data={ROOT / 'tailagent' / 'web' / 'templates'}:tailagent/web/templates",
        f"--add-data={ROOT / 'tailagent' / 'web' / 'static'}:tailagent/web/static",
        # Run as scripts by the system's python3 inside a fence: the bridge to the fence's
        # proxy, and ssh's ProxyCommand through it.
        f"--add-data={ROOT / 'tailagent' / 'sandbox' / 'netbridge.py'}:tailagent/sandbox",
        f"--add-data={ROOT / 'tailagent' / 'sandbox' / 'sshproxy.py'}:tailagent/sandbox",
    ]
    args += [f"--collect-submodules={name}" for name in COLLECT_SUBMODULES]
    args += [f"--hidden-import={name}" for name in tailagent_modules()]
    args += [f"--hidden-import={name}" for name in HIDDEN_IMPORTS]
    args += [f"--copy-metadata={name}" for name in COPY_METADATA]
    args += [f"--exclude-module={name}" for name in EXCLUDE]
    return args


def build(out: Path) -> Path:
    check_platform()
    check_pins()
    ensure_node_library()
    work = ROOT / "build" / "pyinstaller"
    command = [sys.executable, "-m", "PyInstaller", *pyinstaller_args(out, work)]
    done = subprocess.run(command, cwd=ROOT)
    binary = out / "tailagent"
    if done.returncode != 0 or not binary.is_file():
        raise BuildFailed(f"PyInstaller failed (exit {done.returncode}); its output is above")
    return binary


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--out", type=Path, default=ROOT / "dist", help="where the file goes")
    args = parser.parse_args()
    started = time.monotonic()
    try:
        binary = build(args.out.resolve())
    except BuildFailed as exc:
        print(f"tailagent binary: {exc}", file=sys.stderr)
        return 1
    size = binary.stat().st_size / 1024 / 1024
    print(f"built {binary} ({size:.0f} MiB) in {time.monotonic() - started:.0f} s")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
