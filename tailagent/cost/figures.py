"""How a cost is written for people, the same in the server's words and the CLI's, and
which figures are costs at all.

Costs come from agents (a turn's dollars, a session's running total, token counts) and,
with the echo agent, from a caller's prompt. A figure that is not a finite number within
a sane bound is not a cost: it is refused where it enters, so no page, budget or JSON
output ever meets an infinity, a NaN or 5,000 digits. What is already stored is read
through the same bounds (`shown_usd`).
"""

from __future__ import annotations

import math

# The most a single turn may say it cost. A figure above it is a broken or hostile
# report, not a bill: it is refused (and counted on /metrics), never stored.
MAX_TURN_USD = 10_000.0
# The most tokens of one kind a turn may say it used (a long Claude Code turn reads tens
# of millions of cached tokens; a billion is well past any real turn).
MAX_TURN_TOKENS = 1_000_000_000
# The most a session's running total may come to (ACP `usage_update`): a hundred turns at
# the bound.
MAX_SESSION_USD = 100 * MAX_TURN_USD


def dollars(usd: float) -> str:
    """Cents, and more digits below a cent (an echo turn, a short model call)."""
    return f"${usd:.2f}" if usd >= 0.01 or usd == 0 else f"${usd:.4f}"


def usd_figure(value: object, bound: float = MAX_TURN_USD) -> float | None:
    """`value` as dollars when it is a finite number from 0 to `bound`; None otherwise
    (a string, a bool, NaN, an infinity, a negative or huge figure)."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        usd = float(value)
    except OverflowError:  # an int of 5,000 digits
        return None
    return usd if math.isfinite(usd) and 0 <= usd <= bound else None


def token_figure(value: object) -> int | None:
    """`value` as a token count when it is a whole, finite number from 0 to
    MAX_TURN_TOKENS; None otherwise."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    if isinstance(value, float) and not (math.isfinite(value) and value.is_integer()):
        return None
    count = int(value)
    return count if 0 <= count <= MAX_TURN_TOKENS else None


def shown_usd(cost: object) -> float:
    """The dollars of a cost as a task's metadata keeps it (`{"usd": ...}`), for a page or
    a line: whatever was stored, a finite number (0 when it is none)."""
    usd = cost.get("usd") if isinstance(cost, dict) else None
    return usd_figure(usd, bound=math.inf) or 0.0
