"""What believing `X-Forwarded-For` means on this box, in words.

`tailscale serve` reaches its backend from tailscaled's own process and names the
caller in X-Forwarded-For, so the resolver (access/resolve.py) believes that header on
a loopback TCP connection of root's or of tailscaled's user, and on any connection to
a unix-socket listener (which only root and the service's user can open). Run
tailscaled as the server's own service user and that user is every process of the
service, on either listener: any of them could name any tailnet caller. Fenced agents
cannot (their network is their own, the sockets hidden); the user's other processes
can, and nothing tells them from `tailscale serve`. So the person is told, by `serve`
at its start and by `doctor`, in these words.
"""

from __future__ import annotations

import os
import pwd
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class SharedForwarder:
    """tailscaled is the server's own user: what that means, and what to do."""

    detail: str
    fix: str

    def line(self) -> str:
        """One line for the server's start log."""
        return f"X-Forwarded-For: {self.detail}; fix: {self.fix}"


def shared_forwarder(socket_path: Path | None) -> SharedForwarder | None:
    """The warning when tailscaled (the owner of its LocalAPI socket) runs as this
    process's user, not root; None otherwise, or when there is no such socket."""
    if socket_path is None:
        return None
    try:
        owner = socket_path.stat().st_uid
    except OSError:
        return None
    if owner != os.getuid() or owner == 0:
        return None
    try:
        user = pwd.getpwuid(owner).pw_name
    except KeyError:
        user = f"uid {owner}"
    return SharedForwarder(
        f"tailscaled runs as this server's own user ({user}): any process of {user} reaching "
        "the listener (TCP port or unix socket) is trusted as tailscale serve and may name "
        "any tailnet caller (fenced agents reach neither: their network is their own)",
        "run tailscaled as root, as its package does, or as a user of its own; a unix-socket "
        f"listener does not help here, {user} reaches it too",
    )
