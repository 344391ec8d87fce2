"""What a task keeps while its turn is alive on this server, and the register of them.

Starting a turn, applying an answer, pumping the agent's events, taking a task back
after a restart and cancelling all reach the same live turns, and any of them may end
one. Ending a turn gives its agent session back, drops the claim on its prompt and
counts how long it ran: kept here, in one place, so no part can end a turn halfway.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from pathlib import Path

from tailagent.agents.events import AgentEvent, AgentSession, Prompting
from tailagent.bridge.answers.claims import Claims
from tailagent.bridge.conversations.sessions import SessionPool
from tailagent.bridge.conversations.workplace import TurnRecord
from tailagent.bridge.turns.publish import Publisher
from tailagent.cost.ledger import Cost
from tailagent.cost.reserves import Reservation
from tailagent.output.metrics import TURN_SECONDS

# The executor's parts log as the executor, as they did as one class: log lines and an
# operator's filters on them stay as they were.
log = logging.getLogger(__name__)

# How long an agent told to stop (loop protection, a budget) gets to wind down.
DRAIN_TIMEOUT = 10.0


@dataclass
class TaskRuntime:
    """What one task keeps while its turn is alive on this server. Its cost fields are
    what cost/turns.py's `LiveTurn` asks of a turn: the books count it as one."""

    task_id: str
    context_id: str
    session: AgentSession
    events: AsyncIterator[AgentEvent]
    publisher: Publisher
    pending: Prompting | None = None
    denied: set[str] = field(default_factory=set)
    denials: int = 0
    cancelled: bool = False
    # Set when the server stops: the turn's stream then ends with this failure.
    stop_reason: str | None = None
    pump: asyncio.Task[None] | None = None  # while a request streams the turn
    started: float = field(default_factory=time.monotonic)
    roles: frozenset[str] = frozenset()  # of the caller whose task this is, for rules
    turn: TurnRecord | None = None  # what the turn's commit will say (worktree isolation)
    directory: Path | None = None  # the conversation's worktree; None: the workspace
    # Taken back after a restart: the agent's reloaded session gets the answer as a
    # prompt (`resume_text`, answers/waiting.py), not as the reply to a request it no longer has.
    restored: bool = False
    owner: str = "unknown"  # whose work it is: the person its cost is counted to
    via: str = ""  # the node it was handed here through (its usage row's "via devbox-1")
    cost: Cost = field(default_factory=Cost)  # the task's turns so far
    # The agent session's running cost (ACP `usage_update`) when this turn started, and
    # now: the turn's share is the difference.
    session_cost_before: float | None = None
    session_cost: float | None = None
    # Running-turn rows of its session may be in the store (an earlier turn's, maybe
    # of a server since killed, or its own): its count clears them. False for a
    # session opened new for it, until it reports a running cost.
    running_rows: bool = True
    # Its conversation began with it (an id this server minted for it): no cost of the
    # conversation can be counted before its own, so its first count needs no sum.
    conversation_new: bool = False
    # Whether this turn's events may reach a stream. Not for the first turn of a task
    # whose request shows it to nobody before it settles (store/tasks.py's
    # UNSEEN_UNTIL_SETTLED): the close of its answer's stream is left out then, being
    # an event that changes nothing in the task.
    watched: bool = True
    settled: bool = False  # its cost counted though it ended without a result
    cost_refused: bool = False  # a figure of its agent's was refused (logged once)
    # What it holds of its person's budget from its admission until its cost is counted.
    reservation: Reservation | None = None


class Runtimes:
    """The turns alive on this server, by task id."""

    def __init__(self, pool: SessionPool, claims: Claims) -> None:
        self._pool = pool
        self._claims = claims
        self._live: dict[str, TaskRuntime] = {}

    def get(self, task_id: str) -> TaskRuntime | None:
        return self._live.get(task_id)

    def add(self, runtime: TaskRuntime) -> None:
        self._live[runtime.task_id] = runtime

    def all(self) -> list[TaskRuntime]:
        return list(self._live.values())

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._live

    def __len__(self) -> int:
        return len(self._live)

    def parked_on(self, task_id: str) -> bool:
        """Whether the task's turn lives here and waits for an answer."""
        runtime = self._live.get(task_id)
        return runtime is not None and runtime.pending is not None

    def parked(self) -> int:
        """Turns waiting for an answer that no request is streaming."""
        return sum(1 for r in self._live.values() if r.pending and r.pump is None)

    async def end(self, runtime: TaskRuntime) -> None:
        self._claims.drop(runtime.task_id)
        if self._live.pop(runtime.task_id, None) is not None:
            TURN_SECONDS.observe(time.monotonic() - runtime.started)
        await self._pool.release(runtime.context_id, runtime.task_id)
