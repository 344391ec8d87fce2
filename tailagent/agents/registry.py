"""Which backend a configuration asks for."""

from __future__ import annotations

from tailagent.agents.acp.backend import AcpBackend
from tailagent.agents.acp.presets import CUSTOM, PRESETS
from tailagent.agents.claude import ClaudeBackend
from tailagent.agents.echo import EchoBackend
from tailagent.agents.events import AgentBackend
from tailagent.config import Settings


def make_backend(settings: Settings) -> AgentBackend:
    preset = PRESETS.get(settings.agent)
    if settings.agent_command is not None:
        # A preset with its own command (say, a local install) keeps the preset's
        # credentials and login advice; without a preset it is just an ACP agent.
        return AcpBackend(
            preset or CUSTOM,
            settings.cwd,
            settings.agent_process,
            settings.agent_command,
            settings.mcp_servers,
        )
    if settings.agent == "claude":
        return ClaudeBackend(
            settings.claude,
            settings.cwd,
            settings.agent_process.max_processes,
            settings.mcp_servers,
            warm_spares=settings.agent_process.warm_spares,
        )
    if preset is None:
        return EchoBackend()
    return AcpBackend(
        preset, settings.cwd, settings.agent_process, mcp_servers=settings.mcp_servers
    )
