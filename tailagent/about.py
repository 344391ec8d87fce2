"""`tailagent --version`: this release, how it is installed, and what it carries, the
embedded node's Tailscale included. It reads both process/ (the install, the Python
libraries) and the embedded node's library, so it sits above them, beside the command
line that prints it.
"""

from __future__ import annotations

from tailagent.process.origin import carried_versions, describe
from tailagent.version import __version__


def versions() -> dict[str, str]:
    """Python and the libraries that matter, with the embedded node's Tailscale
    (read from the library without starting a node) when it is there."""
    found = carried_versions()
    # Only --version reads the library, so only it imports the loader.
    from tailagent.tailnet.tsnet.library import LibraryMissing, NodeLibrary

    try:
        found["tailscale.com (tsnet)"] = NodeLibrary.load().version()
    except (LibraryMissing, OSError):
        found["tailscale.com (tsnet)"] = "not built in"
    return found


def version_text() -> str:
    """This version, how it runs, and what it carries."""
    lines = [f"tailagent {__version__}", describe()]
    lines += [f"  {name} {version}" for name, version in versions().items()]
    return "\n".join(lines)
