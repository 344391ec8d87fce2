"""Builds the agent card in its two variants.

A strict A2A 1.0 client (one that sends `A2A-Version: 1.0`) gets a card with
only 1.0 interfaces, which passes the 1.0 schema. Anyone else gets the card
that also lists 0.3 interfaces, from which a2a-sdk derives the 0.3 top-level
fields (`url`, `preferredTransport`, ...) so 0.3 clients find the agent too.
"""

from __future__ import annotations

from typing import Any

from a2a.server.request_handlers.response_helpers import agent_card_to_dict
from a2a.types.a2a_pb2 import (
    AgentCapabilities,
    AgentCard,
    AgentInterface,
    AgentProvider,
    AgentSkill,
    HTTPAuthSecurityScheme,
    SecurityRequirement,
    SecurityScheme,
    StringList,
)

from tailagent.agents.events import AgentBackend
from tailagent.version import __version__

INPUT_MODES = ["text/plain", "application/json"]
OUTPUT_MODES = ["text/plain", "application/json", "text/x-diff"]


BEARER = "bearer"
# How a caller is known: clients whose auth reads the card send their token; a caller
# on the tailnet needs none (the description says so, as no scheme can).
BEARER_SCHEME = SecurityScheme(
    http_auth_security_scheme=HTTPAuthSecurityScheme(
        scheme="Bearer",
        description=(
            "A token made with `tailagent token add` on the agent's box. Callers on the "
            "agent's tailnet need none: the agent knows them from Tailscale (LocalAPI whois "
            "of the connection), and lets in the node's owner and whom it is told to."
        ),
    )
)


def build_card(backend: AgentBackend, public_url: str, name: str, *, legacy: bool) -> AgentCard:
    url = public_url.rstrip("/")
    versions = ["1.0", "0.3"] if legacy else ["1.0"]
    interfaces = [
        AgentInterface(url=url, protocol_binding=binding, protocol_version=version)
        for version in versions
        for binding in ("JSONRPC", "HTTP+JSON")
    ]
    skills = [
        AgentSkill(
            id=skill.id,
            name=skill.name,
            description=skill.description,
            tags=list(skill.tags) or [backend.name],
            examples=list(skill.examples),
            input_modes=INPUT_MODES,
            output_modes=OUTPUT_MODES,
        )
        for skill in backend.skills
    ]
    return AgentCard(
        name=name,
        description=(
            f"A coding agent ({backend.name}) on a tailnet, over A2A. {backend.description}"
        ),
        version=__version__,
        supported_interfaces=interfaces,
        provider=AgentProvider(organization="tailagent", url=url),
        capabilities=AgentCapabilities(
            streaming=True, push_notifications=True, extended_agent_card=True
        ),
        default_input_modes=INPUT_MODES,
        default_output_modes=OUTPUT_MODES,
        skills=skills,
        security_schemes={BEARER: BEARER_SCHEME},
        # The role a token needs to call (OpenAPI 3.1 lets a non-OAuth requirement name
        # roles); an empty list would also vanish from the signed form of the card.
        security_requirements=[SecurityRequirement(schemes={BEARER: StringList(list=["caller"])})],
    )


CALLER_EXTENSION = "urn:tailagent:caller:v1"


def for_caller(card: AgentCard, owner: str, roles: list[str], rules: list[str]) -> AgentCard:
    """The extended card: the card, plus what this caller may do here."""
    extended = AgentCard()
    extended.CopyFrom(card)
    extension = extended.capabilities.extensions.add(
        uri=CALLER_EXTENSION,
        description="Who the server takes you for, your roles, and the rules that apply to you.",
        required=False,
    )
    extension.params.update({"caller": owner, "roles": roles, "rules": rules})
    return extended


def card_json(card: AgentCard) -> dict[str, Any]:
    return agent_card_to_dict(card)
