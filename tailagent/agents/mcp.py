"""What agents' modes mean for the prompts tailagent relies on."""

from __future__ import annotations


def is_unguarded_mode(mode: str) -> bool:
    """A mode in which the agent stops asking before dangerous steps."""
    lowered = mode.lower()
    return "bypass" in lowered or lowered in ("yolo", "dangerously-skip-permissions")
