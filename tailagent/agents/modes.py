"""Which of an agent's modes a caller who is not admin may choose.

A mode decides whether the agent asks before a dangerous step, so a caller who could
pick any mode could turn off every prompt tailagent relies on. A list of modes known
to go on asking, per agent, is the rule (not a list of modes known to stop): a mode
an agent adds later, or one an agent tailagent does not know advertises at run time,
is refused until someone has looked at it. Admins may choose any mode.

Edits in the workspace count as asking enough: the design lets an agent write files
without a prompt (a turn's changes are shown, kept in its own worktree and can be
undone), and tailagent's own git never runs what a file says. So Claude Code's
`acceptEdits` (its default here) and Gemini's `autoEdit` are on the lists: they write
files without asking, and still ask before any other command. Not on them: Claude
Code's `bypassPermissions`, `dontAsk` (denies unasked) and `auto` (a classifier
approves in the caller's place), Codex's `agent` (the same) and `agent-full-access`,
Gemini's `yolo`.
"""

from __future__ import annotations

# Claude Code's permission modes, through the Agent SDK or claude-agent-acp.
CLAUDE_CODE = ("default", "acceptEdits", "plan")
# codex-acp's modes (2.x): `workspace-write` edits the workspace and asks before leaving
# it or using the network; `read-only` asks before any edit. Not listed: `agent`, its
# default, where an automatic reviewer approves what it deems safe in the caller's place,
# and `agent-full-access`.
CODEX = ("read-only", "workspace-write")
GEMINI = ("default", "autoEdit", "plan")


def mode_refusal(mode: str, allowed: tuple[str, ...]) -> str | None:
    """Why a caller who is not admin may not choose `mode` (None: they may), naming
    the modes they may choose. Names are compared exactly, as agents compare them."""
    if mode in allowed:
        return None
    if not allowed:
        return (
            f"mode {mode!r}: no mode of this agent is known to keep asking before dangerous "
            "steps, so only admins may choose it (the operator may list modes others may "
            "choose in agent.caller_modes)"
        )
    return (
        f"mode {mode!r} is not one in which this agent keeps asking before dangerous steps: "
        f"only admins may choose it; others may choose {', '.join(allowed)}"
    )
