"""Does a tailagent answer on this listener? One request to its public health probe."""

from __future__ import annotations

import httpx

PROBE_SECONDS = 3.0


async def healthy(target: str) -> bool:
    """`target` is a listener as tailscale serve names it: `http://HOST:PORT` or `unix:/path`."""
    if target.startswith("unix:"):
        transport = httpx.AsyncHTTPTransport(uds=target.removeprefix("unix:"))
        base = "http://localhost"
    else:
        transport, base = httpx.AsyncHTTPTransport(), target
    try:
        async with httpx.AsyncClient(transport=transport, timeout=PROBE_SECONDS) as http:
            response = await http.get(base + "/healthz", headers={"Host": "localhost"})
    except httpx.HTTPError:
        return False
    return response.status_code == 200
