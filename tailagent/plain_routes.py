"""The routes outside A2A: the agent card and its keys, the AI Catalog, /metrics,
/healthz and /favicon.ico.

Starlette routes (a2a-sdk's own routes already run on Starlette), behind the same
access guard as everything else; the card, /healthz and the icon are public (the
guard's PUBLIC_PATHS), the catalog is answered to anyone but lists the agent only to
whom it may serve (card/catalog.py), /metrics is for admins.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Sequence
from importlib.resources import files

from prometheus_client import CONTENT_TYPE_LATEST
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import BaseRoute, Route

from tailagent.access.identity import SCOPE_KEY, VIEWER_KEY, Caller
from tailagent.card.catalog import CATALOG_PATH, CATALOG_TYPE, catalog
from tailagent.card.publish import JWKS_PATH, CardPublisher
from tailagent.output.metrics import exposition
from tailagent.sandbox.fences import FenceReport

CARD_PATH = "/.well-known/agent-card.json"
# The 1.0 path, and the two older ones clients still ask for.
CARD_PATHS = (CARD_PATH, "/.well-known/agent-card", "/.well-known/agent.json")
CARD_MAX_AGE = 300
FAVICON_PATH = "/favicon.ico"
FAVICON_MAX_AGE = 86400


def plain_routes(
    publisher: CardPublisher,
    fence: FenceReport,
    allowed_nodes: Sequence[str],
    measure: Callable[[], Awaitable[None]],
) -> list[BaseRoute]:
    """`fence` (how agents are sandboxed) is part of /healthz's answer: a probe that
    watches the service sees it run unfenced. `allowed_nodes` (delegation.allowed_nodes)
    are the nodes the catalog lists the agent to, as one they may hand work to.
    `measure` sets the gauges read at a scrape (the store's size) just before it."""
    health = {"status": "ok", "sandbox": fence.as_json()}

    async def agent_card(request: Request) -> Response:
        await publisher.refresh()
        wants_strict = request.headers.get("A2A-Version", "").strip().startswith("1.")
        strict, legacy = publisher.variants(request.url.hostname)
        variant = strict if wants_strict else legacy
        headers = {
            "Cache-Control": f"public, max-age={CARD_MAX_AGE}",
            "Last-Modified": publisher.last_modified,
            "ETag": variant.etag,
            "Vary": "A2A-Version",
        }
        if variant.etag in request.headers.get("If-None-Match", ""):
            return Response(status_code=304, headers=headers)
        return Response(variant.body, media_type="application/json", headers=headers)

    async def jwks(_request: Request) -> Response:
        await publisher.refresh()
        headers = {"Cache-Control": f"public, max-age={CARD_MAX_AGE}"}
        return Response(publisher.jwks, media_type="application/jwk-set+json", headers=headers)

    async def ai_catalog(request: Request) -> Response:
        """Per viewer (the guard's VIEWER_KEY), so never kept by a cache for another."""
        await publisher.refresh()
        viewer = request.scope.get(VIEWER_KEY)
        viewer = viewer if isinstance(viewer, Caller) else None
        body = catalog(publisher.strict.body, publisher.url + CARD_PATH, viewer, allowed_nodes)
        headers = {"Cache-Control": "private, no-store", "Vary": "*"}
        return Response(json.dumps(body), media_type=CATALOG_TYPE, headers=headers)

    async def metrics(request: Request) -> Response:
        caller = request.scope.get(SCOPE_KEY)
        if not isinstance(caller, Caller) or not caller.may("admin"):
            body = {"error": "forbidden", "reason": "/metrics is for admins and the local token"}
            return Response(json.dumps(body), status_code=403, media_type="application/json")
        await measure()
        return Response(exposition(), media_type=CONTENT_TYPE_LATEST)

    async def healthz(_request: Request) -> Response:
        return JSONResponse(health)

    icon = (files("tailagent.web") / "static" / "icon-192.png").read_bytes()

    async def favicon(_request: Request) -> Response:
        """The desk's icon, for the browsers that ask for /favicon.ico whatever a page
        links: public, so each page load is not an access refusal in the log."""
        headers = {"Cache-Control": f"public, max-age={FAVICON_MAX_AGE}"}
        return Response(icon, media_type="image/png", headers=headers)

    return [
        *(Route(path, agent_card, methods=["GET"]) for path in CARD_PATHS),
        Route(JWKS_PATH, jwks, methods=["GET"]),
        Route(CATALOG_PATH, ai_catalog, methods=["GET"]),
        Route("/metrics", metrics, methods=["GET"]),
        Route("/healthz", healthz, methods=["GET"]),
        Route(FAVICON_PATH, favicon, methods=["GET"]),
    ]
