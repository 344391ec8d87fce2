"""Which backend a configuration asks for.

Only the chosen backend is imported: the ACP schema and the Claude Agent SDK (with
MCP) take ~0.9 s and tens of MB to load, which an echo or ACP server never uses.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from pathlib import Path

from tailagent.agents.acp.presets import CUSTOM, PRESETS
from tailagent.agents.events import AgentBackend
from tailagent.config import Settings


def make_backend(
    settings: Settings, spare_directory: Callable[[], Awaitable[Path]] | None = None
) -> AgentBackend:
    """`spare_directory`, when conversations get directories of their own, says where
    an agent started ahead should start (only Claude Code's needs it: an ACP session is
    given its directory when it opens, and echo starts nothing ahead)."""
    backend = _backend(settings, spare_directory)
    if settings.agent_process.caller_modes is not None:
        # The operator's word, for an agent whose modes tailagent does not know.
        backend.caller_modes = settings.agent_process.caller_modes
    return backend


def agent_label(settings: Settings) -> str:
    """The agent as a person names it in a sentence ("Claude wants to run …")."""
    preset = PRESETS.get(settings.agent)
    if settings.agent_command is None and settings.agent == "claude":
        return "Claude"
    if preset is not None:
        return preset.title.split(" (")[0]
    if settings.agent_command is None:
        return "The echo agent"
    return "The agent"


def _backend(
    settings: Settings, spare_directory: Callable[[], Awaitable[Path]] | None
) -> AgentBackend:
    preset = PRESETS.get(settings.agent)
    if settings.agent_command is None and settings.agent == "claude":
        from tailagent.agents.claude import ClaudeBackend

        return ClaudeBackend(
            settings.claude,
            settings.cwd,
            settings.agent_process.max_processes,
            settings.mcp_servers,
            warm_spares=settings.agent_process.warm_spares,
            spare_directory=spare_directory,
            max_budget_usd=settings.budgets.per_task_usd,
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
