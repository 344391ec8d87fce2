"""A new task's reservation against its person's budget, carried from its admission to
its turn.

Admission reserves what the turn may cost (cost/budgets.py) before a2a-sdk has made the
task, so the reservation rides in the request's call state, which the SDK hands to the
executor with the request. The executor marks it taken as the turn starts; a request
that fails before that gives it back (`withdraw`), and a turn that then finds it given
back does not run: no turn runs unreserved, and no reservation outlives a turn that
never started.
"""

from __future__ import annotations

from a2a.server.context import ServerCallContext

from tailagent.cost.budgets import Spending
from tailagent.cost.reserves import Reservation

KEY = "tailagent.reservation"
# What a turn whose reservation was given back says (its request failed before it ran).
WITHDRAWN = (
    "This task's request ended before its turn started, and what the turn had reserved of "
    "its person's daily budget was given back: send the message again."
)


def keep(context: ServerCallContext, reservation: Reservation | None) -> None:
    """Carries an admitted turn's reservation with its request."""
    if reservation is not None:
        context.state[KEY] = reservation


def held(context: ServerCallContext | None) -> Reservation | None:
    """The request's reservation, if it made one."""
    found = context.state.get(KEY) if context is not None else None
    return found if isinstance(found, Reservation) else None


def take(context: ServerCallContext | None) -> Reservation | None:
    """The reservation for the turn starting now, marked taken: it is the turn's to give
    back from here on."""
    reservation = held(context)
    if reservation is not None:
        reservation.taken = True
    return reservation


async def withdraw(context: ServerCallContext, spending: Spending | None) -> None:
    """Gives back the reservation of a request that failed before its turn took it."""
    reservation = held(context)
    if spending is not None and reservation is not None and not reservation.taken:
        await spending.reserves.release(reservation)
