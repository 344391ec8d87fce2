"""The echo agent: tailagent's own, in the server's process, offline. It runs no
process, so it has no login, no home and nothing its fence must let through."""

from __future__ import annotations

from tailagent.agent_kinds.claude import CLAUDE_CODE_MODES
from tailagent.agent_kinds.kind import AgentKind

ECHO = AgentKind(
    name="echo",
    title="the echo agent (offline)",
    # No modes of its own: it takes Claude Code's names (and ignores them), so a demo
    # or a test meets the same rule as the default agent.
    caller_modes=CLAUDE_CODE_MODES,
)
