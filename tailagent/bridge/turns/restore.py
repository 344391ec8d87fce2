"""Tasks a previous run of the server left waiting for an answer, taken back.

A prompt outlasts a restart (bridge/answers/waiting.py): at start the executor keeps
each waiting task here, and the answer that arrives for one reloads the agent's session
and gives it the answer as a prompt. Reloading can fail in ways a running turn never
does (the session is gone, the agent cannot load sessions), so it stands apart from
starting a turn.
"""

from __future__ import annotations

from collections.abc import AsyncIterator

from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import Task
from google.protobuf.json_format import MessageToDict

from tailagent.agents.events import AgentEvent, AgentStartError, Notice, Prompting
from tailagent.bridge.answers.claims import Claims
from tailagent.bridge.answers.requester import Requester
from tailagent.bridge.answers.waiting import Waiting, waiting_of
from tailagent.bridge.conversations.sessions import SessionPool
from tailagent.bridge.conversations.workplace import Conversations, TurnRecord
from tailagent.bridge.turns.publish import Publisher
from tailagent.bridge.turns.runtime import Runtimes, TaskRuntime, log
from tailagent.bridge.turns.start import turn_identity
from tailagent.delegation.outbound import DelegatorFactory
from tailagent.delegation.session import DELEGATED, DelegatingSession
from tailagent.workspace.git import GitError


async def _no_events() -> AsyncIterator[AgentEvent]:
    """A restored turn's events until its answer starts the reloaded session's prompt."""
    return
    yield


def _via_of(task: Task) -> str:
    """The node a task was handed here through, as its start kept it (`requestedBy.via`)."""
    metadata = MessageToDict(task.metadata) if task.HasField("metadata") else {}
    asker = metadata.get("requestedBy")
    via = asker.get("via") if isinstance(asker, dict) else None
    return via if isinstance(via, str) else ""


class Restorer:
    def __init__(
        self,
        agent_name: str,
        conversations: Conversations,
        pool: SessionPool,
        claims: Claims,
        runtimes: Runtimes,
        delegators: DelegatorFactory | None = None,
    ) -> None:
        """`delegators`: how a task left waiting on a peer's prompt has its answer
        relayed to the peer (None: its answer goes to the agent, as any other)."""
        self._delegators = delegators
        self._agent_name = agent_name
        self._conversations = conversations
        self._pool = pool
        self._claims = claims
        self._runtimes = runtimes
        # Tasks a previous run left waiting for an answer, taken back at start.
        self._waiting: dict[str, Waiting] = {}
        # The node each of them was handed here through ("" directly), from its metadata:
        # its cost stays "via devbox-1" however its answer reaches this box. (Bounded by
        # the tasks kept at start: one left by a cancel is a name, never a turn.)
        self._via: dict[str, str] = {}

    def keep(self, tasks: list[Task]) -> None:
        """Keeps the tasks a previous run left waiting for an answer (answers/waiting.py)."""
        for task in tasks:
            waiting = waiting_of(task)
            if waiting is not None:
                self._waiting[task.id] = waiting
                self._via[task.id] = _via_of(task)

    def prompt(self, task_id: str) -> Prompting | None:
        waiting = self._waiting.get(task_id)
        return waiting.prompt if waiting is not None else None

    def __contains__(self, task_id: object) -> bool:
        return task_id in self._waiting

    def __len__(self) -> int:
        return len(self._waiting)

    def pop(self, task_id: str) -> Waiting | None:
        return self._waiting.pop(task_id, None)

    async def take_back(
        self, waiting: Waiting, requester: Requester, updater: TaskUpdater
    ) -> TaskRuntime | None:
        """The runtime of a task a previous run left waiting, with the agent's session
        reloaded to take the answer; None (the task failed, saying why) when it cannot be."""
        task_id, context_id = waiting.task_id, waiting.context_id
        publisher = Publisher(task_id, context_id, continuing=waiting.artifacts)
        why = ""
        try:
            directory = await self._conversations.directory(context_id)
            session, resumed = await self._pool.acquire(context_id, task_id, directory)
        except (GitError, AgentStartError) as exc:
            why = str(exc)
        except Exception as exc:
            log.exception("reloading the agent session of context %s", context_id)
            why = str(exc)
        else:
            if not resumed:
                await self._pool.release(context_id, task_id)
                why = f"{self._agent_name} cannot load its earlier session"
        if why:
            self._claims.drop(task_id)
            await publisher.fail(
                updater,
                "The server restarted while this task waited for an answer, and the agent's "
                f"session could not be reloaded to take it ({why}). Send the request again "
                "as a new task.",
                "server_restarted",
            )
            return None
        runtime = TaskRuntime(
            task_id,
            context_id,
            session,
            _no_events(),
            publisher,
            pending=waiting.prompt,
            roles=requester.roles,
            turn=TurnRecord(task_id, context_id, waiting.subject, waiting.requested_by),
            directory=directory,
            restored=True,
            owner=requester.owner,
            via=self._via.pop(task_id, requester.delegated_by),
        )
        await self._relaying(runtime, waiting, requester)
        self._runtimes.add(runtime)
        await publisher.publish(
            updater,
            Notice(
                "The server restarted while this task waited; the agent's session was "
                "reloaded to take the answer."
            ),
        )
        return runtime

    async def _relaying(self, runtime: TaskRuntime, waiting: Waiting, requester: Requester) -> None:
        """Makes a restored task that waits on a peer's prompt relay its answer: a
        prompt of the delegation wrapper's (its request id says so) asked while this
        task's hand-off to a peer, kept in the link store, waited. Its answer then goes
        to the peer's task, signed as who gave it, the task follows the peer's to its
        end, and the reloaded agent is told the outcome (DelegatingSession.resume). Any
        other waiting prompt (also "Hand to devbox-2", asked before a peer task
        existed) is the agent's to be told of, as issue 22's restore does."""
        turn = turn_identity(runtime.task_id, runtime.context_id, requester)
        if (
            self._delegators is None
            or turn is None
            or not waiting.prompt.request_id.startswith(DELEGATED)
        ):
            return
        try:
            if not await self._delegators.links.of_task(runtime.task_id):
                return
        except Exception:
            log.exception("task %s: reading its hand-off to a peer", runtime.task_id)
            return
        session = DelegatingSession(runtime.session, self._delegators, turn)
        runtime.session = session
        runtime.events = session.resume(waiting.prompt)
        runtime.restored = False  # the answer goes to the wrapper, which relays it
