"""One ACP session on its own agent process, seen as an AgentSession.

The agent talks back through the host side of ACP (`HostClient`): its updates,
its permission requests, its file and terminal calls. Each becomes an event of
the vocabulary on the running turn's queue; a permission request waits inside
the agent's call until the bridge answers it.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import difflib
import json
import logging
import shlex
import uuid
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any, Protocol

import acp
from acp import RequestError
from acp.schema import (
    AcceptElicitationResponse,
    AgentMessageChunk,
    AgentPlanUpdate,
    AgentThoughtChunk,
    AllowedOutcome,
    AvailableCommandsUpdate,
    BlobResourceContents,
    CancelElicitationResponse,
    ConfigOptionUpdate,
    CreateTerminalResponse,
    CurrentModeUpdate,
    DeclineElicitationResponse,
    DeniedOutcome,
    ElicitationFormRequestMode,
    ElicitationFormSessionMode,
    EmbeddedResourceContentBlock,
    FileEditToolCallContent,
    ImageContentBlock,
    KillTerminalResponse,
    ReadTextFileResponse,
    ReleaseTerminalResponse,
    RequestPermissionResponse,
    SessionConfigOptionSelect,
    SessionConfigSelectGroup,
    TerminalExitStatus,
    TerminalOutputResponse,
    TextContentBlock,
    TextResourceContents,
    ToolCallProgress,
    ToolCallStart,
    UsageUpdate,
    WaitForTerminalExitResponse,
    WriteTextFileResponse,
)

from tailagent.agents.acp.elicitation import content_of, form_fields
from tailagent.agents.acp.process import AgentProcess
from tailagent.agents.acp.terminals import TerminalLimit, Terminals
from tailagent.agents.acp.textfiles import FileRefused, read_text, write_text
from tailagent.agents.acp.workspace import OutsideWorkspace, confine
from tailagent.agents.events import (
    AgentEvent,
    AgentStartError,
    Answer,
    FileChanged,
    Notice,
    PermissionAsked,
    PermissionDecision,
    PermissionOption,
    Plan,
    PlanEntry,
    PromptData,
    PromptFile,
    PromptPart,
    PromptText,
    QuestionAnswers,
    QuestionAsked,
    SessionInfo,
    Text,
    Thought,
    ToolFinished,
    ToolStarted,
    TurnDone,
    TurnFailed,
    TurnOptions,
    TurnTools,
    UsageUpdated,
    camel_keys,
    with_ready,
)

log = logging.getLogger("tailagent.agents")

AUTH_REQUIRED = -32000
TERMINAL_OPTIONS = (
    PermissionOption("allow_once", "Allow", "allow_once"),
    PermissionOption("reject_once", "Deny", "reject_once"),
)


class ToolChannel(Protocol):
    """A session's door to tailagent's own tools (delegation/tool_socket.py): the MCP
    server its agent starts, and the turn whose tools that server reaches."""

    command: list[str]  # how the agent starts the MCP server (a stdio one)

    def serve(self, tools: TurnTools | None) -> None:
        """The running turn's tools; None between turns (a call is then refused)."""
        ...

    async def close(self) -> None: ...


class ToolChannels(Protocol):
    """Where each conversation's ToolChannel lives: `folder`, bound into its fence
    before its agent starts; `open`, the channel of a session in `directory`, its
    command naming the folder where the agent sees it (`inside`, None: where it is)."""

    def folder(self, directory: Path) -> Path: ...

    async def open(self, directory: Path, inside: Path | None = None) -> ToolChannel: ...


class AgentNeedsLogin(AgentStartError):
    """The agent wants credentials it does not have; str() says what to do on the server.
    An AgentStartError: an expected refusal, logged as one line, not a fault of ours."""


def _text_of(content: Any) -> str:
    return content.text if isinstance(content, TextContentBlock) else ""


def _tool_output(items: list[Any] | None) -> str:
    return "\n".join(_text_of(getattr(item, "content", None)) for item in items or []).strip()


def _select_values(option: SessionConfigOptionSelect) -> list[tuple[str, str]]:
    """A select option's (value, name) pairs, its groups flattened."""
    pairs: list[tuple[str, str]] = []
    for item in option.options:
        inner = item.options if isinstance(item, SessionConfigSelectGroup) else [item]
        pairs.extend((o.value, o.name) for o in inner)
    return pairs


def _usage(update: UsageUpdate) -> UsageUpdated:
    """A cost in another currency is not converted: it is left out."""
    cost = update.cost
    dollars = cost.amount if cost is not None and cost.currency.upper() == "USD" else None
    return UsageUpdated(used=update.used, size=update.size, cost_usd=dollars)


class AcpSession:
    def __init__(
        self,
        process: AgentProcess,
        session_id: str,
        workspace: Path,
        *,
        login_hint: str,
        cancel_timeout: float,
        terminals: Terminals,
        tools: ToolChannel | None = None,
    ) -> None:
        self.process = process
        self.tools = tools
        self._session_id = session_id
        self.workspace = workspace
        self._login_hint = login_hint
        self._cancel_timeout = cancel_timeout
        self.terminals = terminals
        self._queue: asyncio.Queue[AgentEvent] | None = None
        self._answers: dict[str, asyncio.Future[Answer]] = {}
        self._prompt_task: asyncio.Task[Any] | None = None
        self._waiting: list[AgentEvent] = []  # said between turns: shown at the next one
        # How an earlier session was taken up again ("session/resume", "session/load"),
        # or None: a new session.
        self.reattached_with: str | None = None
        # The session's config options (ACP's stable way to choose a model), as the
        # agent last listed them.
        self.config_options: list[Any] = []
        process.host.bind(self)

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def alive(self) -> bool:
        return self.process.alive

    def note(self, event: AgentEvent) -> None:
        """An event from the agent: to the running turn, or kept for the next one."""
        if self._queue is not None:
            self._queue.put_nowait(event)
        elif isinstance(event, SessionInfo | Notice | UsageUpdated):
            self._waiting.append(event)

    # -- the turn ---------------------------------------------------------------------------

    def _blocks(self, parts: list[PromptPart]) -> list[Any]:
        blocks: list[Any] = []
        for part in parts:
            if isinstance(part, PromptText):
                blocks.append(acp.text_block(part.text))
            elif isinstance(part, PromptFile):
                blocks.append(self._file_block(part))
            elif isinstance(part, PromptData):
                blocks.append(
                    EmbeddedResourceContentBlock(
                        type="resource",
                        resource=TextResourceContents(
                            uri="data:application/json",
                            mime_type="application/json",
                            text=json.dumps(part.data, ensure_ascii=False),
                        ),
                    )
                )
        return blocks

    def _file_block(self, part: PromptFile) -> Any:
        """Embedded where the agent accepts it (its promptCapabilities), else a path."""
        caps = self.process.info.agent_capabilities if self.process.info else None
        accepts = caps.prompt_capabilities if caps else None
        data = base64.b64encode(part.data).decode()
        if part.media_type.startswith("image/") and accepts and accepts.image:
            return ImageContentBlock(type="image", data=data, mime_type=part.media_type)
        if accepts and accepts.embedded_context:
            uri = f"attachment:///{part.name}"
            if part.media_type.startswith("text/"):
                text = part.data.decode(errors="replace")
                resource: Any = TextResourceContents(uri=uri, mime_type=part.media_type, text=text)
            else:
                resource = BlobResourceContents(uri=uri, mime_type=part.media_type, blob=data)
            return EmbeddedResourceContentBlock(type="resource", resource=resource)
        return acp.text_block(part.reference(part.save()))

    async def prompt(
        self, parts: list[PromptPart], options: TurnOptions | None = None
    ) -> AsyncIterator[AgentEvent]:
        connection = self.process.connection
        assert connection is not None and self.process.exited is not None
        self.process.thaw()  # frozen since the last turn ended: it runs before it is written to
        if options is not None and options.mode:
            try:
                await connection.set_session_mode(session_id=self._session_id, mode_id=options.mode)
            except Exception as exc:
                yield await self._idle(
                    TurnFailed(f"The agent could not switch to mode {options.mode!r}: {exc}")
                )
                return
        if options is not None and options.model:
            chosen = await self._choose_model(options.model)
            if isinstance(chosen, TurnFailed):
                yield await self._idle(chosen)
                return
            if chosen is not None:
                self._waiting.append(chosen)
        for waiting in self._waiting:
            yield waiting
        self._waiting.clear()
        queue: asyncio.Queue[AgentEvent] = asyncio.Queue()
        self._queue = queue
        if self.tools is not None:
            self.tools.serve(options.tools if options is not None else None)
        self._prompt_task = asyncio.ensure_future(
            connection.prompt(session_id=self._session_id, prompt=self._blocks(parts))
        )
        prompt_task, exited = self._prompt_task, self.process.exited
        getter: asyncio.Future[AgentEvent] | None = None
        try:
            while True:
                getter = asyncio.ensure_future(queue.get())
                await asyncio.wait(
                    {getter, prompt_task, exited}, return_when=asyncio.FIRST_COMPLETED
                )
                if getter.done():
                    for event in with_ready(getter.result(), queue):
                        yield event
                    continue
                getter.cancel()
                while not queue.empty():
                    yield queue.get_nowait()
                if prompt_task.done() and prompt_task.exception() is not None:
                    # A closed pipe usually means the process is on its way out: let it
                    # finish dying, so the failure says so with its last words.
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(asyncio.shield(exited), timeout=1.0)
                await self.process.settle_stderr()
                outcome = self._outcome(prompt_task)
                if prompt_task.done():  # no prompt in flight: the agent is idle
                    outcome = await self._idle(outcome)
                yield outcome
                return
        finally:
            if getter is not None:
                getter.cancel()  # the turn's reader left while it waited: no get outlives it
            self._queue = None
            if self.tools is not None:
                self.tools.serve(None)
            await self.terminals.end_turn()

    async def _idle(self, event: AgentEvent) -> AgentEvent:
        """`event`, once the turn's terminals are gone and the agent's fence is frozen:
        whoever reads the turn's end (the end-of-turn checks, the commit) reads a
        directory nothing of the agent changes until the next turn thaws it."""
        await self.terminals.end_turn()
        await self.process.freeze()
        return event

    async def _choose_model(self, model: str) -> TurnFailed | Notice | None:
        """Sets the session's config option of category `model` (ACP's stable model
        choice) to `model`, a value's id or its name. An agent with no such option keeps
        its own model, and the turn goes on saying so; one without that model fails the
        turn, naming those it has."""
        option = next(
            (
                o
                for o in self.config_options
                if isinstance(o, SessionConfigOptionSelect) and o.category == "model"
            ),
            None,
        )
        if option is None:
            return Notice(f"The agent offers no choice of model: it keeps its own, not {model!r}.")
        values = _select_values(option)
        value = next((v for v, name in values if model in (v, name)), None)
        if value is None:
            offered = ", ".join(v for v, _ in values)
            return TurnFailed(f"The agent has no model {model!r}; it offers: {offered}.")
        if value == option.current_value:
            return None
        connection = self.process.connection
        assert connection is not None
        try:
            response = await connection.set_config_option(
                config_id=option.id, session_id=self._session_id, value=value
            )
        except Exception as exc:
            return TurnFailed(f"The agent could not switch to model {model!r}: {exc}")
        self.config_options = list(response.config_options or self.config_options)
        return None

    def _outcome(self, prompt_task: asyncio.Task[Any]) -> AgentEvent:
        if not prompt_task.done():
            return TurnFailed(
                f"The agent process died during the turn: {self.process.describe_exit()}"
            )
        error = prompt_task.exception()
        if error is None:
            response = prompt_task.result()
            usage = response.usage.model_dump(exclude_none=True) if response.usage else {}
            return TurnDone(stop_reason=response.stop_reason, usage=camel_keys(usage))
        if isinstance(error, RequestError) and error.code == AUTH_REQUIRED:
            return TurnFailed(f"The agent needs a login on the server: {self._login_hint}.")
        if not self.process.alive:
            return TurnFailed(
                f"The agent process died during the turn: {self.process.describe_exit()}"
            )
        tail = self.process.stderr_tail()
        return TurnFailed(f"The agent failed the turn: {error}" + (f"\n{tail}" if tail else ""))

    async def answer(self, request_id: str, answer: Answer) -> None:
        future = self._answers.get(request_id)
        if future is None or future.done():
            raise KeyError(f"no pending request {request_id}")
        self.process.thaw()  # it runs again before its request is answered
        future.set_result(answer)

    async def _wait(self, event: PermissionAsked | QuestionAsked) -> Answer:
        """Puts a prompt to the caller and waits for the bridge's answer. Meanwhile
        the agent's fence is frozen: the agent waits on this answer anyway, and a turn
        parked on a person may wait hours, with no threads of the agent's working beside
        the question. `answer` and `cancel` thaw it before anything reaches the agent (a
        rule's answer too, which may come while the freeze is still in its passes)."""
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._answers[event.request_id] = future
        try:
            self.note(event)
            await self.process.freeze()
            return await future
        finally:
            self._answers.pop(event.request_id, None)

    async def question(self, event: QuestionAsked) -> QuestionAnswers | None:
        """The caller's answers; None when the turn was canceled instead."""
        answer = await self._wait(event)
        return answer if isinstance(answer, QuestionAnswers) else None

    async def ask(self, event: PermissionAsked) -> PermissionDecision:
        """Puts a permission prompt to the caller and waits for the bridge's answer."""
        answer = await self._wait(event)
        if not isinstance(answer, PermissionDecision):
            return PermissionDecision(False, message="not a permission answer")
        if answer.interrupt:
            asyncio.get_running_loop().call_soon(lambda: asyncio.ensure_future(self._send_cancel()))
        return answer

    async def _send_cancel(self) -> None:
        connection = self.process.connection
        if connection is not None and self.process.alive:
            with contextlib.suppress(Exception):
                await connection.cancel(session_id=self._session_id)

    async def cancel(self) -> None:
        """session/cancel, a bounded wait, then the process is killed."""
        task = self._prompt_task
        if self.process.freezer.frozen and (task is None or task.done()):
            return  # frozen between turns: no prompt to cancel, nothing to write to it
        self.process.thaw()  # parked on a question: frozen, and it must read the cancel
        for future in self._answers.values():
            if not future.done():
                future.set_result(PermissionDecision(False, message="the task was canceled"))
        await self._send_cancel()
        if task is None or task.done():
            return
        try:
            await asyncio.wait_for(asyncio.shield(task), timeout=self._cancel_timeout)
        except TimeoutError:
            log.warning("agent %s ignored session/cancel; stopping it", self.process.pid)
            await self.process.stop(grace=1.0)
        except Exception:
            pass

    async def close(self) -> None:
        """session/close where the agent offers it (so it frees what the session holds
        before its process goes), bounded by agent.cancel_timeout; then the process stops."""
        self.process.thaw()  # frozen between turns: it must read session/close and stdin's end
        await self.terminals.end_turn()
        connection = self.process.connection
        if connection is not None and self.process.alive and self.process.supports_close:
            try:
                await self.process.bounded(
                    connection.close_session(session_id=self._session_id),
                    acp.AGENT_METHODS["session_close"],
                    self._session_id,
                    self._cancel_timeout,
                )
                log.info("agent %s: closed session %s", self.process.pid, self._session_id)
            except Exception as exc:
                log.warning(
                    "agent %s: session/close of %s failed: %s", self.process.pid,
                    self._session_id, exc,
                )  # fmt: skip
        await self.process.stop(grace=self._cancel_timeout)
        if self.tools is not None:
            await self.tools.close()


class HostClient:
    """The host side of ACP for one agent process: tailagent as the agent's editor."""

    def __init__(self, process: AgentProcess, workspace: Path, max_file_bytes: int) -> None:
        self.process = process
        self.workspace = workspace
        self.max_file_bytes = max_file_bytes  # agent.max_file_bytes: a read's or write's cap
        self.session: AcpSession | None = None
        # Updates an agent sends while session/new is still answering, before the
        # session exists on our side.
        self._early: list[tuple[str, Any]] = []

    def on_connect(self, conn: Any) -> None:
        return None

    def bind(self, session: AcpSession) -> None:
        self.session = session
        early, self._early = self._early, []
        for session_id, update in early:
            if session_id == session.session_id:
                self._route(session, update)

    def _session(self, session_id: str) -> AcpSession:
        if self.session is None or self.session.session_id != session_id:
            raise RequestError.invalid_params(
                {"sessionId": session_id, "reason": "unknown session"}
            )
        return self.session

    def _diff(self, item: FileEditToolCallContent) -> FileChanged:
        try:
            shown = str(confine(self.workspace, item.path).relative_to(self.workspace.resolve()))
        except (OutsideWorkspace, ValueError):
            shown = item.path
        old = (item.old_text or "").splitlines(keepends=True)
        new = item.new_text.splitlines(keepends=True)
        diff = "".join(difflib.unified_diff(old, new, f"a/{shown}", f"b/{shown}"))
        return FileChanged(shown, diff)

    async def session_update(self, session_id: str, update: Any, **kwargs: Any) -> None:
        if self.session is None or self.session.session_id != session_id:
            if len(self._early) < 100:
                self._early.append((session_id, update))
            return
        self._route(self.session, update)

    def _route(self, session: AcpSession, update: Any) -> None:
        note = session.note
        if isinstance(update, AgentMessageChunk):
            if text := _text_of(update.content):
                note(Text(text))
        elif isinstance(update, AgentThoughtChunk):
            if text := _text_of(update.content):
                note(Thought(text))
        elif isinstance(update, AgentPlanUpdate):
            note(Plan(tuple(PlanEntry(e.content, e.status) for e in update.entries)))
        elif isinstance(update, ToolCallStart | ToolCallProgress):
            self._tool(update, note)
        elif isinstance(update, CurrentModeUpdate):
            note(SessionInfo(mode=update.current_mode_id))
        elif isinstance(update, AvailableCommandsUpdate):
            note(SessionInfo(commands=tuple(c.name for c in update.available_commands)))
        elif isinstance(update, UsageUpdate):
            note(_usage(update))
        elif isinstance(update, ConfigOptionUpdate):
            session.config_options = list(update.config_options)

    def _tool(self, update: ToolCallStart | ToolCallProgress, note: Any) -> None:
        if isinstance(update, ToolCallStart):
            note(
                ToolStarted(
                    update.tool_call_id,
                    update.kind or "tool",
                    update.title,
                    update.raw_input if isinstance(update.raw_input, dict) else {},
                )
            )
        for item in update.content or []:
            if isinstance(item, FileEditToolCallContent):
                note(self._diff(item))
        if update.status in ("completed", "failed"):
            note(ToolFinished(update.tool_call_id, update.status, _tool_output(update.content)))

    async def request_permission(
        self, session_id: str, tool_call: Any, options: list[Any], **kwargs: Any
    ) -> RequestPermissionResponse:
        session = self._session(session_id)
        event = PermissionAsked(
            request_id=uuid.uuid4().hex,
            tool=tool_call.kind or "tool",
            input=tool_call.raw_input if isinstance(tool_call.raw_input, dict) else {},
            title=tool_call.title or tool_call.kind or "use a tool",
            reason="",
            options=tuple(PermissionOption(o.option_id, o.name, o.kind) for o in options),
        )
        decision = await session.ask(event)
        wanted = "allow" if decision.allow else "reject"
        chosen = decision.option_id or next(
            (o.id for o in event.options if o.kind.startswith(wanted)), None
        )
        if chosen is None:
            return RequestPermissionResponse(outcome=DeniedOutcome(outcome="cancelled"))
        return RequestPermissionResponse(
            outcome=AllowedOutcome(option_id=chosen, outcome="selected")
        )

    async def create_elicitation(self, message: str, mode: Any, **kwargs: Any) -> Any:
        """A form becomes an input-required question, one per field, asked again (saying
        why) until the answers fit it; a URL elicitation is declined (tailagent has no
        browser to send the caller to)."""
        if isinstance(mode, ElicitationFormSessionMode):
            session = self._session(mode.session_id)
        elif isinstance(mode, ElicitationFormRequestMode) and self.session is not None:
            session = self.session
        else:
            return DeclineElicitationResponse(action="decline")
        fields = form_fields(message, mode.requested_schema)
        if not fields:
            return AcceptElicitationResponse(action="accept", content={})
        if len(fields) > 1 and message:
            session.note(Notice(message))
        questions = tuple(f.question for f in fields)
        while True:
            answers = await session.question(QuestionAsked(uuid.uuid4().hex, questions))
            if answers is None:
                return CancelElicitationResponse(action="cancel")
            try:
                content = content_of(fields, answers.answers)
            except ValueError as exc:
                session.note(Notice(f"That answer does not fit the agent's form ({exc})."))
                continue
            return AcceptElicitationResponse(action="accept", content=content)

    async def read_text_file(
        self,
        session_id: str,
        path: str,
        line: int | None = None,
        limit: int | None = None,
        **kwargs: Any,
    ) -> ReadTextFileResponse:
        self._session(session_id)
        try:
            text = await asyncio.to_thread(
                read_text, self.workspace, path, line, limit, self.max_file_bytes
            )
        except (OutsideWorkspace, FileRefused) as exc:
            raise RequestError.invalid_params({"path": path, "reason": str(exc)}) from None
        except OSError as exc:
            raise RequestError.resource_not_found(path) from exc
        return ReadTextFileResponse(content=text)

    async def write_text_file(
        self, session_id: str, path: str, content: str, **kwargs: Any
    ) -> WriteTextFileResponse:
        self._session(session_id)
        try:
            await asyncio.to_thread(write_text, self.workspace, path, content, self.max_file_bytes)
        except (OutsideWorkspace, FileRefused) as exc:
            raise RequestError.invalid_params({"path": path, "reason": str(exc)}) from None
        except OSError as exc:
            raise RequestError.internal_error({"path": path, "reason": str(exc)}) from None
        return WriteTextFileResponse()

    async def create_terminal(
        self,
        session_id: str,
        command: str,
        args: list[str] | None = None,
        env: list[Any] | None = None,
        cwd: str | None = None,
        output_byte_limit: int | None = None,
        **kwargs: Any,
    ) -> CreateTerminalResponse:
        session = self._session(session_id)
        try:
            directory = confine(self.workspace, cwd or str(self.workspace))
        except OutsideWorkspace as exc:
            raise RequestError.invalid_params({"cwd": cwd, "reason": str(exc)}) from None
        extra = {variable.name: variable.value for variable in env or []}
        line = shlex.join([command, *(args or [])])
        # What it sets is part of what it runs (GIT_CONFIG_*, LD_PRELOAD): shown with it.
        setting = " ".join(f"{shlex.quote(k)}={shlex.quote(v)}" for k, v in extra.items())
        # ACP does not make agents ask before terminal/create: tailagent always asks.
        decision = await session.ask(
            PermissionAsked(
                request_id=uuid.uuid4().hex,
                tool="terminal",
                input={"command": line, "cwd": str(directory), "env": extra},
                title=f"Run `{line}` in {directory}" + (f", setting {setting}" if extra else ""),
                reason="Every terminal command needs the caller's approval.",
                options=TERMINAL_OPTIONS,
            )
        )
        if not decision.allow:
            raise RequestError(-32001, f"The caller refused to run `{line}`. {decision.message}")
        try:
            terminal_id = await session.terminals.create(
                command, list(args or []), directory, extra, output_byte_limit
            )
        except (TerminalLimit, OSError) as exc:
            raise RequestError.internal_error({"reason": str(exc)}) from None
        return CreateTerminalResponse(terminal_id=terminal_id)

    async def terminal_output(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> TerminalOutputResponse:
        terminal = self._terminal(session_id, terminal_id)
        code = terminal.process.returncode
        status = TerminalExitStatus(exit_code=code) if code is not None else None
        return TerminalOutputResponse(
            output=terminal.text(), truncated=terminal.truncated, exit_status=status
        )

    def _terminal(self, session_id: str, terminal_id: str) -> Any:
        try:
            return self._session(session_id).terminals.get(terminal_id)
        except KeyError as exc:
            raise RequestError.invalid_params({"terminalId": terminal_id}) from exc

    async def wait_for_terminal_exit(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> WaitForTerminalExitResponse:
        self._terminal(session_id, terminal_id)
        code = await self._session(session_id).terminals.wait(terminal_id)
        return WaitForTerminalExitResponse(exit_code=code)

    async def kill_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> KillTerminalResponse:
        self._terminal(session_id, terminal_id)
        self._session(session_id).terminals.kill(terminal_id)
        return KillTerminalResponse()

    async def release_terminal(
        self, session_id: str, terminal_id: str, **kwargs: Any
    ) -> ReleaseTerminalResponse:
        await self._session(session_id).terminals.release(terminal_id)
        return ReleaseTerminalResponse()
