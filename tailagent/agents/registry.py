"""Which backend a configuration asks for.

Only the chosen backend is imported: the ACP schema and the Claude Agent SDK (with
MCP) take ~0.9 s and tens of MB to load, which an echo or ACP server never uses.
"""

from __future__ import annotations

import os
import shutil
import sys
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import TYPE_CHECKING

from tailagent.agents.acp.presets import CUSTOM, PRESETS, command_line, shown_command
from tailagent.agents.events import AgentBackend
from tailagent.config import Settings
from tailagent.process.origin import binary_path, frozen
from tailagent.sandbox.fences import Sandbox

if TYPE_CHECKING:
    from tailagent.agents.acp.session import ToolChannels  # the ACP schema: only if chosen


def make_backend(
    settings: Settings,
    spare_directory: Callable[[], Awaitable[Path]] | None = None,
    sandbox: Sandbox | None = None,
    tool_channels: ToolChannels | None = None,
) -> AgentBackend:
    """`spare_directory`, when conversations get directories of their own, says where
    an agent started ahead should start (Claude Code's, whose directory is fixed when it
    starts, and a fenced ACP agent's, whose sandbox is; echo starts nothing ahead).
    `sandbox` fences every process an agent runs (echo runs none).

    Every Claude and ACP agent is offered tailagent's own tools (list_peers, delegate):
    each hand-off asks the person first, and a turn no person asked for gets a readable
    refusal, so they are safe to offer always. Claude reaches them in this process; an
    ACP agent through `tool_channels`, its conversation's socket (tools_wanted says
    which backends need them)."""
    backend = _backend(settings, spare_directory, sandbox, tool_channels)
    if settings.agent_process.caller_modes is not None:
        # The operator's word, for an agent whose modes tailagent does not know.
        backend.caller_modes = settings.agent_process.caller_modes
    return backend


def tools_wanted(settings: Settings) -> bool:
    """Whether the backend reaches tailagent's tools through sockets (ToolChannels):
    an ACP agent does; Claude's tools run in this process, and echo calls them directly."""
    return settings.agent_command is not None or settings.agent in PRESETS


def agent_kind(settings: Settings) -> str:
    """Which agent runs, by the name its sandbox knows it: `claude` (Claude Code through
    the SDK), a preset's name, `echo` (in the server's process), or `custom`."""
    if settings.agent_command is None and settings.agent in ("claude", "echo"):
        return settings.agent
    return settings.agent if settings.agent in PRESETS else "custom"


def agent_programs(settings: Settings) -> list[Path]:
    """The agent's own files, which its sandbox shows even where they live in a place it
    hides (a venv inside the checkout, a script under /tmp): the interpreter's prefixes,
    its executable, and the files its command line names; and what an ACP agent runs
    as tailagent's MCP server (tool_socket.py): the one-file binary, or this package,
    which an editable install keeps in its checkout."""
    programs = [Path(sys.prefix), Path(sys.base_prefix)]
    if tools_wanted(settings):
        programs += [binary_path() if frozen() else Path(__file__).resolve().parents[1]]
    kind = agent_kind(settings)
    if kind == "claude":
        from tailagent.agents.claude import find_cli

        cli = find_cli(settings.claude).path
        programs += [cli] if cli is not None else []
    elif kind != "echo":
        preset = PRESETS.get(settings.agent) or CUSTOM
        argv = command_line(preset, settings.agent_process.package_version,
                            settings.agent_command)  # fmt: skip
        found = shutil.which(argv[0])
        programs += [Path(found)] if found else []
        programs += [Path(word) for word in argv[1:] if os.path.isabs(word) or os.sep in word]
    return [p for p in programs if p.exists()]


def agent_named(settings: Settings) -> str:
    """The agent a server runs, as its start line and `doctor` name it: the preset's or
    backend's name, and a command given with `--agent-command` as given, shortened
    (without a preset, the name `--agent` defaults to would be untrue)."""
    if settings.agent_command is None:
        return settings.agent
    command = f"`{shown_command(settings.agent_command)}`"
    return f"{settings.agent} as {command}" if settings.agent in PRESETS else command


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
    settings: Settings,
    spare_directory: Callable[[], Awaitable[Path]] | None,
    sandbox: Sandbox | None,
    tool_channels: ToolChannels | None,
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
            sandbox=sandbox,
            own_tools=True,
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
        sandbox,
        spare_directory,
        tool_channels,
    )
