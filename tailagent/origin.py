"""Where this tailagent runs from: a Python package, or the one-file binary that
`tailagent/binary/build.py` makes, and the versions either one carries.

The binary is Python, tailagent and its dependencies unpacked by PyInstaller's
bootloader at each start, so `sys.executable` is the binary itself: what a
systemd unit runs, and what a bug report should name.
"""

from __future__ import annotations

import platform
import shutil
import sys
from importlib import metadata
from pathlib import Path

from tailagent import __version__

# The distributions whose versions decide how tailagent behaves on the wire.
CARRIED = ("a2a-sdk", "claude-agent-sdk", "agent-client-protocol", "hypercorn", "httpx")


def frozen() -> bool:
    """True in the one-file binary."""
    return bool(getattr(sys, "frozen", False))


def binary_path() -> Path:
    return Path(sys.executable).resolve()


def command() -> str:
    """What runs this tailagent from a systemd unit: the binary itself, the console
    script next to this interpreter, else the interpreter in isolated mode (-I: the
    working directory is not on sys.path, so a workspace holding a `tailagent/`
    folder, such as a checkout of this project, cannot shadow it)."""
    if frozen():
        return str(binary_path())
    script = Path(sys.executable).with_name("tailagent")
    return str(script) if script.is_file() else f"{sys.executable} -I -m tailagent"


def invoked_as() -> list[str]:
    """The command as the person typed it, for the follow-up commands tailagent prints:
    `tailagent` when that name on PATH is this very program, else its path as run
    (`./dist/tailagent`), or `python -m tailagent` for the module."""
    run = sys.argv[0] if sys.argv and sys.argv[0] else "tailagent"
    if run.endswith("__main__.py"):
        return ["python", "-m", "tailagent"]
    on_path = shutil.which(Path(run).name)
    if on_path is not None and Path(on_path).resolve() == Path(run).resolve():
        return [Path(run).name]
    return [run]


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "missing"


def versions() -> dict[str, str]:
    """Python and the libraries that matter, with the embedded node's Tailscale
    (read from the library without starting a node) when it is there."""
    found = {"python": platform.python_version()}
    found.update({name: _version(name) for name in CARRIED})
    from tailagent.tsnet.library import LibraryMissing, NodeLibrary

    try:
        found["tailscale.com (tsnet)"] = NodeLibrary.load().version()
    except (LibraryMissing, OSError):
        found["tailscale.com (tsnet)"] = "not built in"
    return found


def describe() -> str:
    """One line: how this tailagent is installed."""
    if frozen():
        return f"binary {binary_path()} (Python {platform.python_version()}, PyInstaller)"
    package = Path(__file__).resolve().parent
    return f"package {package} (Python {platform.python_version()} at {sys.executable})"


def version_text() -> str:
    """`tailagent --version`: this version, how it runs, and what it carries."""
    lines = [f"tailagent {__version__}", describe()]
    lines += [f"  {name} {version}" for name, version in versions().items()]
    return "\n".join(lines)
