"""How a cost is written for people, the same in the server's words and the CLI's."""

from __future__ import annotations


def dollars(usd: float) -> str:
    """Cents, and more digits below a cent (an echo turn, a short model call)."""
    return f"${usd:.2f}" if usd >= 0.01 or usd == 0 else f"${usd:.4f}"
