"""Claude Code through the Claude Agent SDK, directly: `--agent claude`.

Going through the SDK rather than an ACP adapter is what lets a refusal or an
answer carry the caller's own words back to Claude: `can_use_tool` is the bridge
between Claude's questions and the A2A caller.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import difflib
import getpass
import json
import logging
import os
import shutil
import uuid
import warnings
from collections.abc import AsyncIterator, Awaitable, Callable
from pathlib import Path
from typing import Any, NamedTuple

import claude_agent_sdk
from claude_agent_sdk import (
    AssistantMessage,
    ClaudeAgentOptions,
    ClaudeSDKClient,
    ClaudeSDKError,
    PermissionResultAllow,
    PermissionResultDeny,
    ResultMessage,
    TextBlock,
    ThinkingBlock,
    ToolPermissionContext,
    ToolResultBlock,
    ToolUseBlock,
    UserMessage,
    create_sdk_mcp_server,
    tool,
)
from claude_agent_sdk.types import CanUseToolShadowedWarning, McpSdkServerConfig

from tailagent.agent_kinds.claude import CLAUDE_CODE_MODES as CLAUDE_CODE
from tailagent.agents.acp.logins import missing_login
from tailagent.agents.events import (
    NO_PERSON_TURN,
    AgentEvent,
    AgentStartError,
    Answer,
    DelegationFailed,
    FileChanged,
    PermissionAsked,
    PermissionDecision,
    Plan,
    PlanEntry,
    PromptFile,
    PromptPart,
    PromptText,
    Question,
    QuestionAnswers,
    QuestionAsked,
    QuestionOption,
    Skill,
    Text,
    Thought,
    ToolFinished,
    ToolStarted,
    TurnDone,
    TurnFailed,
    TurnOptions,
    TurnTools,
    camel_keys,
)
from tailagent.agents.spares import Spares
from tailagent.config import ClaudeSettings
from tailagent.config.mcp_servers import McpServer
from tailagent.process.origin import frozen
from tailagent.sandbox.fences import Fence, Sandbox
from tailagent.sandbox.freezer import CgroupFreezer, Freezer, freezer_of, namespaced

log = logging.getLogger("tailagent.agents")


EDIT_TOOLS = ("Write", "Edit", "MultiEdit")
# Claude Code's own refusal to read outside its working directories (2026), passed as
# flag settings, which outrank every settings file.
BLOCK_OUTSIDE_READS = json.dumps({"permissions": {"blockReadsOutsideWorkingDirectories": True}})
STDERR_TAIL_LINES = 20
STDERR_LOG_LINES = 200  # per session; past this, stderr is kept but no longer logged
STDERR_LINE_CHARS = 4000  # of one line, logged
_DONE = object()
OWN_TOOLS = "tailagent"  # the MCP server of tailagent's own tools, as Claude names it
# Allowed without Claude asking: delegating is asked of the person by tailagent itself
# ("Hand to devbox-2: …"), and listing the peers decides nothing.
OWN_TOOL_NAMES = (f"mcp__{OWN_TOOLS}__list_peers", f"mcp__{OWN_TOOLS}__delegate")
# The SDK's advice that allowed tools skip can_use_tool: for these two, that is the point.
warnings.filterwarnings(
    "ignore",
    "can_use_tool will not be invoked for: " + ", ".join(OWN_TOOL_NAMES) + r"\.",
    CanUseToolShadowedWarning,
)


def bundled_cli() -> Path:
    return Path(claude_agent_sdk.__file__).parent / "_bundled" / "claude"


class ClaudeCli(NamedTuple):
    path: Path | None  # None: found nowhere
    source: str  # where it was looked for, or found

    @property
    def usable(self) -> bool:
        """Found, and there (a `claude.cli_path` is taken as given, then checked)."""
        return self.path is not None and self.path.is_file()


def find_cli(settings: ClaudeSettings) -> ClaudeCli:
    """The Claude Code CLI to run: `claude.cli_path`, else the one claude-agent-sdk
    bundles (a package install has it; the one-file binary leaves its 384 MB out),
    else `claude` on PATH or where Anthropic's installer puts it."""
    if settings.cli_path is not None:
        return ClaudeCli(settings.cli_path, "claude.cli_path")
    if bundled_cli().is_file():
        return ClaudeCli(bundled_cli(), "bundled with claude-agent-sdk")
    on_path = shutil.which("claude")
    if on_path:
        return ClaudeCli(Path(on_path), "claude on PATH")
    for spot in (Path.home() / ".local/bin/claude", Path.home() / ".claude/local/claude"):
        if spot.is_file():
            return ClaudeCli(spot, "Claude's installer")
    where = "this tailagent binary does not carry one" if frozen() else "none bundled"
    return ClaudeCli(None, f"{where}, none on PATH, none in ~/.local/bin")


def missing_cli_advice(cli: ClaudeCli) -> str:
    if cli.path is not None:  # claude.cli_path names a file that is not there
        return f"the Claude Code CLI is not at {cli.path} (claude.cli_path)"
    return (
        f"no Claude Code CLI ({cli.source}): install it (`npm install -g "
        "@anthropic-ai/claude-code`, or https://claude.ai/install.sh) or set claude.cli_path"
    )


def login_hint(cli: Path | None) -> str:
    """How to give Claude Code a login, naming the CLI tailagent runs (often the SDK's
    bundled one, rarely on PATH)."""
    return (
        f"run `{cli or 'claude'}` once as that user and log in there, or set "
        "ANTHROPIC_API_KEY in its environment"
    )


def login_advice(cli: Path | None) -> str:
    """What a turn that found no login says."""
    return f"Claude Code is not logged in for {getpass.getuser()}: {login_hint(cli)}."


def _relative(path: str, workspace: Path) -> str:
    with contextlib.suppress(ValueError):
        return str(Path(path).resolve().relative_to(workspace.resolve()))
    return path


def file_change(name: str, tool_input: dict[str, Any], workspace: Path) -> FileChanged | None:
    """The diff a Write / Edit / MultiEdit will make, from its input (computed before
    it runs, so the caller sees what is about to change)."""
    path = str(tool_input.get("file_path") or "")
    if not path:
        return None
    shown = _relative(path, workspace)
    if name == "Write":
        try:
            old = Path(path).read_text()
        except OSError:
            old = ""
        new = str(tool_input.get("content") or "")
    else:
        edits = tool_input.get("edits") if name == "MultiEdit" else [tool_input]
        old = "".join(str(e.get("old_string") or "") + "\n" for e in edits or [])
        new = "".join(str(e.get("new_string") or "") + "\n" for e in edits or [])
    diff = "".join(
        difflib.unified_diff(
            old.splitlines(keepends=True), new.splitlines(keepends=True), f"a/{shown}", f"b/{shown}"
        )
    )
    return FileChanged(shown, diff)


def _plan(tool_input: dict[str, Any]) -> Plan:
    entries = []
    for todo in tool_input.get("todos") or []:
        status = todo.get("status")
        entries.append(
            PlanEntry(
                str(todo.get("content") or ""),
                status if status in ("pending", "in_progress", "completed") else "pending",
            )
        )
    return Plan(tuple(entries))


def _questions(tool_input: dict[str, Any]) -> tuple[Question, ...]:
    return tuple(
        Question(
            question=str(q.get("question") or ""),
            header=str(q.get("header") or ""),
            options=tuple(
                QuestionOption(str(o.get("label") or ""), str(o.get("description") or ""))
                for o in q.get("options") or []
            ),
            multi_select=bool(q.get("multiSelect")),
        )
        for q in tool_input.get("questions") or []
    )


def _tool_answer(text: str, error: bool = False) -> dict[str, Any]:
    return {"content": [{"type": "text", "text": text}], "is_error": error}


def own_tools_server(current: Callable[[], TurnTools | None]) -> McpSdkServerConfig:
    """tailagent's own tools (list_peers, delegate) as claude-agent-sdk's in-process
    MCP server: each call goes to the tools of the turn running now (`current`), so a
    call between turns is refused. The SDK forwards no progress to Claude; the person
    sees the peer's progress in the turn itself."""

    async def tools_or_refuse() -> TurnTools:
        tools = current()
        if tools is None:
            raise DelegationFailed(NO_PERSON_TURN)
        return tools

    @tool("list_peers", "The tailagents on this tailnet this node may hand work to.", {})
    async def list_peers(args: dict[str, Any]) -> dict[str, Any]:
        try:
            peers = await (await tools_or_refuse()).list_peers()
        except DelegationFailed as exc:
            return _tool_answer(str(exc), error=True)
        return _tool_answer(json.dumps(peers))

    schema = {
        "type": "object",
        "properties": {
            "peer": {"type": "string", "description": "a name list_peers gave"},
            "message": {"type": "string", "description": "the sub-task"},
            "conversation": {"type": "string", "description": "an earlier hand-off's"},
        },
        "required": ["peer", "message"],
    }

    @tool(
        "delegate",
        "Hands a sub-task to a peer on behalf of the person whose task this is (they may "
        "be asked first) and returns the peer's answer.",
        schema,
    )
    async def delegate(args: dict[str, Any]) -> dict[str, Any]:
        try:
            tools = await tools_or_refuse()
            answer = await tools.delegate(
                str(args["peer"]), str(args["message"]), args.get("conversation") or None
            )
        except DelegationFailed as exc:
            return _tool_answer(str(exc), error=True)
        return _tool_answer(answer)

    return create_sdk_mcp_server(OWN_TOOLS, tools=[list_peers, delegate])


def _mcp_config(servers: tuple[McpServer, ...]) -> dict[str, Any]:
    """The configured MCP servers as claude-agent-sdk's `mcp_servers` takes them."""
    return {
        s.name: {"type": "http", "url": s.url}
        if s.url
        else {"type": "stdio", "command": s.command, "args": list(s.args), "env": s.env}
        for s in servers
    }


def _cli_pid(client: ClaudeSDKClient) -> int | None:
    """The pid of what the SDK started: the launcher, which execs bwrap."""
    transport = getattr(client, "_transport", None)
    pid = getattr(getattr(transport, "_process", None), "pid", None)
    if not isinstance(pid, int):
        log.warning("Claude Code's process is not known: it is not frozen between turns")
        return None
    return pid


def _tool_text(content: Any) -> str:
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(item.get("text", "")) for item in content if isinstance(item, dict))
    return ""


class ClaudeSession:
    def __init__(
        self,
        settings: ClaudeSettings,
        workspace: Path,
        session_id: str,
        resume: bool,
        cli: Path,
        mcp_servers: tuple[McpServer, ...] = (),
        max_budget_usd: float | None = None,
        fence: Fence | None = None,
        own_tools: bool = False,
    ):
        self._settings = settings
        # What runs: the CLI inside its sandbox, a pid namespace frozen between turns (in
        # a cgroup of its own where the server has one to give).
        self._fence = fence or Fence(workspace, (), "unfenced")
        self._fenced = namespaced(self._fence.options)
        self._group = self._fence.group()
        self._launcher = self._fence.launcher(cli, self._group)
        self._max_budget_usd = max_budget_usd
        # Claude Code's result restates the cost of its whole process (every turn it
        # served): a turn's cost is what that total grew by since the last result.
        self._total_cost = 0.0
        self._cli = cli
        self._mcp = _mcp_config(mcp_servers)
        self._tools: TurnTools | None = None  # the running turn's (TurnOptions.tools)
        self._own_tools = own_tools
        if own_tools:
            self._mcp[OWN_TOOLS] = own_tools_server(lambda: self._tools)
        self._workspace = workspace
        self._session_id = session_id
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._stderr_logged = 0
        self._queue: asyncio.Queue[Any] | None = None
        self._answers: dict[str, asyncio.Future[Answer]] = {}
        self._dead = False
        self._cancelled = False
        self._reader: asyncio.Task[None] | None = None
        self._client = ClaudeSDKClient(self._options(resume))
        self.freezer: Freezer | CgroupFreezer = Freezer(None)

    def _options(self, resume: bool) -> ClaudeAgentOptions:
        s = self._settings
        return ClaudeAgentOptions(
            cwd=str(s.cwd or self._workspace),
            permission_mode=s.permission_mode,  # type: ignore[arg-type]
            model=s.model,
            allowed_tools=[*s.allowed_tools, *(OWN_TOOL_NAMES if self._own_tools else ())],
            setting_sources=list(s.setting_sources),  # type: ignore[arg-type]
            max_turns=s.max_turns,
            system_prompt={"type": "preset", "preset": "claude_code"},
            cli_path=str(self._launcher),
            # A second layer under the sandbox, where Claude Code knows the setting.
            settings=BLOCK_OUTSIDE_READS,
            resume=self._session_id if resume else None,
            session_id=None if resume else self._session_id,
            can_use_tool=self._can_use_tool,
            mcp_servers=self._mcp,
            stderr=self._said_on_stderr,
            max_budget_usd=self._max_budget_usd,
        )

    def _said_on_stderr(self, line: str) -> None:
        """Kept to quote when the CLI fails, and logged (bounded), as an ACP agent's are:
        from inside its sandbox, stderr is what the CLI can still tell the operator."""
        self._stderr.append(line)
        if self._stderr_logged < STDERR_LOG_LINES:
            self._stderr_logged += 1
            log.info("claude %s stderr: %s", self._session_id[:8], line[:STDERR_LINE_CHARS])

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def alive(self) -> bool:
        return not self._dead

    async def connect(self) -> None:
        """Starts the CLI; it waits frozen until the first turn (a spare, a session
        opened ahead of its prompt)."""
        await self._client.connect()
        if self._fenced:
            root = None if self._group else _cli_pid(self._client)
            self.freezer = freezer_of(root, self._group)
            await self._freeze()

    async def _freeze(self) -> None:
        """Stops the CLI's fence (no query in flight, or one waiting on our answer). One
        that does not stop is ended: frozen or ended, never half."""
        if self._dead or await self.freezer.freeze():
            return
        log.warning("Claude Code's processes did not stop between turns; ending them")
        self._dead = True
        self.freezer.kill()

    # -- a turn -------------------------------------------------------------------------------

    async def prompt(
        self, parts: list[PromptPart], options: TurnOptions | None = None
    ) -> AsyncIterator[AgentEvent]:
        self.freezer.thaw()  # frozen since the last turn: it runs before it is written to
        if options is not None and (options.mode or options.model):
            try:
                if options.mode:
                    await self._client.set_permission_mode(options.mode)  # type: ignore[arg-type]
                if options.model:
                    await self._client.set_model(options.model)
            except ClaudeSDKError as exc:
                await self._freeze()
                yield TurnFailed(f"Claude Code could not switch mode or model: {exc}")
                return
        text = "\n".join(_prompt_line(p) for p in parts)
        self._cancelled = False
        queue: asyncio.Queue[Any] = asyncio.Queue()
        self._queue = queue
        self._tools = options.tools if options is not None else None
        reader = asyncio.create_task(self._read(text, queue), name="claude-turn")
        self._reader = reader
        try:
            while True:
                item = await queue.get()
                if item is _DONE:
                    break
                yield item
        finally:
            self._queue = None
            self._tools = None
            if not reader.done():
                reader.cancel()
                with contextlib.suppress(BaseException):
                    await reader

    async def _read(self, text: str, queue: asyncio.Queue[Any]) -> None:
        not_logged_in = False
        try:
            await self._client.query(text)
            async for message in self._client.receive_response():
                if isinstance(message, AssistantMessage):
                    if message.error == "authentication_failed":
                        not_logged_in = True
                        continue
                    for block in message.content:
                        for event in self._block_events(block):
                            queue.put_nowait(event)
                elif isinstance(message, UserMessage) and isinstance(message.content, list):
                    for block in message.content:
                        if isinstance(block, ToolResultBlock):
                            output = _tool_text(block.content)
                            queue.put_nowait(
                                ToolFinished(
                                    block.tool_use_id,
                                    "failed" if block.is_error else "completed",
                                    output,
                                )
                            )
                elif isinstance(message, ResultMessage):
                    # Its query is over: frozen before anyone reads the turn's end.
                    await self._freeze()
                    queue.put_nowait(self._result(message, not_logged_in))
        except ClaudeSDKError as exc:
            self._dead = True
            tail = "\n".join(self._stderr)
            queue.put_nowait(
                TurnFailed(
                    f"Claude Code stopped during the turn: {exc}" + (f"\n{tail}" if tail else "")
                )
            )
        finally:
            queue.put_nowait(_DONE)

    def _block_events(self, block: Any) -> list[AgentEvent]:
        if isinstance(block, TextBlock):
            return [Text(block.text)] if block.text else []
        if isinstance(block, ThinkingBlock):
            return [Thought(block.thinking)]
        if isinstance(block, ToolUseBlock):
            if block.name == "TodoWrite":
                return [_plan(block.input)]
            events: list[AgentEvent] = [
                ToolStarted(block.id, block.name, _title(block.name, block.input), block.input)
            ]
            if block.name in EDIT_TOOLS and (
                change := file_change(block.name, block.input, self._workspace)
            ):
                events.append(change)
            return events
        return []

    def _result(self, message: ResultMessage, not_logged_in: bool) -> AgentEvent:
        if not_logged_in:
            return TurnFailed(login_advice(self._cli))
        if self._cancelled:
            return TurnDone(stop_reason="cancelled")
        cost = self._turn_cost(message.total_cost_usd)
        usage = camel_keys(message.usage or {})
        usage["numTurns"] = message.num_turns
        if message.model_usage:
            usage["modelUsage"] = message.model_usage
        if message.subtype == "error_max_budget_usd":
            # Its own budget stop (`max_budget_usd`): a stop the bridge explains, with the cost.
            return TurnDone(stop_reason="max_budget_usd", usage=usage, cost=cost)
        if message.is_error:
            detail = message.result or message.subtype
            return TurnFailed(f"Claude Code ended the turn with an error: {detail}")
        return TurnDone(stop_reason=message.stop_reason or "end_turn", usage=usage, cost=cost)

    def _turn_cost(self, total: float | None) -> float | None:
        """This turn's share of the process's running cost (a smaller total: the CLI
        started again, and counts from zero)."""
        if total is None:
            return None
        grew = total - self._total_cost if total >= self._total_cost else total
        self._total_cost = total
        return grew

    # -- questions and permissions ----------------------------------------------------------

    async def _ask(self, event: PermissionAsked | QuestionAsked) -> Answer:
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._answers[event.request_id] = future
        try:
            if self._queue is not None:
                self._queue.put_nowait(event)
                # It waits on this answer: frozen meanwhile, as AcpSession._wait says why;
                # `answer` and `cancel` thaw it before the answer is written to it.
                await self._freeze()
            else:
                future.set_result(PermissionDecision(False, message="no turn is running"))
            return await future
        finally:
            self._answers.pop(event.request_id, None)

    async def _can_use_tool(
        self, tool_name: str, tool_input: dict[str, Any], context: ToolPermissionContext
    ) -> PermissionResultAllow | PermissionResultDeny:
        if self._settings.permission_prompts == "deny":
            return PermissionResultDeny(
                message="tailagent denies every permission prompt (claude.permission_prompts)."
            )
        request_id = uuid.uuid4().hex
        if tool_name == "AskUserQuestion":
            answer = await self._ask(QuestionAsked(request_id, _questions(tool_input)))
            if isinstance(answer, QuestionAnswers):
                return PermissionResultAllow(
                    updated_input={**tool_input, "answers": answer.answers}
                )
            return PermissionResultDeny(message="The question was not answered.")
        answer = await self._ask(
            PermissionAsked(
                request_id=request_id,
                tool=tool_name,
                input=tool_input,
                title=context.title or _title(tool_name, tool_input),
                reason=context.decision_reason or "",
            )
        )
        if isinstance(answer, PermissionDecision) and answer.allow:
            return PermissionResultAllow(updated_input=tool_input)
        message = answer.message if isinstance(answer, PermissionDecision) else ""
        interrupt = isinstance(answer, PermissionDecision) and answer.interrupt
        return PermissionResultDeny(message=message or "Denied.", interrupt=interrupt)

    async def answer(self, request_id: str, answer: Answer) -> None:
        future = self._answers.get(request_id)
        if future is None or future.done():
            raise KeyError(f"no pending request {request_id}")
        self.freezer.thaw()
        future.set_result(answer)

    async def cancel(self) -> None:
        """Interrupts the query; a parked prompt is denied first so Claude can stop."""
        if self.freezer.frozen and (self._reader is None or self._reader.done()):
            return  # frozen between turns: no query to interrupt, nothing to write to it
        self.freezer.thaw()
        self._cancelled = True
        for future in self._answers.values():
            if not future.done():
                future.set_result(PermissionDecision(False, message="The task was canceled."))
        try:
            await asyncio.wait_for(self._client.interrupt(), timeout=self._settings.cancel_timeout)
            # Read the interrupted turn to its result, so the next turn does not start
            # by reading this one's end.
            if self._reader is not None and not self._reader.done():
                await asyncio.wait_for(
                    asyncio.shield(self._reader), timeout=self._settings.cancel_timeout
                )
        except Exception:
            log.warning("Claude Code did not stop on the interrupt; stopping it")
            await self.close()

    async def close(self) -> None:
        self._dead = True
        self.freezer.thaw()  # a stopped CLI reads no end of its stdin, and keeps SIGTERM pending
        with contextlib.suppress(Exception):
            await asyncio.wait_for(self._client.disconnect(), timeout=10)
        self._fence.retire(self._group)


def _prompt_line(part: PromptPart) -> str:
    """Claude reads files itself: an attachment is saved in the inbox and named."""
    if isinstance(part, PromptText):
        return part.text
    if isinstance(part, PromptFile):
        return part.reference(part.save())
    return json.dumps(part.data, ensure_ascii=False)


def _title(tool: str, tool_input: dict[str, Any]) -> str:
    detail = tool_input.get("command") or tool_input.get("file_path") or tool_input.get("pattern")
    return f"{tool} {detail}" if detail else tool


class ClaudeBackend:
    name = "claude"
    caller_modes: tuple[str, ...] = CLAUDE_CODE

    def __init__(
        self,
        settings: ClaudeSettings,
        workspace: Path,
        max_sessions: int,
        mcp_servers: tuple[McpServer, ...] = (),
        warm_spares: int = 0,
        spare_directory: Callable[[], Awaitable[Path]] | None = None,
        max_budget_usd: float | None = None,
        sandbox: Sandbox | None = None,
        own_tools: bool = False,
    ) -> None:
        self.settings = settings
        self.own_tools = own_tools  # tailagent's list_peers and delegate, in every session
        self.sandbox = sandbox
        self.max_budget_usd = max_budget_usd  # `budgets.per_task_usd`
        self.mcp_servers = mcp_servers
        self.workspace = workspace
        self.max_sessions: int | None = max_sessions
        # Connected sessions: starting the CLI and connecting to it costs 0.5–0.9 s. The
        # CLI's working directory is fixed when it starts: with a worktree per
        # conversation, `spare_directory` says where the next conversation will work.
        self._spares = Spares(
            warm_spares,
            lambda cwd: self._connect(None, cwd),
            ClaudeSession.close,
            "Claude Code session",
            where=spare_directory,
        )
        self._cli = find_cli(settings)  # checked at start(), then run by every session
        self.description = (
            f"Claude Code (through the Claude Agent SDK), working in {workspace.name}."
        )
        self.skills: tuple[Skill, ...] = (
            Skill(
                id="coding",
                name="Coding with Claude Code",
                description=(
                    "Claude Code reads, edits and runs code in the workspace. Questions and "
                    "every permission it needs come back as input-required."
                ),
                tags=("coding", "claude"),
                examples=("Fix the failing test in calc.py", "Explain what this repository does"),
            ),
        )

    async def start(self) -> None:
        if not self._cli.usable:
            raise AgentStartError(missing_cli_advice(self._cli))
        log.info("Claude Code CLI: %s (%s)", self._cli.path, self._cli.source)
        missing = missing_login("claude", "Claude Code", login_hint(self._cli.path), os.environ)
        if missing is not None:  # said now, not at the first caller's task
            log.warning("%s", missing)
        self._spares.top_up()

    async def open_session(
        self, resume_id: str | None = None, cwd: Path | None = None
    ) -> ClaudeSession:
        if resume_id is None:
            return await self._spares.take(cwd)
        session = await self._connect(resume_id, cwd)
        self._spares.top_up()
        return session

    async def _connect(self, resume_id: str | None, cwd: Path | None = None) -> ClaudeSession:
        assert self._cli.path is not None  # start() checked it
        directory = cwd or self.workspace
        # The CLI, and every tool, hook and MCP server it starts, runs in the
        # conversation's sandbox: the SDK is handed a launcher instead of the CLI.
        fence = self.sandbox.fence(directory) if self.sandbox is not None else None
        session = ClaudeSession(
            self.settings,
            directory,
            resume_id or str(uuid.uuid4()),
            resume_id is not None,
            self._cli.path,
            self.mcp_servers,
            self.max_budget_usd,
            fence=fence,
            own_tools=self.own_tools,
        )
        try:
            await session.connect()
        except ClaudeSDKError as exc:
            raise AgentStartError(f"Claude Code did not start: {exc}") from None
        return session

    async def aclose(self) -> None:
        await self._spares.aclose()
