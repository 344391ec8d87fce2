"""The AI Catalog (`/.well-known/ai-catalog.json`), beside the signed card.

A2A's open PR #2240 names AI Catalog the preferred way to find agents: a document of
typed entries (`specVersion`, `host`, `entries`; each entry an `identifier`, a media
`type`, a `url`). Ours lists the one agent this server runs, with the card's name,
description and interfaces, and whether the viewer's node may hand it work
(`delegation.allowed_nodes`). The card stays public; the catalog says who may use the
agent, so it lists it only to a viewer the access policy lets in or a node allowed to
delegate, and is an empty list to anyone else: a 200, never a refusal page.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any
from urllib.parse import urlsplit

from tailagent.access.guard import CATALOG_PATH
from tailagent.access.identity import Caller

__all__ = ["CATALOG_PATH", "CATALOG_TYPE", "catalog", "may_delegate"]
CATALOG_TYPE = "application/ai-catalog+json"
SPEC_VERSION = "1.0"
A2A_CARD_TYPE = "application/a2a-agent-card+json"
# Where tailagent's own members of an entry live (AI Catalog's `extensions`).
EXTENSION = "tailagent"


def _short(name: str) -> str:
    return name.strip().rstrip(".").lower().split(".")[0]


def may_delegate(viewer: Caller | None, allowed_nodes: Sequence[str]) -> bool:
    """Whether delegation.allowed_nodes names the viewer's node: one of its tags
    ("tag:build"), its MagicDNS name, or its short host name."""
    if viewer is None or not viewer.node:
        return False
    full = viewer.node.strip().rstrip(".").lower()
    for entry in allowed_nodes:
        named = entry.strip().rstrip(".").lower()
        if named.startswith("tag:"):
            if named in (t.lower() for t in viewer.tags):
                return True
        elif named in (full, _short(full)):
            return True
    return False


def catalog(
    card_json: str, card_url: str, viewer: Caller | None, allowed_nodes: Sequence[str]
) -> dict[str, Any]:
    """The catalog `viewer` sees (see the module's docstring): `card_json` is the
    strict 1.0 card as served, `card_url` where it is served."""
    card = json.loads(card_json)
    host = urlsplit(card_url).hostname or ""
    delegates = may_delegate(viewer, allowed_nodes)
    listed = viewer is not None and (bool(viewer.roles) or delegates)
    entry = {
        "identifier": f"urn:air:{host}:a2a:tailagent",
        "type": A2A_CARD_TYPE,
        "url": card_url,
        "displayName": str(card.get("name", "")),
        "description": str(card.get("description", "")),
        "version": str(card.get("version", "")),
        "extensions": {
            EXTENSION: {
                "interfaces": card.get("supportedInterfaces") or [],
                "acceptsDelegation": delegates,
            }
        },
    }
    return {
        "specVersion": SPEC_VERSION,
        "host": {"displayName": str(card.get("name", "")), "identifier": host},
        "entries": [entry] if listed else [],
    }
