"""An async client for a Tailscale LocalAPI: tailscaled's, over its unix socket, or
the embedded node's, over loopback TCP with its credential.

The node is the only authority on who is calling: it knows which tailnet node
and user stand behind an address. The `tailscale-localapi` package is not used:
it has no whois, ignores the socket path it is given, and pins an old requests.
"""

from __future__ import annotations

import asyncio
import logging
import ssl
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

import httpx

from tailagent.output.metrics import WHOIS

log = logging.getLogger(__name__)

DEFAULT_SOCKETS = (
    Path("/var/run/tailscale/tailscaled.sock"),
    Path("/run/tailscale/tailscaled.sock"),
)
# tailscaled insists on this Host for LocalAPI requests over the socket.
LOCALAPI_BASE = "http://local-tailscaled.sock"
TAGGED_DEVICES = "tagged-devices"
MISS_TTL = 5.0
HIT_TTL = 2.0  # short: a revoked grant or a re-tagged node counts within seconds
RETRY_AFTER = 1.0
# tailscaled answers an ip:port it does not know after ~180 ms, and one at a time: it
# waits out a registration race holding its backend's lock (tailscale.com/proxymap),
# and every other request that takes that lock (whois, status, the serve config) waits
# behind it. A burst of new connections from `tailscale serve` queues there, so a read
# may wait far longer than a connection should: waiting its turn is right, refusing
# the caller is not. A tailscaled that is gone still fails at once, at connect.
PATIENCE = 60.0


# What a person does about it, said where a command needs tailscaled (as doctor says it).
START_TAILSCALED = "start tailscaled (sudo systemctl start tailscaled)"


class LocalAPIUnavailable(Exception):
    """tailscaled could not say: unreachable, or it answered 5xx. Callers fail closed."""


class NotOperator(Exception):
    """This user may not change tailscaled's settings (`tailscale set --operator=USER`)."""


class ConfigChanged(Exception):
    """Someone else changed the serve config between our read and our write."""


@dataclass(frozen=True, slots=True)
class Node:
    name: str
    tags: tuple[str, ...] = ()
    addresses: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class UserProfile:
    login: str
    display_name: str = ""


@dataclass(frozen=True, slots=True)
class WhoIs:
    node: Node
    user: UserProfile
    capabilities: dict[str, list[Any]] = field(default_factory=dict)

    @property
    def tagged(self) -> bool:
        """A tagged node's identity is its tags; its profile is a placeholder."""
        return bool(self.node.tags)

    @classmethod
    def parse(cls, data: dict[str, Any]) -> WhoIs:
        node = data.get("Node") or {}
        profile = data.get("UserProfile") or {}
        capmap = data.get("CapMap") or {}
        return cls(
            node=Node(
                name=str(node.get("Name") or node.get("ComputedName") or "").rstrip("."),
                tags=tuple(node.get("Tags") or ()),
                addresses=tuple(node.get("Addresses") or ()),
            ),
            user=UserProfile(
                login=str(profile.get("LoginName") or ""),
                display_name=str(profile.get("DisplayName") or ""),
            ),
            capabilities={k: list(v or []) for k, v in capmap.items()},
        )


def find_socket(configured: Path | None) -> Path:
    if configured is not None:
        return configured
    for candidate in DEFAULT_SOCKETS:
        if candidate.exists():
            return candidate
    return DEFAULT_SOCKETS[0]


def _no_tls() -> ssl.SSLContext:
    """The TLS context of a client that speaks plain HTTP only (tailscaled's socket, an
    embedded node's loopback): httpx's default would load the CA bundle, ~30 ms of CPU
    at every start, for TLS never spoken here. It trusts no certificate: an https URL
    would fail, never go unchecked."""
    return ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT)


class LocalAPI:
    """One LocalAPI: tailscaled's (`LocalAPI.tailscaled`) or an embedded node's
    (`LocalAPI.loopback`). Both answer the same requests the same way."""

    def __init__(
        self,
        client: httpx.AsyncClient,
        where: str,
        *,
        socket_path: Path | None = None,
        miss_ttl: float = MISS_TTL,
    ) -> None:
        self._client = client
        self.where = where
        self.socket_path = socket_path
        self._miss_ttl = miss_ttl
        self._cache: dict[tuple[str, str], tuple[float, WhoIs | None]] = {}
        # Lookups under way: a burst asking the same address waits for one answer.
        self._asking: dict[tuple[str, str], asyncio.Future[WhoIs | None]] = {}
        self._unreachable_until = 0.0
        self._unreachable_reason = ""
        # Whether it answered last time (None: not asked yet), so a change is logged once,
        # not on every request.
        self.reachable: bool | None = None

    @classmethod
    def tailscaled(
        cls, socket_path: Path | None = None, timeout: float = 3.0, patient: bool = False
    ) -> LocalAPI:
        """`patient`: a server's, whose reads wait their turn in a burst (see PATIENCE);
        a command's give up after `timeout`."""
        path = find_socket(socket_path)
        client = httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(uds=str(path), verify=_no_tls()),
            base_url=LOCALAPI_BASE,
            timeout=httpx.Timeout(timeout, read=PATIENCE if patient else timeout),
        )
        return cls(client, f"tailscaled at {path}", socket_path=path)

    @classmethod
    def loopback(cls, address: str, credential: str, timeout: float = 3.0) -> LocalAPI:
        """An embedded node's LocalAPI (tsnet's `Server.Loopback()`): it wants both the
        `Sec-Tailscale` header and its credential as the basic-auth password. Its whois
        runs in this process and costs microseconds, so misses are not cached: a
        forwarded connection may reuse a loopback port a local one had a moment ago."""
        client = httpx.AsyncClient(
            base_url=f"http://{address}",
            auth=httpx.BasicAuth("", credential),
            headers={"Sec-Tailscale": "localapi"},
            timeout=timeout,
            trust_env=False,
            verify=_no_tls(),
        )
        return cls(client, f"the embedded node's LocalAPI at {address}", miss_ttl=0.0)

    async def aclose(self) -> None:
        await self._client.aclose()

    def _unreachable(self, why: str) -> NoReturn:
        self._unreachable_reason = f"{self.where} is not reachable: {why}"
        self._unreachable_until = time.monotonic() + RETRY_AFTER
        if self.reachable is not False:
            if self.reachable:  # at start the server says it itself
                log.warning(
                    "%s: tailnet callers cannot be identified until it is back; local "
                    "callers with a token still get in",
                    self._unreachable_reason,
                )
            self.reachable = False
        raise LocalAPIUnavailable(self._unreachable_reason) from None

    async def _get(self, path: str, params: dict[str, str] | None = None) -> httpx.Response:
        # After a failed connection, fail fast for a moment instead of dialling again on
        # every request: while tailscaled is gone, every caller is local anyway.
        if time.monotonic() < self._unreachable_until:
            raise LocalAPIUnavailable(self._unreachable_reason)
        if self.socket_path is not None and not self.socket_path.exists():
            # No tailscaled on this box: known without a connection attempt.
            self._unreachable("there is no such socket")
        try:
            response = await self._client.get(path, params=params)
        except httpx.TimeoutException as exc:
            # Connected but slow (busy, not gone): this request fails closed, and the
            # next ones still ask.
            raise LocalAPIUnavailable(
                f"{self.where} did not answer in time ({type(exc).__name__})"
            ) from None
        except httpx.HTTPError as exc:
            self._unreachable(str(exc) or type(exc).__name__)
        if self.reachable is False:
            log.info("%s answers again: tailnet callers are identified again", self.where)
        self.reachable = True
        if response.status_code >= 500:
            raise LocalAPIUnavailable(
                f"tailscaled answered {response.status_code}: {response.text.strip()[:200]}"
            )
        return response

    async def whois(self, addr: str, proto: str = "") -> WhoIs | None:
        """Who is behind `addr` (an IP, or IP:port); None when the node knows no such peer.

        Misses are cached briefly: tailscaled spends ~180 ms on each unknown address.
        A hit on an ip:port is never cached: once that connection closes, a local
        process may get the same port (the resolver keeps the answer per connection)."""
        key = (addr, proto)
        cached = self._cache.get(key)
        if cached is not None and cached[0] > time.monotonic():
            WHOIS.labels("cache_hit").inc()
            return cached[1]
        asking = self._asking.get(key)
        if asking is not None:
            WHOIS.labels("cache_hit").inc()
            return await asyncio.shield(asking)
        future: asyncio.Future[WhoIs | None] = asyncio.get_running_loop().create_future()
        self._asking[key] = future
        try:
            result = await self._ask_whois(addr, proto)
        except BaseException as exc:
            future.set_exception(exc)
            future.exception()  # retrieved: nobody else may be waiting
            raise
        else:
            future.set_result(result)
            return result
        finally:
            del self._asking[key]

    async def _ask_whois(self, addr: str, proto: str) -> WhoIs | None:
        key = (addr, proto)
        now = time.monotonic()
        params = {"addr": addr}
        if proto:
            params["proto"] = proto
        response = await self._get("/localapi/v0/whois", params)
        result: WhoIs | None
        if response.status_code == 404:
            result = None
        elif response.status_code == 200:
            result = WhoIs.parse(response.json())
        else:
            raise LocalAPIUnavailable(
                f"tailscaled answered whois with {response.status_code}: {response.text[:200]}"
            )
        WHOIS.labels("found" if result else "not_found").inc()
        ttl = (0.0 if proto else HIT_TTL) if result else self._miss_ttl
        if ttl:
            self._cache[key] = (now + ttl, result)
        if result is not None and proto and result.node.addresses:
            # The peer's own IP answers the same: the request that follows asks by it.
            self._cache[(result.node.addresses[0].split("/", 1)[0], "")] = (now + HIT_TTL, result)
        if len(self._cache) > 4096:
            self._cache = {k: v for k, v in self._cache.items() if v[0] > now}
        return result

    async def serve_config(self) -> tuple[dict[str, Any], str]:
        """tailscaled's serve config and its ETag (for a safe read-modify-write)."""
        response = await self._get("/localapi/v0/serve-config")
        if response.status_code != 200:
            raise LocalAPIUnavailable(
                f"tailscaled answered serve-config with {response.status_code}"
            )
        return response.json() or {}, response.headers.get("etag", "")

    async def set_serve_config(self, config: dict[str, Any], etag: str) -> None:
        response = await self._write(
            "POST", "/localapi/v0/serve-config", "the serve config", config, {"If-Match": etag}
        )
        if response.status_code == 412:
            raise ConfigChanged("the serve config changed while tailagent was editing it")

    async def advertised_services(self) -> list[str]:
        """The Tailscale Services this node offers to host (its prefs)."""
        response = await self._get("/localapi/v0/prefs")
        if response.status_code != 200:
            raise LocalAPIUnavailable(f"tailscaled answered prefs with {response.status_code}")
        return list(response.json().get("AdvertiseServices") or [])

    async def advertise_services(self, names: list[str]) -> None:
        """Sets the services this node offers to host, as `tailscale serve --service`
        and `serve drain` do."""
        edit = {"AdvertiseServicesSet": True, "AdvertiseServices": names}
        await self._write("PATCH", "/localapi/v0/prefs", "the prefs", edit)

    async def _write(
        self,
        method: str,
        path: str,
        what: str,
        body: dict[str, Any],
        headers: dict[str, str] | None = None,
    ) -> httpx.Response:
        """A change sent to tailscaled: a 403 is NotOperator, another refusal (but a
        412, the caller's to read) LocalAPIUnavailable naming `what` was refused."""
        try:
            response = await self._client.request(method, path, json=body, headers=headers)
        except httpx.HTTPError as exc:
            raise LocalAPIUnavailable(f"tailscaled is not reachable: {exc}") from None
        if response.status_code == 403:
            raise NotOperator(response.text.strip())
        if response.status_code >= 300 and response.status_code != 412:
            raise LocalAPIUnavailable(
                f"tailscaled refused {what} ({response.status_code}): {response.text[:200]}"
            )
        return response

    async def status(self) -> dict[str, Any]:
        response = await self._get("/localapi/v0/status")
        if response.status_code != 200:
            raise LocalAPIUnavailable(f"tailscaled answered status with {response.status_code}")
        data: dict[str, Any] = response.json()
        return data


def self_login(status: dict[str, Any]) -> str | None:
    """The login that owns this node, from a status answer; None for a tagged node."""
    me = status.get("Self") or {}
    if me.get("Tags"):
        return None
    user = (status.get("User") or {}).get(str(me.get("UserID")))
    login = (user or {}).get("LoginName")
    return str(login) if login else None


def self_dns_name(status: dict[str, Any]) -> str | None:
    name = (status.get("Self") or {}).get("DNSName")
    return str(name).rstrip(".") if name else None
