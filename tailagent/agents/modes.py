"""Why a caller who is not admin may not choose one of an agent's modes.

A mode decides whether the agent asks before a dangerous step. Which modes a caller may
choose is each agent's own list (`caller_modes` in its description, agent_kinds/, with
why each mode is on it or not); the operator may name others in `agent.caller_modes`.
Admins may choose any mode.
"""

from __future__ import annotations


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
