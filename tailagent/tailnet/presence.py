"""How this server is on the tailnet: one interface for the ways it can be.

- `BoxTailscaled`: the box's tailscaled; the operator runs `tailscale serve`.
- `ServeEntry` (`--tailnet`): the box's tailscaled, with the serve entry written and
  removed by tailagent itself.
- `EmbeddedNode` (`--tsnet`, in tsnet/): a tailnet node inside this process.

`server.make_presence` picks one; this module knows none but the tailscaled ones, so
the embedded node can build on its interface without an import running back up.

The server asks each the same things: where the LocalAPI is (whois, status), which
URL to advertise, whether a local root socket's X-Forwarded-For may name a peer
(only tailscaled's `serve` sends one), and how to reach the tailnet.
"""

from __future__ import annotations

from typing import Protocol

from tailagent.config import Settings
from tailagent.tailnet.localapi import START_TAILSCALED, LocalAPI, LocalAPIUnavailable
from tailagent.tailnet.serve_entry import ServeEntry, TailnetError, expose, withdraw


class PresenceError(Exception):
    """The server cannot get onto the tailnet; str() is the one line that says why."""


class Presence(Protocol):
    @property
    def localapi(self) -> LocalAPI:
        """The LocalAPI that answers whois and status for this server's node."""

    @property
    def trusts_forwarding(self) -> bool:
        """May X-Forwarded-For from a local socket of root or tailscaled name a peer?"""

    @property
    def tailnet_proxy(self) -> str | None:
        """A socks5:// proxy onto the tailnet; None when the host's network reaches it."""

    @property
    def own_url(self) -> str | None:
        """This box's own URL once started, when the advertised one is a name it shares
        with other boxes (a Tailscale Service); None otherwise."""

    async def start(self, listener: str) -> str | None:
        """Gets onto the tailnet, forwarding to `listener` (http://IP:PORT or unix:/path);
        returns the URL to advertise, or None to keep the configured one."""

    async def stop(self) -> None:
        """Leaves the tailnet as `start` found it, and closes the LocalAPI client."""

    def callers_line(self) -> str | None:
        """How tailnet callers get in, when this way onto the tailnet knows it by itself
        (None: ask the box's tailscaled)."""


class BoxTailscaled:
    trusts_forwarding: bool = True
    tailnet_proxy: str | None = None

    @property
    def own_url(self) -> str | None:
        return None

    def __init__(self, settings: Settings) -> None:
        self.localapi = LocalAPI.tailscaled(settings.tailscale.socket, patient=True)

    async def start(self, listener: str) -> str | None:
        return None

    async def stop(self) -> None:
        await self.localapi.aclose()

    def callers_line(self) -> str | None:
        return None


class ServeEntryPresence(BoxTailscaled):
    """`--tailnet`: the box's tailscaled serves this server on its MagicDNS name, and
    (`--service`) on a Tailscale Service's too: callers use the service's name, the
    box's siblings its own (cluster/carry.py)."""

    def __init__(self, settings: Settings) -> None:
        super().__init__(settings)
        self._port = settings.tailnet_port
        self._service = settings.tailnet_service
        self._entry: ServeEntry | None = None
        self._own: ServeEntry | None = None

    @property
    def own_url(self) -> str | None:
        return self._own.public_url if self._own is not None and self._service else None

    async def start(self, listener: str) -> str | None:
        try:
            self._own = await expose(self.localapi, self._port, listener)
            if self._service:
                self._entry = await expose(self.localapi, self._port, listener, self._service)
            else:
                self._entry = self._own
        except LocalAPIUnavailable as exc:
            raise PresenceError(
                f"--tailnet needs tailscaled: {exc}: {START_TAILSCALED}, or name its socket "
                "with --tailscale-socket; without tailscaled, --tsnet joins as a node of its own"
            ) from None
        except TailnetError as exc:
            raise PresenceError(str(exc)) from None
        return self._entry.public_url

    async def stop(self) -> None:
        try:
            for entry in dict.fromkeys((self._entry, self._own)):
                if entry is not None:
                    await withdraw(self.localapi, entry)
        except (TailnetError, LocalAPIUnavailable) as exc:
            raise PresenceError(f"could not remove the tailscale serve entry: {exc}") from None
        finally:
            self._entry = self._own = None
            await super().stop()

    def callers_line(self) -> str | None:
        return f"on the tailnet: {self._entry.public_url}" if self._entry else None
