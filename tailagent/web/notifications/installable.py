"""What makes the desk an installable app: its web manifest and its service worker.

Static but for the box's name, and served under rules of their own (the worker from
the desk's root, always revalidated), they change with the browsers' install and
Web Push requirements, not with subscriptions or answers.
"""

from __future__ import annotations

import json
from importlib import resources

from quart import Blueprint, Response
from quart.typing import ResponseReturnValue

from tailagent.web.route_kit import DeskKit

THEME = "#1c1917"


def register_app(push_bp: Blueprint, kit: DeskKit) -> None:
    """Adds `/desk/manifest.webmanifest` and `/desk/sw.js`."""
    box = kit.parts.webpush.box

    @push_bp.get("/manifest.webmanifest")
    async def manifest() -> ResponseReturnValue:
        """What makes the desk an app a phone can put on its home screen (iOS delivers
        Web Push to such an app only)."""
        icons = [
            {"src": f"/desk/static/icon-{size}.png", "sizes": f"{size}x{size}",
             "type": "image/png", "purpose": "any maskable"}
            for size in (192, 512)
        ]  # fmt: skip
        body = {
            "name": f"tailagent on {box}",
            "short_name": box[:12] or "tailagent",
            "description": "Watch and approve what the coding agent on this box does.",
            "id": "/desk/",
            "start_url": "/desk/",
            "scope": "/desk/",
            "display": "standalone",
            "theme_color": THEME,
            "background_color": "#fafaf9",
            "icons": icons,
        }
        return Response(json.dumps(body), content_type="application/manifest+json")

    @push_bp.get("/sw.js")
    async def service_worker() -> ResponseReturnValue:
        """The service worker, from the desk's root so that it may control every page of
        it; always checked for a new version (no-cache), as a stale one would answer
        notifications with an old script."""
        response = Response(_static("sw.js"), content_type="text/javascript; charset=utf-8")
        response.headers["Cache-Control"] = "no-cache"
        response.headers["Service-Worker-Allowed"] = "/desk/"
        return response


def _static(name: str) -> bytes:
    return resources.files("tailagent.web").joinpath("static", name).read_bytes()
