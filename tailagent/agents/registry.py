"""Which backend a configuration asks for."""

from __future__ import annotations

from tailagent.agents.acp.backend import AcpBackend
from tailagent.agents.acp.presets import CUSTOM, PRESETS
from tailagent.agents.echo import EchoBackend
from tailagent.agents.events import AgentBackend
from tailagent.config import Settings


def make_backend(settings: Settings) -> AgentBackend:
    if settings.agent_command is not None:
        return AcpBackend(CUSTOM, settings.cwd, settings.agent_process, settings.agent_command)
    if settings.agent == "echo":
        return EchoBackend()
    return AcpBackend(PRESETS[settings.agent], settings.cwd, settings.agent_process)
