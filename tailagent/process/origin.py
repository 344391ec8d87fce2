"""Where this tailagent runs from: a Python package, or the one-file binary that
`tailagent/binary/build.py` makes, and the Python libraries either one carries
(`tailagent --version` adds the embedded node's: tailagent/about.py).

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

# The distributions whose versions decide how tailagent behaves on the wire.
CARRIED = ("a2a-sdk", "claude-agent-sdk", "agent-client-protocol", "hypercorn", "httpx")


def frozen() -> bool:
    """True in the one-file binary."""
    return bool(getattr(sys, "frozen", False))


def binary_path() -> Path:
    return Path(sys.executable).resolve()


def path_flags() -> list[str]:
    """The flags that keep a Python started by tailagent from importing out of the
    current directory, where a `tailagent/` folder (a clone, seen from its parent, or
    the workspace) would shadow this package: `-I` when this interpreter runs
    isolated, else `-P` (Python 3.11: nothing put before sys.path), with this one's
    `-E` and `-s`. Not `-I` always: it also drops PYTHONPATH and the user's
    site-packages, which is where a `PYTHONPATH=` or `pip install --user` tailagent
    lives, and the child must import the tailagent this process did."""
    if sys.flags.isolated:
        return ["-I"]
    flags = ["-P"]
    if sys.flags.ignore_environment:
        flags.append("-E")
    if sys.flags.no_user_site:
        flags.append("-s")
    return flags


def python_child(module: str) -> list[str]:
    """The argv that runs `module` of tailagent in a child of this interpreter
    (see path_flags: never from the current directory)."""
    return [sys.executable, *path_flags(), "-m", module]


def command() -> tuple[str, ...]:
    """What runs this tailagent from a systemd unit, a word each (a path may hold a
    space): the binary itself, the console script next to this interpreter (its
    sys.path starts at its own directory), else the interpreter with -P: the unit's
    working directory is the workspace, whose `tailagent/` folder (a checkout of this
    project) must not shadow the package, while a `pip install --user` tailagent,
    which -I would not see, still loads."""
    if frozen():
        return (str(binary_path()),)
    script = Path(sys.executable).with_name("tailagent")
    return (str(script),) if script.is_file() else (sys.executable, "-P", "-m", "tailagent")


def invoked_as() -> list[str]:
    """The command as the person typed it, for the follow-up commands tailagent prints:
    `tailagent` when that name on PATH is this very program, else its path as run
    (`./dist/tailagent`), or `python -m tailagent` for the module, with the -I or -P
    it was run with (run from the same directory, the follow-up must not import
    from it when this did not)."""
    run = sys.argv[0] if sys.argv and sys.argv[0] else "tailagent"
    if run.endswith("__main__.py"):
        shown = ["-I"] if sys.flags.isolated else ["-P"] if sys.flags.safe_path else []
        return ["python", *shown, "-m", "tailagent"]
    on_path = shutil.which(Path(run).name)
    if on_path is not None and Path(on_path).resolve() == Path(run).resolve():
        return [Path(run).name]
    return [run]


def _version(distribution: str) -> str:
    try:
        return metadata.version(distribution)
    except metadata.PackageNotFoundError:
        return "missing"


def carried_versions() -> dict[str, str]:
    """Python and the libraries that matter."""
    found = {"python": platform.python_version()}
    found.update({name: _version(name) for name in CARRIED})
    return found


def describe() -> str:
    """One line: how this tailagent is installed."""
    if frozen():
        return f"binary {binary_path()} (Python {platform.python_version()}, PyInstaller)"
    package = Path(__file__).resolve().parent.parent
    return f"package {package} (Python {platform.python_version()} at {sys.executable})"
