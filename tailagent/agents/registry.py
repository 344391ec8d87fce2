"""Which backend a configuration asks for."""

from __future__ import annotations

from tailagent.agents.echo import EchoBackend
from tailagent.agents.events import AgentBackend


def make_backend(agent: str) -> AgentBackend:
    if agent == "echo":
        return EchoBackend()
    raise ValueError(f"agent {agent!r} is not available yet")
