"""`tailagent serve --tailnet`: tailscale serve, configured by tailagent itself.

It adds one HTTPS entry on the node's MagicDNS name that proxies to tailagent's
listener, and at stop removes exactly that entry, leaving every other serve
entry as it was. Each write names the ETag of the config it read, so a change
made meanwhile by someone else is never overwritten (it is read again instead).
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


class TailnetError(Exception):
    """--tailnet cannot be set up; str() is the one line that says why and what to do."""


@dataclass(frozen=True)
class ServeEntry:
    host: str  # the node's MagicDNS name
    port: int
    target: str  # http://127.0.0.1:PORT or unix:/path

    @property
    def site(self) -> str:
        return f"{self.host}:{self.port}"

    @property
    def public_url(self) -> str:
        return f"https://{self.host}" if self.port == 443 else f"https://{self.host}:{self.port}"


def with_entry(config: dict[str, Any], entry: ServeEntry) -> dict[str, Any]:
    new = copy.deepcopy(config)
    site = new.setdefault("Web", {}).get(entry.site)
    if site is not None and site.get("Handlers", {}).get("/", {}).get("Proxy") != entry.target:
        raise TailnetError(
            f"tailscale serve already serves {entry.site} for something else; "
            "pick another port (--tailnet-port) or remove that entry"
        )
    new.setdefault("TCP", {})[str(entry.port)] = {"HTTPS": True}
    new["Web"][entry.site] = {"Handlers": {"/": {"Proxy": entry.target}}}
    return new


def without_entry(config: dict[str, Any], entry: ServeEntry) -> dict[str, Any]:
    new = copy.deepcopy(config)
    web = new.get("Web") or {}
    site = web.get(entry.site)
    if site is None or site.get("Handlers", {}).get("/", {}).get("Proxy") != entry.target:
        return new  # not ours (any more): leave it
    del web[entry.site]
    if not any(key.endswith(f":{entry.port}") for key in web):
        (new.get("TCP") or {}).pop(str(entry.port), None)
    return new


async def _edit(api: LocalAPI, change: Any) -> None:
    for attempt in range(ATTEMPTS):
        config, etag = await api.serve_config()
        try:
            await api.set_serve_config(change(config), etag)
            return
        except ConfigChanged:
            log.info("the serve config changed meanwhile; reading it again (%d)", attempt + 1)
    raise TailnetError("the serve config kept changing while tailagent edited it; try again")


async def expose(api: LocalAPI, port: int, target: str) -> ServeEntry:
    status = await api.status()
    host = self_dns_name(status)
    if not host:
        raise TailnetError("this node has no MagicDNS name: enable MagicDNS for the tailnet")
    entry = ServeEntry(host, port, target)
    try:
        await _edit(api, lambda config: with_entry(config, entry))
    except NotOperator:
        raise TailnetError(
            "tailagent may not change tailscale serve as this user: run "
            f"`sudo tailscale set --operator={getpass.getuser()}` once"
        ) from None
    log.info("tailscale serve: %s -> %s", entry.public_url, target)
    return entry


async def withdraw(api: LocalAPI, entry: ServeEntry) -> None:
    await _edit(api, lambda config: without_entry(config, entry))
    log.info("tailscale serve: removed %s", entry.public_url)
