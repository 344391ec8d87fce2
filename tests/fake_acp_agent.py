"""A scriptable ACP agent, spoken to over stdio, for the tests.

tailagent hosts real ACP (Agent Client Protocol) agents as subprocesses. The tests
need one that speaks the real protocol (through the `acp` package, exactly as a
real agent would) but whose behaviour is chosen by the test, cheaply and
deterministically: this is it. Each prompt is scanned for keywords, lower-case
words acted on in order of appearance:

    think         agent_thought_chunk "considering: <text>"
    plan          plan update: look (completed), fix (in_progress), test (pending)
    tool          read tool call "Read calc.py", then completed with the file's text
    edit          edit tool call with a diff of <cwd>/calc.py, then completed
    fail          execute tool call "Run tests", then failed ("2 tests failed")
    ask           session/request_permission with the four option kinds
    shell         terminal/create + wait_for_exit + output + release
    run:B64       session/request_permission for an execute tool call whose command is
                  B64 decoded (base64 of UTF-8, so any line fits in one word)
    terminal:B64  terminal/create of B64 decoded, a JSON {"command", "args", "env"}, then
                  as shell ("terminal said <output>")
    read:PATH     fs/read_text_file (PATH relative to the session's cwd); read:PATH:LINE:LIMIT
                  asks for LIMIT lines from LINE
    write:PATH    fs/write_text_file with "written by fake\\n"; write:PATH:N, N bytes of "x"
    fifo:PATH     makes a FIFO at PATH itself (no ACP)
    sparse:PATH:N makes PATH a sparse file of N bytes itself
    hardlink:LINK:TARGET  links TARGET (anywhere) to LINK itself
    race:DIR:OUT N  swaps DIR (a directory with f in it) and a symlink to OUT, over and
                  over, while it reads DIR/f N times through ACP; counts what it got
    peek:PATH M   reads PATH itself (no ACP) and says whether it holds the word M
    slow N        N ticks, one a second, stopped by session/cancel
    hang          sleeps an hour, deaf to session/cancel
    crash         says "about to crash", then exits with status 3
    env           lists the names of its own environment variables
    noise N       writes N lines to stderr
    chunks N      N agent_message_chunk updates, "chunk <i> " each (a long streamed answer)
    model         says "model: <the session's model>" (its config option of category model)
    elicit        elicitation/create, a form: "Where should the build go?" with Branch (text),
                  Count (integer), Colour (red or blue) and Push (yes/no); then says
                  "elicited: <action> <content as JSON>"
    usage:C[:CUR] usage_update: 1000 tokens in context per turn so far, a window of 200000,
                  and C (the session's running cost) in CUR (USD unless given); no C, no cost
    setup         says its mode and the MCP servers its session was given
    mcp:TOOL[:B64]  starts the session's stdio MCP server named "tailagent" (as a real agent
                  does, with the `mcp` package's client) and calls TOOL with the JSON B64
                  decodes to ({} without it); says "mcp progress: <message>" for each
                  progress notification, then "mcp TOOL said: <text>" (or "mcp TOOL
                  error: <text>")
    connect:PATH  connects to the unix socket PATH itself; says "connect PATH: ok" or
                  "connect PATH: <the error>"
    hostile       HOSTILE (text that would act on a terminal) in a thought, a message, a
                  tool's title, input and output, a file written (hostile.txt) and its
                  edit's diff, and a permission request's title and input

A turn ends with "turn <n> of session <sid> in process <pid>.<start>" (plus the URIs of
embedded resources, if any) and stop reason end_turn.

It offers session/resume and session/close (--no-resume, --no-close: it does not), and
a config option of category model, "fast" or "smart" (--no-config-options: none).
With --slow-close (--slow-resume) its session/close (session/resume) answers only when
tailagent sends $/cancel_request for it (then with -32800, Request Cancelled). With
--log PATH it appends one line per lifecycle call it gets: "new|load|resume|close SID"
(--log - writes them to stderr as "lifecycle: …", which the server logs),
"cancel_request ID", "close|resume SID cancelled", "elicitation answered ACTION".

Run: python tests/fake_acp_agent.py [--no-load] [--no-resume] [--no-close] [--slow-close]
     [--slow-resume]
     [--no-config-options] [--log PATH] [--auth-required] [--no-embedded-context]
     [--slow-start SECONDS]
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import ctypes
import json
import os
import sys
import threading
import time
import uuid
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, cast

import acp
from acp import (
    Agent,
    Client,
    InitializeResponse,
    LoadSessionResponse,
    NewSessionResponse,
    PromptResponse,
    RequestError,
)
from acp.connection import StreamDirection, StreamEvent
from acp.helpers import (
    plan_entry,
    start_tool_call,
    text_block,
    tool_content,
    tool_diff_content,
    update_agent_message_text,
    update_agent_thought_text,
    update_available_commands,
    update_current_mode,
    update_plan,
    update_tool_call,
)
from acp.schema import (
    AgentCapabilities,
    AllowedOutcome,
    AuthenticateResponse,
    AuthMethodAgent,
    AvailableCommand,
    CloseSessionResponse,
    Cost,
    ElicitationBooleanPropertySchema,
    ElicitationFormSessionMode,
    ElicitationIntegerPropertySchema,
    ElicitationSchema,
    ElicitationStringPropertySchema,
    EmbeddedResourceContentBlock,
    EnumOption,
    EnvVarAuthMethod,
    EnvVariable,
    Implementation,
    PermissionOption,
    PromptCapabilities,
    ResumeSessionResponse,
    SessionCapabilities,
    SessionCloseCapabilities,
    SessionConfigOptionSelect,
    SessionConfigSelectOption,
    SessionResumeCapabilities,
    SetSessionConfigOptionResponse,
    SetSessionModeResponse,
    TerminalAuthMethod,
    TextContentBlock,
    ToolCallUpdate,
    UsageUpdate,
)


def _process_token() -> str:
    """Its pid and start time (tests/processes.py process_token): inside a sandbox's pid
    namespace the pid alone is 2 in every agent."""
    start = Path("/proc/self/stat").read_text().rpartition(")")[2].split()[19]
    return f"{os.getpid()}.{start}"


_PROCESS = _process_token()
AGENT_NAME = "fake-acp-agent"
AGENT_VERSION = "1.0.0"
DEFAULT_SLOW_TICKS = 3
DEFAULT_CHUNKS = 100
DEFAULT_NOISE_LINES = 3
# A clipboard write (OSC 52), a clear screen, a link (OSC 8), a window title, a C1 CSI,
# DEL, a bidi override and rich markup: what no terminal of the owner's may act on.
HOSTILE = (
    "clip \x1b]52;c;aGk=\x1b\\ clear \x1b[2J link \x1b]8;;https://evil.example/\x1b\\here"
    "\x1b]8;;\x1b\\ title \x1b]0;owned\x07 csi \x9b31m del \x7f bidi \u202etxt.exe\u202c "
    "markup [bold red]loud[/]"
)


@dataclass
class Session:
    """What the agent remembers about one session, for the life of this process."""

    cwd: str
    mcp_servers: list[str] = field(default_factory=list)
    stdio: dict[str, Any] = field(default_factory=dict)  # name -> its McpServerStdio
    mode: str = "default"
    model: str = "fast"
    turns: int = 0
    tool_calls: int = 0
    cancelled: asyncio.Event = field(default_factory=asyncio.Event)

    def next_tool_call_id(self) -> str:
        self.tool_calls += 1
        return f"call-{self.tool_calls}"


@dataclass
class Turn:
    """One prompt being answered: the session, its words, and what it embedded."""

    session_id: str
    session: Session
    text: str
    words: list[str]
    resources: list[str]


class TurnCancelled(Exception):
    """Raised inside a turn when the client cancelled it."""


Action = Callable[[Turn, str, str | None], Awaitable[None]]


def _stdio_servers(kwargs: dict[str, Any]) -> dict[str, Any]:
    """The session's stdio MCP servers (those with a command), by name."""
    return {s.name: s for s in kwargs.get("mcp_servers") or [] if getattr(s, "command", None)}


def _int_or(word: str | None, default: int) -> int:
    if word is not None and word.isdigit():
        return int(word)
    return default


class FakeAgent:
    """The ACP Agent side: lifecycle methods plus the keyword actions of a prompt."""

    def __init__(
        self,
        *,
        can_load: bool,
        auth_required: bool,
        embeds: bool = True,
        can_resume: bool = True,
        can_close: bool = True,
        slow: tuple[str, ...] = (),
        config_options: bool = True,
        log: Path | None = None,
        key_login: str | None = None,
    ) -> None:
        # Like codex-acp: lists an `api-key` login always, and opens sessions only once
        # it was sent, which works only with this variable in its environment.
        self._key_login = key_login
        self._logged_in = False
        self._config_options = config_options
        self._can_load = can_load
        self._can_resume = can_resume
        self._can_close = can_close
        self._slow_methods = slow  # the methods answered only when cancelled
        self._log = log
        # JSON-RPC id of a slow call being answered -> set when it is cancelled.
        self._calls: dict[int | str, asyncio.Event] = {}
        self._embeds = embeds
        self._auth_required = auth_required
        self._conn: Client | None = None
        self._sessions: dict[str, Session] = {}
        self._actions: dict[str, Action] = {
            "think": self._think,
            "plan": self._plan,
            "tool": self._tool,
            "edit": self._edit,
            "fail": self._fail,
            "ask": self._ask,
            "shell": self._shell,
            "run": self._run,
            "terminal": self._terminal,
            "read": self._read,
            "write": self._write,
            "fifo": self._fifo,
            "sparse": self._sparse,
            "hardlink": self._hardlink,
            "race": self._race,
            "peek": self._peek,
            "slow": self._slow,
            "hang": self._hang,
            "crash": self._crash,
            "env": self._env,
            "setup": self._setup,
            "noise": self._noise,
            "chunks": self._chunks,
            "hostile": self._hostile,
            "usage": self._usage,
            "model": self._model,
            "elicit": self._elicit,
            "mcp": self._mcp,
            "connect": self._connect,
        }

    # -- connection and lifecycle ---------------------------------------------------------

    def on_connect(self, conn: Client) -> None:
        self._conn = conn

    @property
    def conn(self) -> Client:
        if self._conn is None:
            raise RuntimeError("no client connection yet")
        return self._conn

    async def initialize(self, protocol_version: int, **kwargs: Any) -> InitializeResponse:
        auth_methods: list[EnvVarAuthMethod | TerminalAuthMethod | AuthMethodAgent] = []
        if self._key_login:
            auth_methods.append(AuthMethodAgent(id="api-key", name="Use an API key"))
        if self._auth_required or self._key_login:
            auth_methods.append(
                AuthMethodAgent(
                    id="login", name="Log in", description="Run `fake-agent login` on the server"
                )
            )
        return InitializeResponse(
            protocol_version=acp.PROTOCOL_VERSION,
            agent_capabilities=AgentCapabilities(
                load_session=self._can_load,
                prompt_capabilities=PromptCapabilities(embedded_context=self._embeds, image=False),
                session_capabilities=SessionCapabilities(
                    resume=SessionResumeCapabilities() if self._can_resume else None,
                    close=SessionCloseCapabilities() if self._can_close else None,
                ),
            ),
            auth_methods=auth_methods,
            agent_info=Implementation(name=AGENT_NAME, version=AGENT_VERSION),
        )

    async def authenticate(self, method_id: str, **kwargs: Any) -> AuthenticateResponse | None:
        self._note(f"authenticate {method_id}")
        if method_id != "api-key" or not self._key_login or not os.environ.get(self._key_login):
            raise RequestError.auth_required()
        self._logged_in = True
        return AuthenticateResponse()

    async def new_session(self, cwd: str, **kwargs: Any) -> NewSessionResponse:
        if self._auth_required or (self._key_login and not self._logged_in):
            raise RequestError.auth_required()
        session_id = uuid.uuid4().hex
        servers = [s.name for s in kwargs.get("mcp_servers") or []]
        self._sessions[session_id] = Session(cwd=cwd, mcp_servers=servers)
        self._sessions[session_id].stdio = _stdio_servers(kwargs)
        self._note(f"new {session_id}")
        await self.conn.session_update(
            session_id=session_id,
            update=update_available_commands(
                [
                    AvailableCommand(name="review", description="Review the changes"),
                    AvailableCommand(name="test", description="Run the tests"),
                ]
            ),
        )
        await self.conn.session_update(session_id=session_id, update=update_current_mode("default"))
        return NewSessionResponse(session_id=session_id, config_options=self._options(session_id))

    def _options(self, session_id: str) -> list[Any] | None:
        """The session's config options: its model, one of two."""
        if not self._config_options:
            return None
        choices = [
            SessionConfigSelectOption(value="fast", name="Fast model"),
            SessionConfigSelectOption(value="smart", name="Smart model"),
        ]
        current = self._sessions[session_id].model
        return [
            SessionConfigOptionSelect(
                id="model", name="Model", category="model", type="select",
                current_value=current, options=choices,
            )
        ]  # fmt: skip

    async def set_config_option(
        self, config_id: str, session_id: str, value: str | bool, **kwargs: Any
    ) -> SetSessionConfigOptionResponse:
        if not self._config_options or config_id != "model" or value not in ("fast", "smart"):
            raise RequestError.invalid_params({"configId": config_id, "value": value})
        self._sessions[session_id].model = str(value)
        return SetSessionConfigOptionResponse(config_options=self._options(session_id) or [])

    async def load_session(self, cwd: str, session_id: str, **kwargs: Any) -> LoadSessionResponse:
        if not self._can_load:
            raise RequestError.method_not_found(acp.AGENT_METHODS["session_load"])
        if self._auth_required:
            raise RequestError.auth_required()
        self._take_up(session_id, cwd, kwargs)
        self._note(f"load {session_id}")
        await self.conn.session_update(session_id=session_id, update=update_current_mode("default"))
        return LoadSessionResponse(config_options=self._options(session_id))

    def _take_up(self, session_id: str, cwd: str, kwargs: dict[str, Any]) -> None:
        session = self._sessions.get(session_id)
        if session is None:
            servers = [s.name for s in kwargs.get("mcp_servers") or []]
            self._sessions[session_id] = Session(cwd=cwd, mcp_servers=servers)
        else:
            session.cwd = cwd
        self._sessions[session_id].stdio = _stdio_servers(kwargs)

    async def resume_session(
        self, cwd: str, session_id: str, **kwargs: Any
    ) -> ResumeSessionResponse:
        if not self._can_resume:
            raise RequestError.method_not_found(acp.AGENT_METHODS["session_resume"])
        self._note(f"resume {session_id}")
        await self._maybe_slow(acp.AGENT_METHODS["session_resume"], f"resume {session_id}")
        self._take_up(session_id, cwd, kwargs)
        return ResumeSessionResponse(config_options=self._options(session_id))

    async def close_session(self, session_id: str, **kwargs: Any) -> CloseSessionResponse:
        if not self._can_close:
            raise RequestError.method_not_found(acp.AGENT_METHODS["session_close"])
        self._note(f"close {session_id}")
        await self._maybe_slow(acp.AGENT_METHODS["session_close"], f"close {session_id}")
        self._sessions.pop(session_id, None)

    async def _maybe_slow(self, method: str, said: str) -> None:
        """A slow method waits for $/cancel_request, then fails with Request Cancelled."""
        if method not in self._slow_methods:
            return
        await self._calls[next(reversed(self._calls))].wait()
        self._note(f"{said} cancelled")
        raise RequestError(-32800, "Request cancelled")
        return CloseSessionResponse()

    def observe(self, event: StreamEvent) -> None:
        """Sees every message: acp routes no $/cancel_request, and does not tell a
        handler the id of the request it answers."""
        message = event.message
        if event.direction is not StreamDirection.INCOMING:
            return
        if message.get("method") in self._slow_methods:
            self._calls[message["id"]] = asyncio.Event()
        elif message.get("method") == "$/cancel_request":
            request_id = (message.get("params") or {}).get("requestId")
            self._note(f"cancel_request {request_id}")
            if (cancelled := self._calls.get(request_id)) is not None:
                cancelled.set()

    def _note(self, line: str) -> None:
        if self._log is None:
            return
        if str(self._log) == "-":  # on stderr, which the server logs: out of any sandbox
            print(f"lifecycle: {line}", file=sys.stderr, flush=True)
            return
        with self._log.open("a") as log:
            log.write(line + "\n")

    async def cancel(self, session_id: str, **kwargs: Any) -> None:
        session = self._sessions.get(session_id)
        if session is not None:
            session.cancelled.set()

    # -- prompts --------------------------------------------------------------------------

    async def prompt(self, session_id: str, prompt: list[Any], **kwargs: Any) -> PromptResponse:
        session = self._sessions.get(session_id)
        if session is None:
            raise RequestError.invalid_params(
                {"sessionId": session_id, "details": "unknown session"}
            )
        session.cancelled.clear()
        session.turns += 1
        texts = [block.text for block in prompt if isinstance(block, TextContentBlock)]
        resources = [
            f"resource:{block.resource.uri}"
            for block in prompt
            if isinstance(block, EmbeddedResourceContentBlock)
        ]
        text = " ".join(texts)
        turn = Turn(session_id, session, text, text.split(), resources)
        try:
            for index, word in enumerate(turn.words):
                name, _, arg = word.partition(":")
                action = self._actions.get(name)
                if action is None:
                    continue
                following = turn.words[index + 1] if index + 1 < len(turn.words) else None
                await action(turn, arg, following)
                if session.cancelled.is_set():
                    raise TurnCancelled
        except TurnCancelled:
            return PromptResponse(stop_reason="cancelled")
        closing = f"turn {session.turns} of session {session_id} in process {_PROCESS}"
        if resources:
            closing += " resources: " + ", ".join(resources)
        await self._say(turn, closing)
        return PromptResponse(stop_reason="end_turn")

    async def _say(self, turn: Turn, text: str) -> None:
        await self.conn.session_update(
            session_id=turn.session_id, update=update_agent_message_text(text)
        )

    def _absolute(self, turn: Turn, path: str) -> str:
        return path if os.path.isabs(path) else os.path.join(turn.session.cwd, path)

    # -- keyword actions ------------------------------------------------------------------

    async def _think(self, turn: Turn, arg: str, following: str | None) -> None:
        await self.conn.session_update(
            session_id=turn.session_id,
            update=update_agent_thought_text(f"considering: {turn.text}"),
        )

    async def _plan(self, turn: Turn, arg: str, following: str | None) -> None:
        entries = [
            plan_entry("look", status="completed", priority="medium"),
            plan_entry("fix", status="in_progress", priority="medium"),
            plan_entry("test", status="pending", priority="medium"),
        ]
        await self.conn.session_update(session_id=turn.session_id, update=update_plan(entries))

    async def _tool(self, turn: Turn, arg: str, following: str | None) -> None:
        call_id = turn.session.next_tool_call_id()
        await self.conn.session_update(
            session_id=turn.session_id,
            update=start_tool_call(
                call_id,
                "Read calc.py",
                kind="read",
                status="in_progress",
                raw_input={"path": "calc.py"},
            ),
        )
        await self.conn.session_update(
            session_id=turn.session_id,
            update=update_tool_call(
                call_id,
                status="completed",
                content=[tool_content(text_block("def add(a, b): return a - b"))],
            ),
        )

    async def _edit(self, turn: Turn, arg: str, following: str | None) -> None:
        call_id = turn.session.next_tool_call_id()
        diff = tool_diff_content(
            os.path.join(turn.session.cwd, "calc.py"), new_text="b\n", old_text="a\n"
        )
        await self.conn.session_update(
            session_id=turn.session_id,
            update=start_tool_call(
                call_id, "Write calc.py", kind="edit", status="in_progress", content=[diff]
            ),
        )
        await self.conn.session_update(
            session_id=turn.session_id, update=update_tool_call(call_id, status="completed")
        )

    async def _fail(self, turn: Turn, arg: str, following: str | None) -> None:
        call_id = turn.session.next_tool_call_id()
        await self.conn.session_update(
            session_id=turn.session_id,
            update=start_tool_call(call_id, "Run tests", kind="execute", status="in_progress"),
        )
        await self.conn.session_update(
            session_id=turn.session_id,
            update=update_tool_call(
                call_id, status="failed", content=[tool_content(text_block("2 tests failed"))]
            ),
        )

    async def _ask(self, turn: Turn, arg: str, following: str | None) -> None:
        await self._permission(turn, "rm -rf build", "rm -rf build")

    async def _permission(self, turn: Turn, title: str, command: str) -> None:
        tool_call = ToolCallUpdate(
            tool_call_id=turn.session.next_tool_call_id(),
            title=title,
            kind="execute",
            raw_input={"command": command},
        )
        options = [
            PermissionOption(option_id="allow_once", name="Allow once", kind="allow_once"),
            PermissionOption(option_id="allow_always", name="Always allow", kind="allow_always"),
            PermissionOption(option_id="reject_once", name="Reject", kind="reject_once"),
            PermissionOption(option_id="reject_always", name="Always reject", kind="reject_always"),
        ]
        try:
            response = await self.conn.request_permission(
                session_id=turn.session_id, tool_call=tool_call, options=options
            )
        except RequestError as exc:
            await self._say(turn, f"permission refused: {exc}\n")
            return
        if isinstance(response.outcome, AllowedOutcome):
            await self._say(turn, f"permission: {response.outcome.option_id}\n")
        else:
            await self._say(turn, "permission cancelled\n")

    async def _shell(self, turn: Turn, arg: str, following: str | None) -> None:
        await self._in_terminal(
            turn, "shell", sys.executable, ["-c", "print('from the terminal')"],
            [EnvVariable(name="FAKE_AGENT_VAR", value="1")],
        )  # fmt: skip

    async def _run(self, turn: Turn, arg: str, following: str | None) -> None:
        command = base64.b64decode(arg).decode()
        await self._permission(turn, f"Run {command}", command)

    async def _terminal(self, turn: Turn, arg: str, following: str | None) -> None:
        chosen = json.loads(base64.b64decode(arg))
        env = [EnvVariable(name=k, value=v) for k, v in chosen.get("env", {}).items()]
        await self._in_terminal(turn, "terminal", chosen["command"], chosen.get("args", []), env)

    async def _in_terminal(
        self, turn: Turn, label: str, command: str, args: list[str], env: list[EnvVariable]
    ) -> None:
        """terminal/create, wait for its exit, say its output (as "<label> said …"), release."""
        try:
            created = await self.conn.create_terminal(
                session_id=turn.session_id, command=command, args=args,
                cwd=turn.session.cwd, env=env,
            )  # fmt: skip
        except RequestError as exc:
            await self._say(turn, f"terminal refused: {exc}\n")
            return
        terminal_id = created.terminal_id
        try:
            await self.conn.wait_for_terminal_exit(
                session_id=turn.session_id, terminal_id=terminal_id
            )
            output = await self.conn.terminal_output(
                session_id=turn.session_id, terminal_id=terminal_id
            )
            await self._say(turn, f"{label} said {output.output.strip()}\n")
        except RequestError as exc:
            await self._say(turn, f"terminal failed: {exc}\n")
        finally:
            await self.conn.release_terminal(session_id=turn.session_id, terminal_id=terminal_id)

    async def _read(self, turn: Turn, arg: str, following: str | None) -> None:
        path, *numbers = arg.split(":")
        if not path:
            return
        line, limit = ([int(n) for n in numbers] + [None, None])[:2]
        try:
            response = await self.conn.read_text_file(
                session_id=turn.session_id, path=self._absolute(turn, path), line=line, limit=limit
            )
        except RequestError as exc:
            await self._say(turn, f"read refused: {exc} {exc.data}\n")
            return
        await self._say(turn, f"read: {response.content}\n")

    async def _write(self, turn: Turn, arg: str, following: str | None) -> None:
        path, _, size = arg.partition(":")
        if not path:
            return
        try:
            await self.conn.write_text_file(
                session_id=turn.session_id,
                path=self._absolute(turn, path),
                content="x" * int(size) if size else "written by fake\n",
            )
        except RequestError as exc:
            await self._say(turn, f"write refused: {exc} {exc.data}\n")
            return
        await self._say(turn, f"wrote {path}\n")

    async def _fifo(self, turn: Turn, arg: str, following: str | None) -> None:
        os.mkfifo(self._absolute(turn, arg))
        await self._say(turn, f"made fifo {arg}\n")

    async def _sparse(self, turn: Turn, arg: str, following: str | None) -> None:
        path, size = arg.rsplit(":", 1)
        fd = os.open(self._absolute(turn, path), os.O_WRONLY | os.O_CREAT)
        os.ftruncate(fd, int(size))
        os.close(fd)
        await self._say(turn, f"made sparse {path}\n")

    async def _hardlink(self, turn: Turn, arg: str, following: str | None) -> None:
        link, target = arg.split(":", 1)
        os.link(target, self._absolute(turn, link))
        await self._say(turn, f"linked {link}\n")

    async def _race(self, turn: Turn, arg: str, following: str | None) -> None:
        name, outside = arg.split(":", 1)
        directory = self._absolute(turn, name)
        os.makedirs(directory, exist_ok=True)
        await asyncio.to_thread(Path(directory, "f").write_text, "inside\n")
        link = directory + ".link"
        os.symlink(outside, link)
        stop = threading.Event()
        swapper = threading.Thread(target=_swap_until, args=(directory, link, stop))
        swapper.start()
        counts = {"inside": 0, "outside": 0, "refused": 0, "missing": 0}
        try:
            for _ in range(_int_or(following, 100)):
                try:
                    response = await self.conn.read_text_file(
                        session_id=turn.session_id, path=os.path.join(directory, "f")
                    )
                except RequestError as exc:
                    counts["refused" if "outside" in str(exc.data) else "missing"] += 1
                    continue
                counts["inside" if response.content == "inside\n" else "outside"] += 1
        finally:
            stop.set()
            swapper.join()
        await self._say(turn, "race: " + " ".join(f"{k}={v}" for k, v in counts.items()) + "\n")

    async def _peek(self, turn: Turn, arg: str, following: str | None) -> None:
        said = f"peek {arg} parent={os.getppid()}"
        try:
            data = await asyncio.to_thread(Path(arg).read_bytes)
        except OSError as exc:
            await self._say(turn, f"{said} error={exc.strerror}\n")
            return
        seen = "yes" if following and following.encode() in data else "no"
        await self._say(turn, f"{said} bytes={len(data)} marker={seen}\n")

    async def _slow(self, turn: Turn, arg: str, following: str | None) -> None:
        ticks = _int_or(following, DEFAULT_SLOW_TICKS)
        for i in range(1, ticks + 1):
            try:
                await asyncio.wait_for(turn.session.cancelled.wait(), timeout=1.0)
            except TimeoutError:
                await self._say(turn, f"tick {i}/{ticks}\n")
            else:
                raise TurnCancelled

    async def _hang(self, turn: Turn, arg: str, following: str | None) -> None:
        await asyncio.sleep(3600)

    async def _crash(self, turn: Turn, arg: str, following: str | None) -> None:
        await self._say(turn, "about to crash\n")
        sys.stderr.write("fatal: fake agent crashed on purpose\n")
        sys.stderr.flush()
        os._exit(3)

    async def set_session_mode(
        self, session_id: str, mode_id: str, **kwargs: Any
    ) -> SetSessionModeResponse:
        self._sessions[session_id].mode = mode_id
        await self.conn.session_update(session_id=session_id, update=update_current_mode(mode_id))
        return SetSessionModeResponse()

    async def _setup(self, turn: Turn, arg: str, following: str | None) -> None:
        servers = ",".join(turn.session.mcp_servers) or "none"
        await self._say(turn, f"mode: {turn.session.mode}; mcp: {servers}\n")

    async def _mcp(self, turn: Turn, arg: str, following: str | None) -> None:
        from mcp import Client  # only this word needs it: the other tests start faster
        from mcp.client.stdio import StdioServerParameters

        tool, _, encoded = arg.partition(":")
        args = json.loads(base64.b64decode(encoded)) if encoded else {}
        spec = turn.session.stdio.get("tailagent")
        if spec is None:
            await self._say(turn, f"mcp {tool} error: no MCP server named tailagent\n")
            return

        async def progress(done: float, total: float | None, message: str | None) -> None:
            await self._say(turn, f"mcp progress: {message}\n")

        env = {e.name: e.value for e in spec.env or []}
        server = StdioServerParameters(command=spec.command, args=list(spec.args), env=env)
        async with Client(server) as client:
            result = await client.call_tool(tool, args, progress_callback=progress)
        text = " ".join(getattr(c, "text", "") for c in result.content)
        said = "error" if result.is_error else "said"
        await self._say(turn, f"mcp {tool} {said}: {text}\n")

    async def _connect(self, turn: Turn, arg: str, following: str | None) -> None:
        try:
            _, writer = await asyncio.open_unix_connection(arg)
            writer.close()
            outcome = "ok"
        except OSError as exc:
            outcome = f"{type(exc).__name__}: {exc.strerror}"
        await self._say(turn, f"connect {arg}: {outcome}\n")

    async def _env(self, turn: Turn, arg: str, following: str | None) -> None:
        await self._say(turn, "env: " + ",".join(sorted(os.environ)) + "\n")

    async def _noise(self, turn: Turn, arg: str, following: str | None) -> None:
        for i in range(1, _int_or(following, DEFAULT_NOISE_LINES) + 1):
            sys.stderr.write(f"noise line {i}\n")
            sys.stderr.flush()

    async def _chunks(self, turn: Turn, arg: str, following: str | None) -> None:
        for i in range(1, _int_or(following, DEFAULT_CHUNKS) + 1):
            await self._say(turn, f"chunk {i} ")

    async def _elicit(self, turn: Turn, arg: str, following: str | None) -> None:
        colours = [EnumOption(const="r", title="red"), EnumOption(const="b", title="blue")]
        schema = ElicitationSchema(
            properties={
                "branch": ElicitationStringPropertySchema(type="string", title="Branch"),
                "count": ElicitationIntegerPropertySchema(type="integer", title="Count"),
                "colour": ElicitationStringPropertySchema(
                    type="string", title="Colour", one_of=colours
                ),
                "push": ElicitationBooleanPropertySchema(type="boolean", title="Push"),
            },
            required=["branch"],
        )
        mode = ElicitationFormSessionMode(session_id=turn.session_id, requested_schema=schema)
        try:
            response = await self.conn.create_elicitation(
                message="Where should the build go?", mode=mode
            )
        except RequestError as exc:
            await self._say(turn, f"elicitation refused: {exc}\n")
            return
        self._note(f"elicitation answered {response.action}")
        content = json.dumps(getattr(response, "content", None), sort_keys=True)
        await self._say(turn, f"elicited: {response.action} {content}\n")

    async def _model(self, turn: Turn, arg: str, following: str | None) -> None:
        await self._say(turn, f"model: {turn.session.model}\n")

    async def _usage(self, turn: Turn, arg: str, following: str | None) -> None:
        amount, _, currency = arg.partition(":")
        cost = Cost(amount=float(amount), currency=currency or "USD") if amount else None
        update = UsageUpdate(
            session_update="usage_update", used=1000 * turn.session.turns, size=200000, cost=cost
        )
        await self.conn.session_update(session_id=turn.session_id, update=update)

    async def _hostile(self, turn: Turn, arg: str, following: str | None) -> None:
        session_id = turn.session_id
        thought = update_agent_thought_text(f"thought {HOSTILE}")
        await self.conn.session_update(session_id=session_id, update=thought)
        await self._say(turn, f"said {HOSTILE}\n")
        read_id = turn.session.next_tool_call_id()
        await self.conn.session_update(
            session_id=session_id,
            update=start_tool_call(
                read_id, f"Read {HOSTILE}", kind="read", status="in_progress",
                raw_input={"path": HOSTILE},
            ),
        )  # fmt: skip
        output = [tool_content(text_block(f"output {HOSTILE}"))]
        await self.conn.session_update(
            session_id=session_id,
            update=update_tool_call(read_id, status="completed", content=output),
        )
        path, content = os.path.join(turn.session.cwd, "hostile.txt"), f"file {HOSTILE}\n"
        await self.conn.write_text_file(session_id=session_id, path=path, content=content)
        edit_id = turn.session.next_tool_call_id()
        diff = tool_diff_content(path, new_text=content, old_text="")
        await self.conn.session_update(
            session_id=session_id,
            update=start_tool_call(
                edit_id, f"Write {HOSTILE}", kind="edit", status="in_progress", content=[diff]
            ),
        )
        await self.conn.session_update(
            session_id=session_id, update=update_tool_call(edit_id, status="completed")
        )
        await self._permission(turn, f"Run {HOSTILE}", HOSTILE)


def _swap_until(directory: str, link: str, stop: threading.Event) -> None:
    """Exchanges the names of a directory and a symlink (renameat2 RENAME_EXCHANGE), so
    the name is always one or the other, until `stop` is set."""
    libc = ctypes.CDLL(None, use_errno=True)
    at_cwd, exchange = -100, 2
    while not stop.is_set():
        if libc.renameat2(at_cwd, directory.encode(), at_cwd, link.encode(), exchange) != 0:
            raise OSError(ctypes.get_errno(), "renameat2")


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--no-load", action="store_true", help="do not support session/load")
    parser.add_argument(
        "--auth-required", action="store_true", help="refuse sessions: authentication required"
    )
    parser.add_argument(
        "--no-embedded-context", action="store_true", help="accept no embedded resources"
    )
    parser.add_argument(
        "--slow-start", type=float, default=0.0, metavar="SECONDS", help="sleep before serving"
    )
    parser.add_argument("--no-resume", action="store_true", help="do not offer session/resume")
    parser.add_argument("--no-close", action="store_true", help="do not offer session/close")
    parser.add_argument(
        "--slow-close", action="store_true", help="answer session/close only when cancelled"
    )
    parser.add_argument(
        "--slow-resume", action="store_true", help="answer session/resume only when cancelled"
    )
    parser.add_argument(
        "--no-config-options", action="store_true", help="offer no session config options"
    )
    parser.add_argument("--log", type=Path, help="append the lifecycle calls it gets here")
    parser.add_argument(
        "--key-login", metavar="VAR", help="list login methods; open sessions once logged in "
        "with `api-key`, which takes VAR from the environment"
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.slow_start > 0:
        time.sleep(args.slow_start)
    agent = FakeAgent(
        can_load=not args.no_load,
        auth_required=args.auth_required,
        key_login=args.key_login,
        embeds=not args.no_embedded_context,
        can_resume=not args.no_resume,
        can_close=not args.no_close,
        slow=tuple(
            acp.AGENT_METHODS[name]
            for name, chosen in (
                ("session_close", args.slow_close),
                ("session_resume", args.slow_resume),
            )
            if chosen
        ),
        config_options=not args.no_config_options,
        log=args.log,
    )
    # The agent implements only what it needs; acp answers the rest "method not found".
    # acp 0.12.1 still routes session/resume and session/close only as "unstable".
    asyncio.run(
        acp.run_agent(cast(Agent, agent), use_unstable_protocol=True, observers=[agent.observe])
    )


if __name__ == "__main__":
    main()
