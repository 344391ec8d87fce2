"""`tailagent serve --tailnet`: tailscale serve, configured by tailagent itself.

It adds one HTTPS entry that proxies to tailagent's listener, on the node's MagicDNS
name, or with `--service svc:NAME` on a Tailscale Service's name (`NAME.<tailnet>`,
which tailscaled serves for a tagged node and advertises in its prefs, as `tailscale
serve --service` does); at stop it removes exactly that entry (and the advertisement),
leaving every other serve entry as it was. Each write names the ETag of the config it
read, so a change made meanwhile by someone else is never overwritten (it is read
again instead).
"""

from __future__ import annotations

import copy
import getpass
import logging
from dataclasses import dataclass
from typing import Any

from tailagent.tailnet.localapi import ConfigChanged, LocalAPI, NotOperator, self_dns_name

log = logging.getLogger("tailagent.tailnet")
ATTEMPTS = 3
SERVICE_HOST = "service-host"  # tailcfg.NodeAttrServiceHost


class TailnetError(Exception):
    """--tailnet cannot be set up; str() is the one line that says why and what to do."""


@dataclass(frozen=True)
class ServeEntry:
    host: str  # the node's MagicDNS name, or the service's
    port: int
    target: str  # http://127.0.0.1:PORT or unix:/path
    service: str = ""  # svc:NAME, when served under a Tailscale Service

    @property
    def site(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def public_url(self) -> str:
        return f"https://{self.host}" if self.port == 443 else f"https://{self.host}:{self.port}"


def _scope(config: dict[str, Any], entry: ServeEntry, make: bool) -> dict[str, Any] | None:
    """The part of the serve config the entry lives in: the node's own, or its
    service's (`Services`, keyed by svc:NAME, holding the same TCP and Web tables)."""
    if not entry.service:
        return config
    if make:
        made: dict[str, Any] = config.setdefault("Services", {}).setdefault(entry.service, {})
        return made
    found: dict[str, Any] | None = (config.get("Services") or {}).get(entry.service)
    return found


def with_entry(config: dict[str, Any], entry: ServeEntry) -> dict[str, Any]:
    new = copy.deepcopy(config)
    scope = _scope(new, entry, make=True)
    assert scope is not None
    site = scope.setdefault("Web", {}).get(entry.site)
    if site is not None and site.get("Handlers", {}).get("/", {}).get("Proxy") != entry.target:
        raise TailnetError(
            f"tailscale serve already serves {entry.site} for something else; "
            "pick another port (--tailnet-port) or remove that entry"
        )
    scope.setdefault("TCP", {})[str(entry.port)] = {"HTTPS": True}
    scope["Web"][entry.site] = {"Handlers": {"/": {"Proxy": entry.target}}}
    return new


def without_entry(config: dict[str, Any], entry: ServeEntry) -> dict[str, Any]:
    new = copy.deepcopy(config)
    scope = _scope(new, entry, make=False) or {}
    web = scope.get("Web") or {}
    site = web.get(entry.site)
    if site is None or site.get("Handlers", {}).get("/", {}).get("Proxy") != entry.target:
        return new  # not ours (any more): leave it
    del web[entry.site]
    if not any(key.endswith(f":{entry.port}") for key in web):
        (scope.get("TCP") or {}).pop(str(entry.port), None)
    if entry.service and not web and not scope.get("TCP"):
        del new["Services"][entry.service]  # nothing of the service's left here
    return new


async def _edit(api: LocalAPI, change: Any) -> dict[str, Any]:
    """Writes `change(config)` over the config it was made from; returns what it wrote."""
    for attempt in range(ATTEMPTS):
        config, etag = await api.serve_config()
        try:
            new: dict[str, Any] = change(config)
            await api.set_serve_config(new, etag)
            return new
        except ConfigChanged:
            log.info("the serve config changed meanwhile; reading it again (%d)", attempt + 1)
    raise TailnetError("the serve config kept changing while tailagent edited it; try again")


async def expose(api: LocalAPI, port: int, target: str, service: str = "") -> ServeEntry:
    status = await api.status()
    host = self_dns_name(status)
    if not host:
        raise TailnetError("this node has no MagicDNS name: enable MagicDNS for the tailnet")
    if service:
        host = _service_host(status, service, host)
    entry = ServeEntry(host, port, target, service)
    try:
        await _edit(api, lambda config: with_entry(config, entry))
        if service:
            await _advertise(api, service, True)
    except NotOperator:
        raise TailnetError(
            "tailagent may not change tailscale serve as this user: run "
            f"`sudo tailscale set --operator={getpass.getuser()}` once"
        ) from None
    log.info("tailscale serve: %s -> %s", entry.public_url, target)
    if service:
        say_unapproved(status, service, entry.public_url)
    return entry


async def withdraw(api: LocalAPI, entry: ServeEntry) -> None:
    left = await _edit(api, lambda config: without_entry(config, entry))
    if entry.service and entry.service not in (left.get("Services") or {}):
        await _advertise(api, entry.service, False)  # not while another entry serves it
    log.info("tailscale serve: removed %s", entry.public_url)


def _service_host(status: dict[str, Any], service: str, node: str) -> str:
    """The service's MagicDNS name (NAME.<tailnet>); only a tagged node may host it."""
    if not (status.get("Self") or {}).get("Tags"):
        raise TailnetError(
            f"{service}: a Tailscale Service is hosted only by a tagged node, and this one "
            "is not: tag it (`tailscale up --advertise-tags=tag:NAME`, a tag your policy "
            "lets it have)"
        )
    suffix = node.partition(".")[2]
    return f"{service.removeprefix('svc:')}.{suffix}"


def approved(status: dict[str, Any], service: str) -> bool:
    """Whether control has approved this node as a host of `service` (it then sends
    the service's addresses in the node's own `service-host` attribute)."""
    mappings = ((status.get("Self") or {}).get("CapMap") or {}).get(SERVICE_HOST) or []
    return any(isinstance(m, dict) and m.get(service) for m in mappings)


def say_unapproved(status: dict[str, Any], service: str, url: str) -> None:
    """One line when control has not approved this node as a host of `service` yet: it
    advertises it, but nobody is sent here."""
    if not approved(status, service):
        log.warning(
            "%s is advertised but not approved for this node yet: approve it in the admin "
            "console (Services); until then no caller reaches it by %s", service, url,
        )  # fmt: skip


async def _advertise(api: LocalAPI, service: str, on: bool) -> None:
    """Adds `service` to the node's advertised services, or takes it out (a drain)."""
    names = await api.advertised_services()
    wanted = [n for n in names if n != service] + ([service] if on else [])
    if wanted != names:
        await api.advertise_services(wanted)
