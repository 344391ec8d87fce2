"""Which backend a configuration asks for.

Only the chosen backend is imported: the ACP schema and the Claude Agent SDK (with
MCP) take ~0.9 s and tens of MB to load, which an echo or ACP server never uses.
"""

from __future__ import annotations

from tailagent.agents.acp.presets import CUSTOM, PRESETS
from tailagent.agents.events import AgentBackend
from tailagent.config import Settings


def make_backend(settings: Settings) -> AgentBackend:
    preset = PRESETS.get(settings.agent)
    if settings.agent_command is None and settings.agent == "claude":
        from tailagent.agents.claude import ClaudeBackend

        return ClaudeBackend(
            settings.claude,
            settings.cwd,
            settings.agent_process.max_processes,
            settings.mcp_servers,
            warm_spares=settings.agent_process.warm_spares,
        )
    if settings.agent_command is None and preset is None:
        from tailagent.agents.echo import EchoBackend

        return EchoBackend(settings.cwd)
    from tailagent.agents.acp.backend import AcpBackend

    # A preset with its own command (say, a local install) keeps the preset's
    # credentials and login advice; without a preset it is just an ACP agent.
    return AcpBackend(
        preset or CUSTOM,
        settings.cwd,
        settings.agent_process,
        settings.agent_command,
        settings.mcp_servers,
    )
