"""sd_notify, spoken directly: readiness, status lines, the watchdog, stopping.

Only when systemd asked for it (NOTIFY_SOCKET); otherwise every call is a no-op.
"""

from __future__ import annotations

import asyncio
import logging
import os
import socket

log = logging.getLogger(__name__)


class Notifier:
    def __init__(self, environ: dict[str, str] | None = None) -> None:
        env = dict(os.environ) if environ is None else environ
        address = env.get("NOTIFY_SOCKET", "")
        if address.startswith("@"):
            address = "\0" + address[1:]  # an abstract socket
        self._address = address
        self._socket: socket.socket | None = None
        if address:
            self._socket = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
            self._socket.setblocking(False)
        usec = env.get("WATCHDOG_USEC", "")
        pid = env.get("WATCHDOG_PID", "")
        watched = usec.isdigit() and (not pid or pid == str(os.getpid()))
        self.watchdog_interval = int(usec) / 2_000_000 if watched else None

    @property
    def enabled(self) -> bool:
        return self._socket is not None

    def send(self, *lines: str) -> None:
        if self._socket is None:
            return
        try:
            self._socket.sendto("\n".join(lines).encode(), self._address)
        except OSError as exc:
            log.warning("sd_notify failed: %s", exc)

    def status(self, text: str) -> None:
        self.send(f"STATUS={text}")

    def ready(self, text: str) -> None:
        self.send("READY=1", f"STATUS={text}")

    def stopping(self, text: str) -> None:
        self.send("STOPPING=1", f"STATUS={text}")

    async def watchdog(self) -> None:
        """Pings at half the interval systemd set, for as long as the loop is healthy."""
        if self.watchdog_interval is None:
            return
        while True:
            self.send("WATCHDOG=1")
            await asyncio.sleep(self.watchdog_interval)

    def close(self) -> None:
        if self._socket is not None:
            self._socket.close()
            self._socket = None
