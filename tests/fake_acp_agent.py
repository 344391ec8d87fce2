"""A scriptable ACP agent, spoken to over stdio, for the tests.

tailagent hosts real ACP (Agent Client Protocol) agents as subprocesses. The tests
need one that speaks the real protocol (the same JSON-RPC 2.0 messages, field for
field, that the `acp` package sends and expects) but whose behaviour is chosen by the
test, cheaply and deterministically: this is it. It speaks the wire with the standard
library only: importing `acp` (its pydantic schema) cost ~0.85 s of CPU per start,
and the suite starts this agent a few hundred times. Each prompt is scanned for
keywords, lower-case words acted on in order of appearance:

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

The wire: one JSON-RPC 2.0 message per line on stdin and stdout, written compactly with
the keys in the order, and the optional fields left out, as acp's models serialize them;
errors with acp's codes and messages. A method it does not serve is answered -32601
(Method not found); it exits when stdin closes.

Run: python tests/fake_acp_agent.py [--no-load] [--no-resume] [--no-close] [--slow-close]
     [--slow-resume]
     [--no-config-options] [--log PATH] [--auth-required] [--no-embedded-context]
     [--slow-start SECONDS] [--key-login VAR]
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from typing import Any


def _process_token() -> str:
    """Its pid and start time (tests/processes.py process_token): inside a sandbox's pid
    namespace the pid alone is 2 in every agent."""
    with open("/proc/self/stat") as stat:
        start = stat.read().rpartition(")")[2].split()[19]
    return f"{os.getpid()}.{start}"


_PROCESS = _process_token()
PROTOCOL_VERSION = 1  # acp.PROTOCOL_VERSION
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

Json = dict[str, Any]
RequestId = int | str

# -- the wire: JSON-RPC 2.0, one message per line ---------------------------------------


class RequestError(Exception):
    """A JSON-RPC error: what a request is answered with, or what the client answered.

    Sent as {"code", "message", "data"} (data null when there is none), with the codes
    and messages of acp's RequestError, which tailagent matches on."""

    def __init__(self, code: int, message: str, data: Any = None) -> None:
        super().__init__(message)
        self.code = code
        self.data = data

    @classmethod
    def method_not_found(cls, method: str) -> RequestError:
        return cls(-32601, "Method not found", {"method": method})

    @classmethod
    def invalid_params(cls, data: Json | None = None) -> RequestError:
        return cls(-32602, "Invalid params", data)

    @classmethod
    def internal_error(cls, data: Any = None) -> RequestError:
        return cls(-32603, "Internal error", data)

    @classmethod
    def auth_required(cls) -> RequestError:
        return cls(-32000, "Authentication required")

    @classmethod
    def cancelled(cls) -> RequestError:
        """The answer to a request the client withdrew with $/cancel_request."""
        return cls(-32800, "Request cancelled")

    def to_wire(self) -> Json:
        return {"code": self.code, "message": str(self), "data": self.data}


class Incoming:
    """A request from the client being answered: `cancelled` is set when $/cancel_request
    names it (only the slow methods listen)."""

    def __init__(self, request_id: RequestId, method: str, params: Json, arrival: int) -> None:
        self.id = request_id
        self.method = method
        self.params = params
        self.arrival = arrival  # the number of the message, counted from 1 as they come
        self.cancelled = threading.Event()

    def param(self, name: str) -> Any:
        """A required parameter; missing, the request is answered Invalid params, as
        acp's validation answers it."""
        if name not in self.params:
            error: Json = {"type": "missing", "loc": [name], "msg": "Field required"}
            error["input"] = self.params  # (pydantic's "url" is left out)
            raise RequestError.invalid_params({"errors": [error]})
        return self.params[name]


RequestHandler = Callable[[Incoming], Json]
NotificationHandler = Callable[[str, Json, int], None]  # method, params, arrival


def _write_all(data: bytes) -> None:
    """Writes all of `data` to stdout; unbuffered, so nothing is left to flush at exit."""
    view = memoryview(data)
    while view:
        view = view[os.write(1, view) :]


def _error_data(exc: Exception) -> Any:
    """The data of the Internal error an unexpected exception is answered with: its text
    parsed as JSON when it is, else {"details": text}, as acp does."""
    try:
        return json.loads(str(exc))
    except ValueError:
        return {"details": str(exc)}


class _Waiting:
    """A request of ours to the client, until its response comes."""

    def __init__(self) -> None:
        self.done = threading.Event()
        self.result: Any = None
        self.error: Exception | None = None


class Connection:
    """JSON-RPC 2.0 over this process's stdin and stdout, with threads, not asyncio
    (whose import alone costs more CPU than the rest of the start).

    The main thread reads stdin line by line. Each incoming request is answered in a
    thread of its own, so a notification that arrives while a prompt or a close is still
    running (session/cancel, $/cancel_request) reaches it; notifications are handled at
    once, in order. The agent's own requests to the client are numbered from 0; the
    thread that sends one waits until the reader hands it the client's response. At EOF
    serve() returns: what still runs is dropped unanswered, as acp cancels it."""

    def __init__(self, on_request: RequestHandler, on_notification: NotificationHandler) -> None:
        self._on_request = on_request
        self._on_notification = on_notification
        self._lock = threading.Lock()  # one message at a time on stdout; the ids
        self._next_id = 0
        self._waiting: dict[RequestId, _Waiting] = {}  # our requests, by id
        self._running: dict[RequestId, Incoming] = {}  # the client's, by id
        self._arrivals = 0  # messages received so far
        self._closed = False

    def serve(self) -> None:
        """Reads and dispatches messages until stdin closes."""
        for line in sys.stdin.buffer:
            if not line.strip():
                continue
            try:
                message = json.loads(line)
            except ValueError:
                continue  # acp skips a line that is no JSON, too
            if isinstance(message, dict):
                self._arrivals += 1
                self._dispatch(message)
        with self._lock:
            self._closed = True  # the threads still running die with the process

    def send(self, message: Json) -> None:
        """Writes one message, compact as acp writes it (non-ASCII escaped); nothing
        once stdin has closed."""
        data = (json.dumps(message, separators=(",", ":")) + "\n").encode()
        with self._lock, contextlib.suppress(OSError):  # OSError: the client has gone
            if not self._closed:
                _write_all(data)

    def notify(self, method: str, params: Json) -> None:
        self.send({"jsonrpc": "2.0", "method": method, "params": params})

    def request(self, method: str, params: Json) -> Any:
        """Sends a request to the client and returns its result; an error answer raises
        RequestError, with the client's code, message and data."""
        waiting = _Waiting()
        with self._lock:
            request_id = self._next_id
            self._next_id += 1
            self._waiting[request_id] = waiting
        self.send({"jsonrpc": "2.0", "id": request_id, "method": method, "params": params})
        waiting.done.wait()
        self._waiting.pop(request_id, None)
        if waiting.error is not None:
            raise waiting.error
        return waiting.result

    def cancel_incoming(self, request_id: Any) -> None:
        """Tells the client's request `request_id`, if it still runs, that it was withdrawn."""
        incoming = self._running.get(request_id)
        if incoming is not None:
            incoming.cancelled.set()

    def _dispatch(self, message: Json) -> None:
        """A request starts a thread, a notification is handled now, a response wakes
        the request of ours it answers."""
        method = message.get("method")
        if method is None:
            if "id" in message:
                self._resolve(message)
            return
        params = message.get("params") or {}
        if "id" not in message:
            try:
                self._on_notification(method, params, self._arrivals)
            except Exception:  # acp logs a failed notification and goes on
                import traceback

                traceback.print_exc()
            return
        incoming = Incoming(message["id"], method, params, self._arrivals)
        self._running[incoming.id] = incoming
        threading.Thread(target=self._answer, args=(incoming,), daemon=True).start()

    def _resolve(self, message: Json) -> None:
        waiting = self._waiting.get(message["id"])
        if waiting is None or waiting.done.is_set():
            return
        if "error" in message and "result" not in message:
            error = message.get("error") or {}
            code, text = error.get("code", -32603), error.get("message", "Error")
            waiting.error = RequestError(code, text, error.get("data"))
        else:
            waiting.result = message.get("result")
        waiting.done.set()

    def _answer(self, incoming: Incoming) -> None:
        """Runs one request's handler and writes its answer: the result, or the error."""
        reply: Json = {"jsonrpc": "2.0", "id": incoming.id}
        try:
            reply["result"] = self._on_request(incoming)
        except RequestError as exc:
            reply["error"] = exc.to_wire()
        except Exception as exc:  # a fault of the fake's: answered as acp answers one
            import traceback

            print(f"Unhandled error while handling request method={incoming.method}",
                  file=sys.stderr)  # fmt: skip
            traceback.print_exc()
            reply["error"] = RequestError.internal_error(_error_data(exc)).to_wire()
        finally:
            self._running.pop(incoming.id, None)
        self.send(reply)


# -- what the agent says, shaped as acp's models serialize ------------------------------


def _text(text: str) -> Json:
    return {"text": text, "type": "text"}


def _chunk(kind: str, text: str) -> Json:
    """An agent_message_chunk or agent_thought_chunk update of plain text."""
    return {"content": _text(text), "sessionUpdate": kind}


def _current_mode(mode_id: str) -> Json:
    return {"currentModeId": mode_id, "sessionUpdate": "current_mode_update"}


def _tool_call(
    call_id: str, title: str, kind: str, *, content: list[Json] | None = None,
    raw_input: Json | None = None,
) -> Json:  # fmt: skip
    """A tool_call update: a tool call starting, in progress."""
    update: Json = {"toolCallId": call_id, "title": title, "kind": kind, "status": "in_progress"}
    if content is not None:
        update["content"] = content
    if raw_input is not None:
        update["rawInput"] = raw_input
    update["sessionUpdate"] = "tool_call"
    return update


def _tool_call_done(call_id: str, status: str, content: list[Json] | None = None) -> Json:
    """A tool_call_update: the call ended (completed or failed), maybe with content."""
    update: Json = {"toolCallId": call_id, "status": status}
    if content is not None:
        update["content"] = content
    update["sessionUpdate"] = "tool_call_update"
    return update


def _tool_text(text: str) -> Json:
    return {"content": _text(text), "type": "content"}


def _diff(path: str, old_text: str, new_text: str) -> Json:
    return {"path": path, "oldText": old_text, "newText": new_text, "type": "diff"}


def _env(variables: dict[str, str]) -> list[Json]:
    return [{"name": name, "value": value} for name, value in variables.items()]


PERMISSION_OPTIONS = [
    {"optionId": "allow_once", "name": "Allow once", "kind": "allow_once"},
    {"optionId": "allow_always", "name": "Always allow", "kind": "allow_always"},
    {"optionId": "reject_once", "name": "Reject", "kind": "reject_once"},
    {"optionId": "reject_always", "name": "Always reject", "kind": "reject_always"},
]
COMMANDS = [
    {"name": "review", "description": "Review the changes"},
    {"name": "test", "description": "Run the tests"},
]
MODEL_CHOICES = [{"value": "fast", "name": "Fast model"}, {"value": "smart", "name": "Smart model"}]
# The elicit keyword's form (the schema's "type": "object" is its default: left out).
ELICITATION_SCHEMA: Json = {
    "properties": {
        "branch": {"title": "Branch", "type": "string"},
        "count": {"title": "Count", "type": "integer"},
        "colour": {
            "title": "Colour",
            "oneOf": [{"const": "r", "title": "red"}, {"const": "b", "title": "blue"}],
            "type": "string",
        },
        "push": {"title": "Push", "type": "boolean"},
    },
    "required": ["branch"],
}


# -- the agent --------------------------------------------------------------------------


class Session:
    """What the agent remembers about one session, for the life of this process."""

    def __init__(self, cwd: str, mcp_servers: list[str]) -> None:
        self.cwd = cwd
        self.mcp_servers = mcp_servers  # the names of all it was given
        self.stdio: dict[str, Json] = {}  # name -> its stdio MCP server
        self.mode = "default"
        self.model = "fast"
        self.turns = 0
        self.tool_calls = 0
        self.cancelled = threading.Event()  # set by session/cancel
        self._cancel_arrival = 0  # the arrival number of the last session/cancel
        self._lock = threading.Lock()

    def cancel(self, arrival: int) -> None:
        with self._lock:
            self._cancel_arrival = arrival
            self.cancelled.set()

    def begin_turn(self, arrival: int) -> None:
        """Forgets a session/cancel that came before this prompt did: it was meant for an
        earlier turn. The prompt's thread may start after a later cancel was handled, so
        the order is the order of arrival, as acp's tasks (run in that order) keep it."""
        with self._lock:
            if self._cancel_arrival < arrival:
                self.cancelled.clear()
        self.turns += 1

    def next_tool_call_id(self) -> str:
        self.tool_calls += 1
        return f"call-{self.tool_calls}"

    def take_servers(self, servers: list[Json]) -> None:
        """The session's stdio MCP servers (those with a command), by name."""
        self.stdio = {s["name"]: s for s in servers if s.get("command")}


class Turn:
    """One prompt being answered: the session, its words, and what it embedded."""

    def __init__(self, session_id: str, session: Session, text: str, resources: list[str]):
        self.session_id = session_id
        self.session = session
        self.text = text
        self.words = text.split()
        self.resources = resources


class TurnCancelled(Exception):
    """Raised inside a turn when the client cancelled it."""


Action = Callable[[Turn, str, str | None], None]


def _uuid4_hex() -> str:
    """uuid.uuid4().hex (a session id), without importing uuid: random bits, version 4."""
    octets = bytearray(os.urandom(16))
    octets[6] = octets[6] & 0x0F | 0x40
    octets[8] = octets[8] & 0x3F | 0x80
    return octets.hex()


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
        log: str | None = None,
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
        self._embeds = embeds
        self._auth_required = auth_required
        self.conn = Connection(self.handle_request, self.handle_notification)
        self._sessions: dict[str, Session] = {}
        self._methods: dict[str, RequestHandler] = {
            "initialize": self.initialize,
            "authenticate": self.authenticate,
            "session/new": self.new_session,
            "session/load": self.load_session,
            "session/resume": self.resume_session,
            "session/close": self.close_session,
            "session/set_mode": self.set_session_mode,
            "session/set_config_option": self.set_config_option,
            "session/prompt": self.prompt,
        }
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

    # -- dispatch ------------------------------------------------------------------------

    def handle_request(self, incoming: Incoming) -> Json:
        handler = self._methods.get(incoming.method)
        if handler is None:
            raise RequestError.method_not_found(incoming.method)
        return handler(incoming)

    def handle_notification(self, method: str, params: Json, arrival: int) -> None:
        """session/cancel stops the session's turn; $/cancel_request withdraws a request
        (only a slow close or resume heeds it). Any other notification is ignored."""
        if method == "session/cancel":
            session = self._sessions.get(params.get("sessionId", ""))
            if session is not None:
                session.cancel(arrival)
        elif method == "$/cancel_request":
            request_id = params.get("requestId")
            self._note(f"cancel_request {request_id}")
            self.conn.cancel_incoming(request_id)

    def _update(self, session_id: str, update: Json) -> None:
        """Sends a session/update notification."""
        self.conn.notify("session/update", {"sessionId": session_id, "update": update})

    # -- lifecycle -----------------------------------------------------------------------

    def initialize(self, incoming: Incoming) -> Json:
        incoming.param("protocolVersion")  # answered with acp's, whatever the client's
        auth_methods: list[Json] = []
        if self._key_login:
            auth_methods.append({"id": "api-key", "name": "Use an API key"})
        if self._auth_required or self._key_login:
            auth_methods.append(
                {"id": "login", "name": "Log in",
                 "description": "Run `fake-agent login` on the server"}
            )  # fmt: skip
        session_capabilities: Json = {}
        if self._can_resume:
            session_capabilities["resume"] = {}
        if self._can_close:
            session_capabilities["close"] = {}
        return {
            "protocolVersion": PROTOCOL_VERSION,
            "agentCapabilities": {
                "loadSession": self._can_load,
                "promptCapabilities": {"image": False, "embeddedContext": self._embeds},
                "sessionCapabilities": session_capabilities,
            },
            "authMethods": auth_methods,
            "agentInfo": {"name": AGENT_NAME, "version": AGENT_VERSION},
        }

    def authenticate(self, incoming: Incoming) -> Json:
        method_id = incoming.param("methodId")
        self._note(f"authenticate {method_id}")
        if method_id != "api-key" or not self._key_login or not os.environ.get(self._key_login):
            raise RequestError.auth_required()
        self._logged_in = True
        return {}

    def new_session(self, incoming: Incoming) -> Json:
        if self._auth_required or (self._key_login and not self._logged_in):
            raise RequestError.auth_required()
        servers = incoming.param("mcpServers") or []
        session_id = _uuid4_hex()
        session = Session(cwd=incoming.param("cwd"), mcp_servers=[s["name"] for s in servers])
        session.take_servers(servers)
        self._sessions[session_id] = session
        self._note(f"new {session_id}")
        commands = {"availableCommands": COMMANDS, "sessionUpdate": "available_commands_update"}
        self._update(session_id, commands)
        self._update(session_id, _current_mode("default"))
        return {"sessionId": session_id, **self._options(session_id)}

    def _options(self, session_id: str) -> Json:
        """The session's config options, its model (one of two), as a result's field;
        none with --no-config-options."""
        if not self._config_options:
            return {}
        current = self._sessions[session_id].model
        option = {
            "currentValue": current, "options": MODEL_CHOICES, "id": "model", "name": "Model",
            "category": "model", "type": "select",
        }  # fmt: skip
        return {"configOptions": [option]}

    def set_config_option(self, incoming: Incoming) -> Json:
        config_id, value = incoming.param("configId"), incoming.param("value")
        if not self._config_options or config_id != "model" or value not in ("fast", "smart"):
            raise RequestError.invalid_params({"configId": config_id, "value": value})
        session_id = incoming.param("sessionId")
        self._sessions[session_id].model = str(value)
        return self._options(session_id)

    def load_session(self, incoming: Incoming) -> Json:
        if not self._can_load:
            raise RequestError.method_not_found(incoming.method)
        if self._auth_required:
            raise RequestError.auth_required()
        session_id, cwd = incoming.param("sessionId"), incoming.param("cwd")
        self._take_up(session_id, cwd, incoming.param("mcpServers"))
        self._note(f"load {session_id}")
        self._update(session_id, _current_mode("default"))
        return self._options(session_id)

    def _take_up(self, session_id: str, cwd: str, servers: list[Json] | None) -> None:
        """A loaded or resumed session: a new one if this process never saw it."""
        servers = servers or []
        session = self._sessions.get(session_id)
        if session is None:
            session = Session(cwd=cwd, mcp_servers=[s["name"] for s in servers])
            self._sessions[session_id] = session
        else:
            session.cwd = cwd
        session.take_servers(servers)

    def resume_session(self, incoming: Incoming) -> Json:
        if not self._can_resume:
            raise RequestError.method_not_found(incoming.method)
        session_id, cwd = incoming.param("sessionId"), incoming.param("cwd")
        self._note(f"resume {session_id}")
        self._maybe_slow(incoming, f"resume {session_id}")
        # (session/resume's mcpServers is optional; session/load's is not)
        self._take_up(session_id, cwd, incoming.params.get("mcpServers"))
        return self._options(session_id)

    def close_session(self, incoming: Incoming) -> Json:
        if not self._can_close:
            raise RequestError.method_not_found(incoming.method)
        session_id = incoming.param("sessionId")
        self._note(f"close {session_id}")
        self._maybe_slow(incoming, f"close {session_id}")
        self._sessions.pop(session_id, None)
        return {}

    def _maybe_slow(self, incoming: Incoming, said: str) -> None:
        """A slow method waits for $/cancel_request, then fails with Request cancelled."""
        if incoming.method not in self._slow_methods:
            return
        incoming.cancelled.wait()
        self._note(f"{said} cancelled")
        raise RequestError.cancelled()

    def set_session_mode(self, incoming: Incoming) -> Json:
        session_id, mode_id = incoming.param("sessionId"), incoming.param("modeId")
        self._sessions[session_id].mode = mode_id
        self._update(session_id, _current_mode(mode_id))
        return {}

    def _note(self, line: str) -> None:
        if self._log is None:
            return
        if self._log == "-":  # on stderr, which the server logs: out of any sandbox
            print(f"lifecycle: {line}", file=sys.stderr, flush=True)
            return
        with open(self._log, "a") as log:
            log.write(line + "\n")

    # -- prompts -------------------------------------------------------------------------

    def prompt(self, incoming: Incoming) -> Json:
        session_id = incoming.param("sessionId")
        session = self._sessions.get(session_id)
        if session is None:
            raise RequestError.invalid_params(
                {"sessionId": session_id, "details": "unknown session"}
            )
        session.begin_turn(incoming.arrival)
        blocks = incoming.param("prompt")
        texts = [block["text"] for block in blocks if block.get("type") == "text"]
        resources = [
            f"resource:{block['resource']['uri']}"
            for block in blocks
            if block.get("type") == "resource"
        ]
        text = " ".join(texts)
        turn = Turn(session_id, session, text, resources)
        try:
            for index, word in enumerate(turn.words):
                name, _, arg = word.partition(":")
                action = self._actions.get(name)
                if action is None:
                    continue
                following = turn.words[index + 1] if index + 1 < len(turn.words) else None
                action(turn, arg, following)
                if session.cancelled.is_set():
                    raise TurnCancelled
        except TurnCancelled:
            return {"stopReason": "cancelled"}
        closing = f"turn {session.turns} of session {session_id} in process {_PROCESS}"
        if resources:
            closing += " resources: " + ", ".join(resources)
        self._say(turn, closing)
        return {"stopReason": "end_turn"}

    def _say(self, turn: Turn, text: str) -> None:
        self._update(turn.session_id, _chunk("agent_message_chunk", text))

    def _absolute(self, turn: Turn, path: str) -> str:
        return path if os.path.isabs(path) else os.path.join(turn.session.cwd, path)

    # -- keyword actions -----------------------------------------------------------------

    def _think(self, turn: Turn, arg: str, following: str | None) -> None:
        self._update(turn.session_id, _chunk("agent_thought_chunk", f"considering: {turn.text}"))

    def _plan(self, turn: Turn, arg: str, following: str | None) -> None:
        entries = [
            {"content": content, "priority": "medium", "status": status}
            for content, status in (("look", "completed"), ("fix", "in_progress"),
                                    ("test", "pending"))
        ]  # fmt: skip
        self._update(turn.session_id, {"entries": entries, "sessionUpdate": "plan"})

    def _tool(self, turn: Turn, arg: str, following: str | None) -> None:
        call_id = turn.session.next_tool_call_id()
        self._update(
            turn.session_id,
            _tool_call(call_id, "Read calc.py", "read", raw_input={"path": "calc.py"}),
        )
        output = [_tool_text("def add(a, b): return a - b")]
        self._update(turn.session_id, _tool_call_done(call_id, "completed", output))

    def _edit(self, turn: Turn, arg: str, following: str | None) -> None:
        call_id = turn.session.next_tool_call_id()
        diff = _diff(os.path.join(turn.session.cwd, "calc.py"), old_text="a\n", new_text="b\n")
        self._update(turn.session_id, _tool_call(call_id, "Write calc.py", "edit", content=[diff]))
        self._update(turn.session_id, _tool_call_done(call_id, "completed"))

    def _fail(self, turn: Turn, arg: str, following: str | None) -> None:
        call_id = turn.session.next_tool_call_id()
        self._update(turn.session_id, _tool_call(call_id, "Run tests", "execute"))
        output = [_tool_text("2 tests failed")]
        self._update(turn.session_id, _tool_call_done(call_id, "failed", output))

    def _ask(self, turn: Turn, arg: str, following: str | None) -> None:
        self._permission(turn, "rm -rf build", "rm -rf build")

    def _permission(self, turn: Turn, title: str, command: str) -> None:
        """session/request_permission for an execute tool call; says what was chosen."""
        tool_call = {
            "toolCallId": turn.session.next_tool_call_id(), "kind": "execute", "title": title,
            "rawInput": {"command": command},
        }  # fmt: skip
        params: Json = {"sessionId": turn.session_id, "toolCall": tool_call}
        params["options"] = PERMISSION_OPTIONS
        try:
            response = self.conn.request("session/request_permission", params)
        except RequestError as exc:
            self._say(turn, f"permission refused: {exc}\n")
            return
        outcome = response["outcome"]
        if outcome.get("outcome") == "selected":
            self._say(turn, f"permission: {outcome['optionId']}\n")
        else:
            self._say(turn, "permission cancelled\n")

    def _shell(self, turn: Turn, arg: str, following: str | None) -> None:
        self._in_terminal(
            turn, "shell", sys.executable, ["-c", "print('from the terminal')"],
            {"FAKE_AGENT_VAR": "1"},
        )  # fmt: skip

    def _run(self, turn: Turn, arg: str, following: str | None) -> None:
        command = base64.b64decode(arg).decode()
        self._permission(turn, f"Run {command}", command)

    def _terminal(self, turn: Turn, arg: str, following: str | None) -> None:
        chosen = json.loads(base64.b64decode(arg))
        self._in_terminal(
            turn, "terminal", chosen["command"], chosen.get("args", []), chosen.get("env", {})
        )

    def _in_terminal(
        self, turn: Turn, label: str, command: str, args: list[str], env: dict[str, str]
    ) -> None:
        """terminal/create, wait for its exit, say its output (as "<label> said …"), release."""
        try:
            created = self.conn.request(
                "terminal/create",
                {"sessionId": turn.session_id, "command": command, "args": args,
                 "env": _env(env), "cwd": turn.session.cwd},
            )  # fmt: skip
        except RequestError as exc:
            self._say(turn, f"terminal refused: {exc}\n")
            return
        terminal = {"sessionId": turn.session_id, "terminalId": created["terminalId"]}
        try:
            self.conn.request("terminal/wait_for_exit", terminal)
            output = self.conn.request("terminal/output", terminal)
            self._say(turn, f"{label} said {output['output'].strip()}\n")
        except RequestError as exc:
            self._say(turn, f"terminal failed: {exc}\n")
        finally:
            self.conn.request("terminal/release", terminal)

    def _read_file(
        self, turn: Turn, path: str, line: int | None = None, limit: int | None = None
    ) -> str:
        """fs/read_text_file: the client's text of the file (line and limit if given)."""
        params: Json = {"sessionId": turn.session_id, "path": path}
        if line is not None:
            params["line"] = line
        if limit is not None:
            params["limit"] = limit
        response = self.conn.request("fs/read_text_file", params)
        return str(response["content"])

    def _read(self, turn: Turn, arg: str, following: str | None) -> None:
        path, *numbers = arg.split(":")
        if not path:
            return
        line, limit = ([int(n) for n in numbers] + [None, None])[:2]
        try:
            content = self._read_file(turn, self._absolute(turn, path), line, limit)
        except RequestError as exc:
            self._say(turn, f"read refused: {exc} {exc.data}\n")
            return
        self._say(turn, f"read: {content}\n")

    def _write(self, turn: Turn, arg: str, following: str | None) -> None:
        path, _, size = arg.partition(":")
        if not path:
            return
        content = "x" * int(size) if size else "written by fake\n"
        params = {"sessionId": turn.session_id, "path": self._absolute(turn, path),
                  "content": content}  # fmt: skip
        try:
            self.conn.request("fs/write_text_file", params)
        except RequestError as exc:
            self._say(turn, f"write refused: {exc} {exc.data}\n")
            return
        self._say(turn, f"wrote {path}\n")

    def _fifo(self, turn: Turn, arg: str, following: str | None) -> None:
        os.mkfifo(self._absolute(turn, arg))
        self._say(turn, f"made fifo {arg}\n")

    def _sparse(self, turn: Turn, arg: str, following: str | None) -> None:
        path, size = arg.rsplit(":", 1)
        fd = os.open(self._absolute(turn, path), os.O_WRONLY | os.O_CREAT)
        os.ftruncate(fd, int(size))
        os.close(fd)
        self._say(turn, f"made sparse {path}\n")

    def _hardlink(self, turn: Turn, arg: str, following: str | None) -> None:
        link, target = arg.split(":", 1)
        os.link(target, self._absolute(turn, link))
        self._say(turn, f"linked {link}\n")

    def _race(self, turn: Turn, arg: str, following: str | None) -> None:
        name, outside = arg.split(":", 1)
        directory = self._absolute(turn, name)
        os.makedirs(directory, exist_ok=True)
        with open(os.path.join(directory, "f"), "w") as inside:
            inside.write("inside\n")
        link = directory + ".link"
        os.symlink(outside, link)
        stop = threading.Event()
        swapper = threading.Thread(target=_swap_until, args=(directory, link, stop))
        swapper.start()
        counts = {"inside": 0, "outside": 0, "refused": 0, "missing": 0}
        try:
            for _ in range(_int_or(following, 100)):
                try:
                    content = self._read_file(turn, os.path.join(directory, "f"))
                except RequestError as exc:
                    counts["refused" if "outside" in str(exc.data) else "missing"] += 1
                    continue
                counts["inside" if content == "inside\n" else "outside"] += 1
        finally:
            stop.set()
            swapper.join()
        self._say(turn, "race: " + " ".join(f"{k}={v}" for k, v in counts.items()) + "\n")

    def _peek(self, turn: Turn, arg: str, following: str | None) -> None:
        said = f"peek {arg} parent={os.getppid()}"
        try:
            with open(arg, "rb") as peeked:
                data = peeked.read()
        except OSError as exc:
            self._say(turn, f"{said} error={exc.strerror}\n")
            return
        seen = "yes" if following and following.encode() in data else "no"
        self._say(turn, f"{said} bytes={len(data)} marker={seen}\n")

    def _slow(self, turn: Turn, arg: str, following: str | None) -> None:
        ticks = _int_or(following, DEFAULT_SLOW_TICKS)
        for i in range(1, ticks + 1):
            if turn.session.cancelled.wait(timeout=1.0):
                raise TurnCancelled
            self._say(turn, f"tick {i}/{ticks}\n")

    def _hang(self, turn: Turn, arg: str, following: str | None) -> None:
        time.sleep(3600)

    def _crash(self, turn: Turn, arg: str, following: str | None) -> None:
        self._say(turn, "about to crash\n")
        sys.stderr.write("fatal: fake agent crashed on purpose\n")
        sys.stderr.flush()
        os._exit(3)

    def _setup(self, turn: Turn, arg: str, following: str | None) -> None:
        servers = ",".join(turn.session.mcp_servers) or "none"
        self._say(turn, f"mode: {turn.session.mode}; mcp: {servers}\n")

    def _mcp(self, turn: Turn, arg: str, following: str | None) -> None:
        tool, _, encoded = arg.partition(":")
        args = json.loads(base64.b64decode(encoded)) if encoded else {}
        spec = turn.session.stdio.get("tailagent")
        if spec is None:
            self._say(turn, f"mcp {tool} error: no MCP server named tailagent\n")
            return
        import asyncio  # only this word needs it (and the `mcp` package): the others start faster

        result = asyncio.run(self._call_mcp_tool(turn, spec, tool, args))
        text = " ".join(getattr(c, "text", "") for c in result.content)
        said = "error" if result.is_error else "said"
        self._say(turn, f"mcp {tool} {said}: {text}\n")

    async def _call_mcp_tool(self, turn: Turn, spec: Json, tool: str, args: Json) -> Any:
        """Starts the stdio MCP server `spec` as a real agent does, with the `mcp` package's
        client, and calls `tool`; says each progress notification it sends meanwhile."""
        from mcp import Client
        from mcp.client.stdio import StdioServerParameters

        async def said_progress(progress: float, total: float | None, message: str | None) -> None:
            self._say(turn, f"mcp progress: {message}\n")

        env = {e["name"]: e["value"] for e in spec.get("env") or []}
        server = StdioServerParameters(
            command=spec["command"], args=list(spec.get("args") or []), env=env
        )
        async with Client(server) as client:
            return await client.call_tool(tool, args, progress_callback=said_progress)

    def _connect(self, turn: Turn, arg: str, following: str | None) -> None:
        import socket  # only this word needs it

        try:
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as client:
                client.connect(arg)
            outcome = "ok"
        except OSError as exc:
            outcome = f"{type(exc).__name__}: {exc.strerror}"
        self._say(turn, f"connect {arg}: {outcome}\n")

    def _env(self, turn: Turn, arg: str, following: str | None) -> None:
        self._say(turn, "env: " + ",".join(sorted(os.environ)) + "\n")

    def _noise(self, turn: Turn, arg: str, following: str | None) -> None:
        for i in range(1, _int_or(following, DEFAULT_NOISE_LINES) + 1):
            sys.stderr.write(f"noise line {i}\n")
            sys.stderr.flush()

    def _chunks(self, turn: Turn, arg: str, following: str | None) -> None:
        for i in range(1, _int_or(following, DEFAULT_CHUNKS) + 1):
            self._say(turn, f"chunk {i} ")

    def _elicit(self, turn: Turn, arg: str, following: str | None) -> None:
        params = {
            "sessionId": turn.session_id, "message": "Where should the build go?",
            "mode": "form", "requestedSchema": ELICITATION_SCHEMA,
        }  # fmt: skip
        try:
            response = self.conn.request("elicitation/create", params)
        except RequestError as exc:
            self._say(turn, f"elicitation refused: {exc}\n")
            return
        action = response["action"]
        self._note(f"elicitation answered {action}")
        # acp's decline and cancel answers carry no content; accept's (and an unknown
        # action's) may.
        content = None if action in ("decline", "cancel") else response.get("content")
        self._say(turn, f"elicited: {action} {json.dumps(content, sort_keys=True)}\n")

    def _model(self, turn: Turn, arg: str, following: str | None) -> None:
        self._say(turn, f"model: {turn.session.model}\n")

    def _usage(self, turn: Turn, arg: str, following: str | None) -> None:
        amount, _, currency = arg.partition(":")
        update: Json = {"used": 1000 * turn.session.turns, "size": 200000}
        if amount:
            update["cost"] = {"amount": float(amount), "currency": currency or "USD"}
        update["sessionUpdate"] = "usage_update"
        self._update(turn.session_id, update)

    def _hostile(self, turn: Turn, arg: str, following: str | None) -> None:
        session_id = turn.session_id
        self._update(session_id, _chunk("agent_thought_chunk", f"thought {HOSTILE}"))
        self._say(turn, f"said {HOSTILE}\n")
        read_id = turn.session.next_tool_call_id()
        self._update(
            session_id,
            _tool_call(read_id, f"Read {HOSTILE}", "read", raw_input={"path": HOSTILE}),
        )
        output = [_tool_text(f"output {HOSTILE}")]
        self._update(session_id, _tool_call_done(read_id, "completed", output))
        path, content = os.path.join(turn.session.cwd, "hostile.txt"), f"file {HOSTILE}\n"
        self.conn.request(
            "fs/write_text_file", {"sessionId": session_id, "path": path, "content": content}
        )
        edit_id = turn.session.next_tool_call_id()
        diff = _diff(path, old_text="", new_text=content)
        self._update(session_id, _tool_call(edit_id, f"Write {HOSTILE}", "edit", content=[diff]))
        self._update(session_id, _tool_call_done(edit_id, "completed"))
        self._permission(turn, f"Run {HOSTILE}", HOSTILE)


def _swap_until(directory: str, link: str, stop: threading.Event) -> None:
    """Exchanges the names of a directory and a symlink (renameat2 RENAME_EXCHANGE), so
    the name is always one or the other, until `stop` is set."""
    import ctypes  # only the race word needs it

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
    parser.add_argument("--log", help="append the lifecycle calls it gets here")
    parser.add_argument(
        "--key-login", metavar="VAR", help="list login methods; open sessions once logged in "
        "with `api-key`, which takes VAR from the environment"
    )  # fmt: skip
    args = parser.parse_args(argv)
    if args.slow_start > 0:
        time.sleep(args.slow_start)
    slow = (("session/close", args.slow_close), ("session/resume", args.slow_resume))
    agent = FakeAgent(
        can_load=not args.no_load,
        auth_required=args.auth_required,
        key_login=args.key_login,
        embeds=not args.no_embedded_context,
        can_resume=not args.no_resume,
        can_close=not args.no_close,
        slow=tuple(method for method, chosen in slow if chosen),
        config_options=not args.no_config_options,
        log=args.log,
    )
    agent.conn.serve()
    # What still runs (a hung turn, a slow close) is left unanswered: daemon threads.


if __name__ == "__main__":
    main()
