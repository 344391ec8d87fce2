"""Files a caller attaches to a message: checked, sized, and handed to the agent.

Inline bytes become `PromptFile` parts; the backend embeds them where the agent
accepts embedded content, or else saves them in the workspace's inbox
(`.tailagent/inbox/<task id>/`) and points the agent at the path. A part given only
as a URL is never fetched unless its host is on `attachments.url_hosts`, and never
from a loopback, private or link-local address, whatever name points there.
"""

from __future__ import annotations

import asyncio
import ipaddress
import re
import socket
from pathlib import Path
from urllib.parse import urlsplit

import httpx
from a2a.types.a2a_pb2 import Message

from tailagent.agents.events import PromptFile

SAFE_NAME = re.compile(r"[^A-Za-z0-9._-]+")


class AttachmentRefused(ValueError):
    """A part that cannot be accepted; str() says which and why."""


def safe_name(name: str, index: int) -> str:
    """A file name that stays a single path component."""
    base = SAFE_NAME.sub("_", Path(name or "").name).lstrip(".")
    return base[:120] or f"attachment-{index}"


def inbox(workspace: Path, task_id: str) -> Path:
    return workspace / ".tailagent" / "inbox" / SAFE_NAME.sub("_", task_id)


def check(message: Message, max_part: int, max_message: int, url_hosts: tuple[str, ...]) -> None:
    """Refuses oversized parts and URLs that may not be fetched, before the turn starts."""
    total = 0
    for index, part in enumerate(message.parts, 1):
        if part.HasField("raw"):
            size = len(part.raw)
            if size > max_part:
                raise AttachmentRefused(
                    f"part {index} ({part.filename or 'unnamed'}) is {size} bytes; the limit is "
                    f"{max_part} (attachments.max_part_bytes)"
                )
            total += size
        elif part.HasField("url"):
            host = urlsplit(part.url).hostname or ""
            if urlsplit(part.url).scheme not in ("http", "https") or host not in url_hosts:
                raise AttachmentRefused(
                    f"part {index} is only a URL ({part.url}); tailagent fetches URLs only from "
                    "hosts in attachments.url_hosts: send the bytes inline instead"
                )
    if total > max_message:
        raise AttachmentRefused(
            f"the attachments come to {total} bytes; the limit is {max_message} "
            "(attachments.max_message_bytes)"
        )


async def _public(host: str) -> bool:
    infos = await asyncio.get_running_loop().getaddrinfo(host, None, type=socket.SOCK_STREAM)
    addresses = {ipaddress.ip_address(info[4][0]) for info in infos}
    return bool(addresses) and all(a.is_global for a in addresses)


async def fetch(url: str, name: str, limit: int) -> bytes:
    """An allowlisted URL's bytes, refused when its host resolves anywhere non-public."""
    host = urlsplit(url).hostname or ""
    if not await _public(host):
        raise AttachmentRefused(f"{url}: {host} is a loopback, private or link-local address")
    async with (
        httpx.AsyncClient(timeout=30, follow_redirects=False) as http,
        http.stream("GET", url) as response,
    ):
        response.raise_for_status()
        data = bytearray()
        async for chunk in response.aiter_bytes():
            data += chunk
            if len(data) > limit:
                raise AttachmentRefused(f"{name} from {url} is over {limit} bytes")
        return bytes(data)


def file_part(name: str, media_type: str, data: bytes, box: Path) -> PromptFile:
    return PromptFile(name=name, media_type=media_type or "application/octet-stream", data=data,
                      inbox=box)  # fmt: skip
