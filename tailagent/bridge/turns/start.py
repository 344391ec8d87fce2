"""A caller's new message started as an agent turn: the prompt and the session for it.

The message becomes the agent's prompt (its attachments files in the task's inbox, its
metadata the turn's mode and model), in the conversation's directory, on a session the
pool gives the caller's share. This changes with what a message may carry and how
sessions are had, not with how a running turn streams or is answered.
"""

from __future__ import annotations

from pathlib import Path

import httpx
from a2a.server.tasks import TaskUpdater
from a2a.types.a2a_pb2 import Message, TaskState
from google.protobuf.json_format import MessageToDict

from tailagent.agents.events import (
    AgentSession,
    AgentStartError,
    Notice,
    PromptData,
    PromptPart,
    PromptText,
    TurnOptions,
)
from tailagent.bridge.answers.requester import Requester
from tailagent.bridge.conversations.sessions import ContextBusy, PoolFull, SessionPool
from tailagent.bridge.conversations.workplace import (
    Conversations,
    TurnRecord,
    signature,
    subject_of,
)
from tailagent.bridge.turns import attachments
from tailagent.bridge.turns.publish import Publisher
from tailagent.bridge.turns.runtime import Runtimes, TaskRuntime, log
from tailagent.config import AttachmentSettings
from tailagent.cost.turns import TurnCosts
from tailagent.delegation.outbound import DelegatorFactory, TurnIdentity
from tailagent.delegation.session import DelegatingSession
from tailagent.sandbox.fences import FenceReport
from tailagent.workspace.conversation_repos import Start
from tailagent.workspace.git import GitError


async def prompt_parts(
    message: Message, inbox: Path, settings: AttachmentSettings
) -> list[PromptPart]:
    """The message as the agent gets it; attachments become files (fetched if need be)."""
    parts: list[PromptPart] = []
    for index, part in enumerate(message.parts, 1):
        name = attachments.safe_name(part.filename, index)
        if part.HasField("text"):
            parts.append(PromptText(part.text))
        elif part.HasField("data"):
            parts.append(PromptData(MessageToDict(part.data)))
        elif part.HasField("raw"):
            parts.append(attachments.file_part(name, part.media_type, part.raw, inbox))
        elif part.HasField("url"):
            data = await attachments.fetch(part.url, name, settings.max_part_bytes)
            parts.append(attachments.file_part(name, part.media_type, data, inbox))
    return parts


def turn_options(message: Message) -> TurnOptions:
    """The mode and model a caller asked for in message metadata (checked by the handler)."""
    meta = MessageToDict(message.metadata) if message.HasField("metadata") else {}
    mode, model = meta.get("mode"), meta.get("model")
    return TurnOptions(
        mode=mode if isinstance(mode, str) and mode else None,
        model=model if isinstance(model, str) and model else None,
    )


def turn_identity(task_id: str, context_id: str, requester: Requester) -> TurnIdentity | None:
    """Whose turn may hand work to peers: a person's, for the work a peer does for it is
    that person's and a chain must name one. A tagged node, a token or a local caller
    gets None (their turns cannot delegate)."""
    caller = requester.caller
    if caller is None or caller.kind != "user":
        return None
    return TurnIdentity(
        task_id=task_id,
        context_id=context_id,
        owner=caller.owner,
        person=caller.login,
        device=requester.answerer.node,  # the person's own device, also through a chain
        chain=caller.chain,
    )


class TurnStarter:
    def __init__(
        self,
        conversations: Conversations,
        pool: SessionPool,
        runtimes: Runtimes,
        costs: TurnCosts,
        workspace: Path,
        attachment_settings: AttachmentSettings,
        fence: FenceReport | None = None,
        delegators: DelegatorFactory | None = None,
    ) -> None:
        """`delegators` gives a person's turns the tools to hand work to other
        tailagents (None: no turn gets them)."""
        self._fence = fence
        self._delegators = delegators
        self._conversations = conversations
        self._pool = pool
        self._runtimes = runtimes
        self._costs = costs
        self._workspace = workspace
        self._attachments = attachment_settings

    async def start(
        self, publisher: Publisher, message: Message, requester: Requester, updater: TaskUpdater
    ) -> TaskRuntime | None:
        """The new turn's runtime, its start published; None (the task failed, saying
        why) when its worktree, agent session or attachments cannot be had."""
        task_id, context_id = publisher.task_id, publisher.context_id
        try:
            self._pool.reserve(context_id, task_id)  # running from now, for a merge's check
        except ContextBusy:  # another turn got in since admission (its id is not named)
            await publisher.fail(updater, str(ContextBusy(context_id, None)))
            return None
        try:
            directory = await self._conversations.directory(context_id)
        except GitError as exc:
            await self._pool.release(context_id, task_id)
            await publisher.fail(updater, f"The conversation's worktree is not usable: {exc}")
            return None
        begun = self._conversations.started(context_id)
        if begun is not None and begun.continued:  # its session stayed on the box gone
            self._pool.start_afresh(context_id)
        options = turn_options(message)
        # Asked before the session is opened: opening it stores the context's session,
        # and the id is this server's minted one no longer.
        new_conversation = context_id in self._pool.minted_contexts
        had = await self._session(publisher, options, directory, requester, updater)
        if had is None:
            await self._pool.release(context_id, task_id)
            return None
        session = self._with_tools(had[0], publisher, requester)
        resumed = had[1]
        try:
            box = attachments.inbox(directory or self._workspace, task_id)
            parts = await prompt_parts(message, box, self._attachments)
        except (attachments.AttachmentRefused, httpx.HTTPError, OSError) as exc:
            await self._pool.release(context_id, task_id)
            await publisher.fail(updater, f"An attachment could not be taken: {exc}")
            return None
        runtime = TaskRuntime(
            task_id,
            context_id,
            session,
            session.prompt(parts, options),
            publisher,
            roles=requester.roles,
            directory=directory,
            owner=requester.owner,
            via=requester.delegated_by,
            conversation_new=new_conversation,
        )
        if self._pool.first_turn(session.session_id):
            runtime.running_rows = False  # and no cost counted before it either
        else:
            runtime.session_cost_before = await self._costs.session_cost(session.session_id)
        self._runtimes.add(runtime)
        await self._announce(runtime, message, requester, resumed, updater, self._fence, begun)
        return runtime

    def _with_tools(
        self, session: AgentSession, publisher: Publisher, requester: Requester
    ) -> AgentSession:
        """The turn's session, with the delegation tools when a person asked for the turn."""
        turn = turn_identity(publisher.task_id, publisher.context_id, requester)
        if self._delegators is None or turn is None:
            return session
        return DelegatingSession(session, self._delegators, turn)

    async def _session(
        self,
        publisher: Publisher,
        options: TurnOptions,
        directory: Path | None,
        requester: Requester,
        updater: TaskUpdater,
    ) -> tuple[AgentSession, bool] | None:
        """An agent session for the turn and whether it was taken up again; None (the
        task failed, saying why) when the agent could not start."""
        task_id, context_id = publisher.task_id, publisher.context_id
        owner = requester.caller
        admin = owner is not None and owner.may("admin")
        try:
            # An admin's turns (the box is theirs) are not counted against a share.
            return await self._pool.acquire(
                context_id, task_id, directory, mode=options.mode, any_mode=admin,
                caller=None if admin or owner is None else owner.owner,
            )  # fmt: skip
        except (AgentStartError, PoolFull) as exc:  # expected (a login, all busy): one line
            log.warning("the agent could not start for context %s: %s", context_id, exc)
            await publisher.fail(updater, f"The agent could not start: {exc}")
            return None
        except Exception as exc:
            log.exception("opening an agent session for context %s", context_id)
            await publisher.fail(updater, f"The agent could not start: {exc}")
            return None

    @staticmethod
    async def _announce(
        runtime: TaskRuntime,
        message: Message,
        requester: Requester,
        resumed: bool,
        updater: TaskUpdater,
        fence: FenceReport | None,
        begun: Start | None,
    ) -> None:
        """Publishes the turn's start, with who asked and how the agent was fenced
        (sandbox mode, network) kept in the task's metadata for every view of it; at a
        conversation's start, from which commit it starts and what of the person's
        checkout is not in it, said at once (workspace/conversation_repos/origin.py)."""
        asker = requester.answerer
        runtime.turn = TurnRecord(
            runtime.task_id,
            runtime.context_id,
            subject_of(message),
            signature(asker.by, asker.node, requester.delegated_by),
        )
        by = {"who": asker.by, "device": asker.node}
        if requester.delegated_by:  # handed here by another box: say which
            by["via"] = requester.delegated_by
        requested: dict[str, object] = {"requestedBy": by}
        if requester.chain:  # echoed where A2A's proposal #2028 places it
            requested["actorChain"] = list(requester.chain)
        if fence:
            requested["sandbox"] = fence.as_json()
        if begun is not None:
            requested["start"] = begun.as_data()
        publisher = runtime.publisher
        await publisher.status(updater, TaskState.TASK_STATE_WORKING, "started", metadata=requested)
        if begun is not None:
            await publisher.publish(updater, Notice(begun.text()))
        if resumed:
            # An ACP session says how it was taken up (session/resume or session/load).
            how = getattr(runtime.session, "reattached_with", None)
            said = f" (with {how})" if how else ""
            await publisher.publish(
                updater, Notice(f"Resumed the agent session of this context{said}.")
            )
