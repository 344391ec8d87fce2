"""The routes outside A2A: the agent card and its keys, /metrics and /healthz.

They are a Quart app of their own, behind the same access guard as everything else;
the card and /healthz are public (the guard's PUBLIC_PATHS), /metrics is for admins.
"""

from __future__ import annotations

import json

from prometheus_client import CONTENT_TYPE_LATEST
from quart import Quart, Response, request

from tailagent.access.identity import SCOPE_KEY, Caller
from tailagent.card.publish import JWKS_PATH, CardPublisher
from tailagent.metrics import exposition

CARD_PATH = "/.well-known/agent-card.json"
# The 1.0 path, and the two older ones clients still ask for.
CARD_PATHS = (CARD_PATH, "/.well-known/agent-card", "/.well-known/agent.json")
CARD_MAX_AGE = 300


def plain_app(publisher: CardPublisher) -> Quart:
    app = Quart("tailagent")

    async def agent_card() -> Response:
        publisher.refresh()
        wants_strict = request.headers.get("A2A-Version", "").strip().startswith("1.")
        variant = publisher.strict if wants_strict else publisher.legacy
        headers = {
            "Cache-Control": f"public, max-age={CARD_MAX_AGE}",
            "Last-Modified": publisher.last_modified,
            "ETag": variant.etag,
            "Vary": "A2A-Version",
        }
        if variant.etag in request.headers.get("If-None-Match", ""):
            return Response("", status=304, headers=headers)
        return Response(variant.body, content_type="application/json", headers=headers)

    for path in CARD_PATHS:
        app.add_url_rule(path, view_func=agent_card, endpoint=path, methods=["GET"])

    @app.get(JWKS_PATH)
    async def jwks() -> Response:
        publisher.refresh()
        headers = {"Cache-Control": f"public, max-age={CARD_MAX_AGE}"}
        return Response(publisher.jwks, content_type="application/jwk-set+json", headers=headers)

    @app.get("/metrics")
    async def metrics() -> Response:
        caller = request.scope.get(SCOPE_KEY)
        if not isinstance(caller, Caller) or not caller.may("admin"):
            body = {"error": "forbidden", "reason": "/metrics is for admins and the local token"}
            return Response(json.dumps(body), status=403, content_type="application/json")
        return Response(exposition(), content_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app
