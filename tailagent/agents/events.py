"""The one event vocabulary every backend emits, and the answers it accepts.

Backends translate their own protocol (ACP updates, Claude SDK messages, the echo
script) into these events; the bridge translates them into A2A. Keeping the set
small and closed is what lets one mapping serve every agent.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, Protocol

JSONDict = dict[str, Any]


@dataclass(frozen=True, slots=True)
class Text:
    """A chunk of the answer, to be shown as soon as it arrives."""

    text: str


@dataclass(frozen=True, slots=True)
class Thought:
    text: str


PlanStatus = Literal["pending", "in_progress", "completed"]


@dataclass(frozen=True, slots=True)
class PlanEntry:
    content: str
    status: PlanStatus = "pending"


@dataclass(frozen=True, slots=True)
class Plan:
    """The whole plan as it stands now; each Plan replaces the previous one."""

    entries: tuple[PlanEntry, ...]


@dataclass(frozen=True, slots=True)
class ToolStarted:
    id: str
    name: str
    title: str
    input: JSONDict = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class ToolFinished:
    id: str
    status: Literal["completed", "failed"]
    output: str = ""


@dataclass(frozen=True, slots=True)
class FileChanged:
    path: str
    diff: str


@dataclass(frozen=True, slots=True)
class Notice:
    """Something the caller should know that is not part of the answer."""

    text: str


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """What the agent says about its session (its mode, its commands): kept in the
    task's metadata rather than shown as progress."""

    mode: str | None = None
    commands: tuple[str, ...] | None = None


@dataclass(frozen=True, slots=True)
class PermissionOption:
    id: str
    name: str
    kind: Literal["allow_once", "allow_always", "reject_once", "reject_always"]

    @property
    def allows(self) -> bool:
        return self.kind.startswith("allow")


@dataclass(frozen=True, slots=True)
class PermissionAsked:
    """The agent waits, inside its turn, until `AgentSession.answer` is called."""

    request_id: str
    tool: str
    input: JSONDict
    title: str
    reason: str = ""
    options: tuple[PermissionOption, ...] = ()
    # The peer whose agent asked, for a prompt relayed from another box's task ("" for
    # this box's own agent): that box's rules already had their say, so this box's
    # rules never decide it; only the person does.
    relayed_from: str = ""
    # The person the peer asks, for a relayed prompt: the peer's task is theirs and their
    # answer goes there signed as theirs, so only they may answer it here.
    relayed_for: str = ""


@dataclass(frozen=True, slots=True)
class QuestionOption:
    label: str
    description: str = ""


@dataclass(frozen=True, slots=True)
class Question:
    question: str
    header: str = ""
    options: tuple[QuestionOption, ...] = ()
    multi_select: bool = False


@dataclass(frozen=True, slots=True)
class QuestionAsked:
    request_id: str
    questions: tuple[Question, ...]
    # As PermissionAsked's: the peer that asks and the person it asks, for a relayed one.
    relayed_from: str = ""
    relayed_for: str = ""


@dataclass(frozen=True, slots=True)
class UsageUpdated:
    """How much of its context the session uses and what it has cost, as the agent
    reports it (ACP `usage_update`). `used` is the tokens in context now, `size` the
    context window, both in tokens. `cost_usd` is the session's running total so far,
    not this turn's share (ACP's schema: "Total cumulative cost for session"); it is
    set only when the agent reports the cost in US dollars. A consumer that wants a
    turn's cost takes the difference between two of them."""

    used: int | None = None
    size: int | None = None
    cost_usd: float | None = None


@dataclass(frozen=True, slots=True)
class TurnDone:
    stop_reason: str = "end_turn"
    usage: JSONDict = field(default_factory=dict)
    cost: float | None = None


def camel_keys(values: JSONDict) -> JSONDict:
    """Usage figures as A2A wants its JSON keys (camelCase, never snake_case)."""

    def camel(key: str) -> str:
        head, *rest = key.split("_")
        return head + "".join(word.title() for word in rest)

    return {camel(k): v for k, v in values.items()}


@dataclass(frozen=True, slots=True)
class TurnFailed:
    message: str


AgentEvent = (
    Text
    | Thought
    | Plan
    | ToolStarted
    | ToolFinished
    | FileChanged
    | Notice
    | SessionInfo
    | UsageUpdated
    | PermissionAsked
    | QuestionAsked
    | TurnDone
    | TurnFailed
)
Prompting = PermissionAsked | QuestionAsked


def with_ready(first: AgentEvent, ready: asyncio.Queue[AgentEvent]) -> list[AgentEvent]:
    """`first` and the events already queued behind it, with runs of text (or of
    thought) joined into one event. Each event costs a task update and a frame on
    every open stream; an agent that streams faster than that is drained gets its
    chunks in fewer, larger events, and one that is drained in time loses nothing
    to waiting."""
    events = [first]
    while not ready.empty():
        event, last = ready.get_nowait(), events[-1]
        if isinstance(event, Text) and isinstance(last, Text):
            events[-1] = Text(last.text + event.text)
        elif isinstance(event, Thought) and isinstance(last, Thought):
            events[-1] = Thought(last.text + event.text)
        else:
            events.append(event)
    return events


@dataclass(frozen=True, slots=True)
class PermissionDecision:
    """What the caller decided. `message` is the text an agent that reads words gets;
    `reason` the caller's own words, for an agent that shows them to a person;
    `interrupt` asks the agent to end its turn after this denial. `answerer` is the
    login of the person who decided ("" for a rule or tailagent itself): an answer
    relayed to a peer box is signed as theirs."""

    allow: bool
    option_id: str | None = None
    message: str = ""
    interrupt: bool = False
    reason: str = ""
    answerer: str = ""


@dataclass(frozen=True, slots=True)
class QuestionAnswers:
    """The labels chosen, by question; `answerer` as PermissionDecision's."""

    answers: dict[str, str]
    answerer: str = ""


Answer = PermissionDecision | QuestionAnswers


@dataclass(frozen=True, slots=True)
class PromptText:
    text: str


@dataclass(frozen=True, slots=True)
class PromptData:
    data: Any


@dataclass(frozen=True, slots=True)
class PromptFile:
    """An attached file. A backend embeds it where its agent accepts that, or else
    saves it under `inbox` (in the workspace) and points the agent at the path."""

    name: str
    media_type: str
    data: bytes
    inbox: Path

    def save(self) -> Path:
        self.inbox.mkdir(parents=True, exist_ok=True)
        path = self.inbox / self.name
        path.write_bytes(self.data)
        return path

    def reference(self, path: Path) -> str:
        return f"[attached file {self.name} ({self.media_type}, {len(self.data)} bytes): {path}]"


PromptPart = PromptText | PromptData | PromptFile


@dataclass(frozen=True, slots=True)
class Skill:
    """How the card describes what the configured agent can do."""

    id: str
    name: str
    description: str
    tags: tuple[str, ...] = ()
    examples: tuple[str, ...] = ()


Progress = Callable[[str], Awaitable[None]]


class TurnTools(Protocol):
    """The tools tailagent itself gives an agent for one turn (through an MCP server
    of its own, or directly to the echo agent): the tailnet's other tailagents, and
    handing one of them a sub-task on behalf of the person whose turn it is."""

    async def list_peers(self) -> list[JSONDict]:
        """The tailagents this node may hand work to: name, url, agent, skills."""
        ...

    async def delegate(
        self,
        peer: str,
        message: str,
        conversation: str | None = None,
        progress: Progress | None = None,
    ) -> str:
        """Sends `message` to `peer` as the person's sub-task and returns its answer;
        `progress` gets a line for each step the peer reports. Raises
        DelegationFailed with a reason an agent can read."""
        ...


class DelegationFailed(Exception):
    """A hand-off did not complete; str() says why, for the agent to read."""


class PromptWithdrawn(Exception):
    """A peer's question relayed here was answered or closed on the peer: nobody here
    answers it now, and what it asked is not sent."""


# What an agent's tool call is told when no person's turn is there to act for.
NO_PERSON_TURN = (
    "no person's turn is running: tailagent's tools hand work on only for a person "
    "whom whois named (not for a token, this box's local token or a tagged node), and "
    "only during their turn"
)


@dataclass(frozen=True, slots=True)
class TurnOptions:
    """What the caller asked for this turn, in message metadata `mode` / `model`, and
    the tools tailagent offers the agent for it (None: none)."""

    mode: str | None = None
    model: str | None = None
    tools: TurnTools | None = None


class AgentSession(Protocol):
    """One conversation with an agent; lives as long as its A2A context."""

    @property
    def session_id(self) -> str: ...

    @property
    def alive(self) -> bool:
        """False once the agent behind it is gone; the pool then opens a new one."""
        ...

    def prompt(
        self, parts: list[PromptPart], options: TurnOptions | None = None
    ) -> AsyncIterator[AgentEvent]:
        """Runs one turn. The iterator ends after TurnDone or TurnFailed."""
        ...

    async def answer(self, request_id: str, answer: Answer) -> None: ...

    async def cancel(self) -> None:
        """Ends the running turn as soon as the agent allows; it then yields TurnDone."""
        ...

    async def close(self) -> None: ...


class AgentBackend(Protocol):
    name: str
    description: str
    skills: tuple[Skill, ...]
    # Sessions alive at once, busy or idle (None: no cap but the idle bound).
    max_sessions: int | None
    # The modes a caller who is not admin may choose (agent_kinds/ says which keep asking).
    caller_modes: tuple[str, ...]

    async def start(self) -> None:
        """Checks the agent can start at all, before the server takes requests."""
        ...

    async def open_session(
        self, resume_id: str | None = None, cwd: Path | None = None
    ) -> AgentSession:
        """A new session, or the one `resume_id` names when the agent can load it; it
        works in `cwd` (a conversation's own worktree) or, None, in the workspace."""
        ...

    async def aclose(self) -> None: ...


class AgentStartError(Exception):
    """The agent did not start; str() is the one line the operator sees."""
