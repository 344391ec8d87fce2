"""The agents tailagent knows by name, one plain description each (kind.py says what
one holds): every room that treats agents differently reads them here, none keeps a copy."""

from tailagent.agent_kinds import claude, codex, copilot, echo, gemini, opencode, qwen
from tailagent.agent_kinds.kind import AgentKind

# In the order `--agent` and the config file's errors list them.
_LISTED = (echo.ECHO, claude.CLAUDE, claude.CLAUDE_ACP, codex.CODEX, gemini.GEMINI,
           opencode.OPENCODE, copilot.COPILOT, qwen.QWEN)  # fmt: skip
KINDS: dict[str, AgentKind] = {kind.name: kind for kind in _LISTED}
