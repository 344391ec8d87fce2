#!/usr/bin/env python3
"""A scriptable stand-in for the Claude Code CLI, for the tests.

`tailagent --agent claude` drives Claude Code through the Claude Agent SDK, which
runs the CLI as a subprocess and speaks NDJSON "stream-json" over its stdin and
stdout, with a control protocol layered on top (initialize, can_use_tool
permission prompts, interrupt, ...). The tests need a CLI that speaks exactly that
wire protocol, so that the real SDK parses what it says, but whose behaviour is
chosen by the test, costs nothing and needs no login: this is it. Point the SDK at
it with `ClaudeAgentOptions(cli_path=".../tests/fake_claude_cli.py")`.

Each user message is scanned for keywords, lower-case words acted on in order of
appearance:

    think         thinking block "considering: <text>"
    todo          TodoWrite tool call (two todos), then its tool_result
    write         Write <cwd>/new.txt ("hello\\n"), then its tool_result
    edit          Edit <cwd>/calc.py ("a - b" -> "a + b"), then its tool_result
    bash          Bash "rm -rf build" (bash:WORD runs "rm -rf WORD"), behind a
                  can_use_tool permission prompt; "ran: <command>" if allowed,
                  "denied: <message>" if not (a deny with interrupt ends the turn
                  with an error_during_execution result)
    question      AskUserQuestion (red or blue) behind a can_use_tool prompt;
                  "you chose <answer>" from updatedInput.answers, or
                  "no answer: <message>" if denied
    slow N        N texts "tick i/N", one a second, cut short by an interrupt
                  (the turn then ends with error_during_execution, terminal_reason
                  aborted_streaming)
    attack {...}  (the whole message) a hostile CLI: carries out the JSON plan of
                  tests/attacks.py on the system directly, and answers with its results
    nologin       what the CLI says with no credentials: an assistant message
                  "Not logged in · Please run /login" with error
                  "authentication_failed", then an is_error result, at once
                  (FAKE_CLAUDE_NOT_LOGGED_IN=1 does this for every turn)
    crash         "fatal: fake claude crashed" on stderr, then exit status 1
    cost:N        the turn costs N dollars (else 0.0123)
    mcp:TOOL[:B64]  a call of tool mcp__tailagent__TOOL with the JSON B64 decodes to ({}
                  without it), made as the CLI makes one to an SDK MCP server: mcp_message
                  control requests (initialize, notifications/initialized, tools/call) to
                  server "tailagent", behind a can_use_tool prompt unless allowed;
                  "mcp TOOL said: <text>" (or "mcp TOOL error: <text>")

As the real CLI does, each result's total_cost_usd (and modelUsage's costUSD) is the
running total of every turn this process served. With --max-budget-usd B, a turn that
brings that total to B or more ends with an error_max_budget_usd result.

A turn starts with a `system` init message and ends with the assistant text
"echo: <prompt text>" and a `result` (subtype success; the turn costs 0.0123).
Write and Edit are not performed: only their messages are sent. Permission prompts
follow the permission mode as the CLI does: Write/Edit ask unless the mode is
acceptEdits or bypassPermissions, Bash asks unless bypassPermissions or an allow
rule (from --allowedTools, or sent back in updatedPermissions) covers it.

The session id is --session-id, else --resume (unless --fork-session), else a new
uuid4. The process stays up for any number of turns and exits when stdin closes
(status 1 if the last result was an error, as the CLI does).

If FAKE_CLAUDE_LOG names a file, one JSON line per event is appended to it (with
FAKE_CLAUDE_LOG=-, written to stderr as "fake-claude-log: <json>", which tailagent logs):
{"argv": [...], "cwd": ...} (the whole argv, and where it runs) at start, {"user": text}
per user message, {"permission_response": ...} per answer to a can_use_tool prompt (the `response`
object of a success control_response, e.g. {"behavior": "deny", "message": ...,
"interrupt": true}; the whole response for an error one), {"interrupt": true} per
interrupt control request.

Run: tests/fake_claude_cli.py --output-format stream-json --verbose --input-format stream-json
"""

from __future__ import annotations

import base64
import json
import os
import queue
import re
import sys
import threading
import time
import uuid
from collections.abc import Callable
from typing import Any

VERSION = "2.1.332"
DEFAULT_MODEL = "claude-opus-5-5"
COST_USD = 0.0123
NOT_LOGGED_IN = "Not logged in · Please run /login"
TOOLS = [
    "Task",
    "AskUserQuestion",
    "Bash",
    "Edit",
    "Glob",
    "Grep",
    "Read",
    "TodoWrite",
    "WebFetch",
    "WebSearch",
    "Write",
]
EDIT_TOOLS = ("Write", "Edit", "MultiEdit", "NotebookEdit")
TODOS = [
    {"content": "Read the code", "status": "completed", "activeForm": "Reading"},
    {"content": "Fix it", "status": "in_progress", "activeForm": "Fixing"},
]
QUESTION: dict[str, Any] = {
    "question": "Which colour do you prefer?",
    "header": "Colour",
    "options": [
        {"label": "red", "description": "Choose red"},
        {"label": "blue", "description": "Choose blue"},
    ],
    "multiSelect": False,
}
# Flags the SDK passes with a separate value token (the rest are switches, or
# --flag=value).
VALUE_FLAGS = {
    "--output-format",
    "--input-format",
    "--system-prompt",
    "--system-prompt-file",
    "--append-system-prompt",
    "--tools",
    "--allowedTools",
    "--disallowedTools",
    "--max-turns",
    "--max-budget-usd",
    "--task-budget",
    "--model",
    "--fallback-model",
    "--betas",
    "--permission-prompt-tool",
    "--permission-mode",
    "--resume",
    "--session-id",
    "--settings",
    "--add-dir",
    "--mcp-config",
    "--plugin-dir",
    "--setting-sources",
    "--thinking",
    "--thinking-display",
    "--max-thinking-tokens",
    "--effort",
    "--json-schema",
}


def parse_args(argv: list[str]) -> dict[str, list[str | None]]:
    """Flags as the SDK builds them: `--flag value`, `--flag=value` or `--flag`."""
    flags: dict[str, list[str | None]] = {}
    i = 0
    while i < len(argv):
        arg = argv[i]
        i += 1
        if not arg.startswith("-"):
            continue
        value: str | None = None
        if "=" in arg and arg.startswith("--"):
            arg, value = arg.split("=", 1)
        elif i < len(argv) and (arg in VALUE_FLAGS or not argv[i].startswith("-")):
            value = argv[i]
            i += 1
        flags.setdefault(arg, []).append(value)
    return flags


def new_id(prefix: str) -> str:
    return prefix + uuid.uuid4().hex[:24]


class Interrupted(Exception):
    """The turn was stopped: by an interrupt, an interrupting deny, or lost stdin."""

    def __init__(self, terminal_reason: str, marker: str) -> None:
        super().__init__(terminal_reason)
        self.terminal_reason = terminal_reason
        self.marker = marker


class MaxTurns(Exception):
    """The turn needs another model request, and --max-turns says no."""


class FakeClaude:
    def __init__(self, argv: list[str]) -> None:
        self.argv = argv
        self.flags = parse_args(argv[1:])
        self.cwd = os.getcwd()
        self.model = self.flag("--model") or DEFAULT_MODEL
        self.mode = self.flag("--permission-mode") or "default"
        max_turns = self.flag("--max-turns")
        self.max_turns = int(max_turns) if max_turns and max_turns.isdigit() else None
        self.allow_rules: set[str] = {
            rule.strip()
            for value in self.flags.get("--allowedTools", [])
            for rule in (value or "").split(",")
            if rule.strip()
        }
        resume = self.flag("--resume")
        explicit = self.flag("--session-id")
        if explicit:
            self.session_id = explicit
        elif resume and "--fork-session" not in self.flags:
            self.session_id = resume
        else:
            self.session_id = str(uuid.uuid4())
        self.report_state = os.environ.get("CLAUDE_CODE_SDK_READS_SESSION_STATE", "") not in (
            "",
            "0",
        )
        self.replay = "--replay-user-messages" in self.flags
        self.not_logged_in = os.environ.get("FAKE_CLAUDE_NOT_LOGGED_IN") == "1"
        self.log_path = os.environ.get("FAKE_CLAUDE_LOG")

        self._out_lock = threading.Lock()
        self._log_lock = threading.Lock()
        self._state_lock = threading.Lock()
        self._inbox: queue.Queue[dict[str, Any] | None] = queue.Queue()
        self._pending: dict[str, tuple[threading.Event, list[dict[str, Any]]]] = {}
        self._turns_owed = 0  # user messages taken in and not yet answered
        self._interrupted = threading.Event()
        self._eof = threading.Event()
        self.last_result_error = False
        self.total_cost = 0.0  # of every turn so far: what each result restates
        budget = self.flag("--max-budget-usd")
        self.max_budget = float(budget) if budget else None

    def flag(self, name: str) -> str | None:
        values = self.flags.get(name)
        return values[-1] if values else None

    # -- output -------------------------------------------------------------------------------

    def emit(self, message: dict[str, Any]) -> None:
        line = json.dumps(message, ensure_ascii=False, separators=(",", ":")) + "\n"
        try:
            with self._out_lock:
                sys.stdout.buffer.write(line.encode("utf-8"))
                sys.stdout.buffer.flush()
        except (BrokenPipeError, ValueError, OSError):
            os._exit(0)  # the SDK has gone; so do we

    def log(self, entry: dict[str, Any]) -> None:
        if not self.log_path:
            return
        if self.log_path == "-":  # on stderr, which tailagent logs: out of any sandbox
            line = json.dumps(entry, ensure_ascii=False)
            with self._log_lock:
                print(f"fake-claude-log: {line}", file=sys.stderr, flush=True)
            return
        with self._log_lock, open(self.log_path, "a", encoding="utf-8") as f:
            f.write(json.dumps(entry, ensure_ascii=False) + "\n")

    def state(self, state: str) -> None:
        if self.report_state:
            self.emit(
                {
                    "type": "system",
                    "subtype": "session_state_changed",
                    "state": state,
                    "sdk_host_only": True,
                    "uuid": str(uuid.uuid4()),
                    "session_id": self.session_id,
                }
            )

    # -- stdin --------------------------------------------------------------------------------

    def read_stdin(self) -> None:
        """Runs in its own thread: answers control requests at once, routes control
        responses to whoever waits for them, and queues user messages for the turns."""
        for raw in sys.stdin.buffer:
            line = raw.decode("utf-8", errors="replace").strip()
            if not line:
                continue
            try:
                message = json.loads(line)
            except json.JSONDecodeError:
                print(f"fake claude: not JSON on stdin: {line[:200]}", file=sys.stderr)
                continue
            if not isinstance(message, dict):
                continue
            kind = message.get("type")
            if kind == "control_request":
                self.control_request(message)
            elif kind == "control_response":
                response = message.get("response") or {}
                waiter = self._pending.get(str(response.get("request_id")))
                if waiter is not None:
                    waiter[1].append(response)
                    waiter[0].set()
            elif kind == "user":
                with self._state_lock:
                    self._turns_owed += 1
                self._inbox.put(message)
        self._eof.set()
        self._inbox.put(None)

    def control_request(self, message: dict[str, Any]) -> None:
        request = message.get("request") or {}
        subtype = request.get("subtype")
        body: dict[str, Any] = {}
        if subtype == "initialize":
            body = self.initialize_response()
        elif subtype == "interrupt":
            self.log({"interrupt": True})
            with self._state_lock:
                if self._turns_owed:
                    self._interrupted.set()
        elif subtype == "set_permission_mode":
            self.mode = str(request.get("mode") or "default")
        elif subtype == "set_model":
            self.model = str(request.get("model") or DEFAULT_MODEL)
        elif subtype == "mcp_status":
            body = {"mcpServers": []}
        self.emit(
            {
                "type": "control_response",
                "response": {
                    "subtype": "success",
                    "request_id": message.get("request_id"),
                    "response": body,
                },
            }
        )

    def initialize_response(self) -> dict[str, Any]:
        return {
            "commands": [],
            "agents": [],
            "output_style": "default",
            "available_output_styles": ["default"],
            "models": [
                {
                    "value": "default",
                    "resolvedModel": DEFAULT_MODEL,
                    "displayName": "Default (recommended)",
                    "description": "The fake's only model",
                }
            ],
            "account": {"tokenSource": "none", "apiProvider": "firstParty"},
            "pid": os.getpid(),
            "claude_code_version": VERSION,
            "current_permission_mode": self.mode,
            "hook_on_failure_supported": True,
            "session_state": "idle",
            "capabilities": [],
        }

    def mcp(self, server: str, message: dict[str, Any]) -> dict[str, Any]:
        """One JSON-RPC message to an SDK MCP server, over the control protocol: the
        `mcp_response` the SDK answers with."""
        request_id = str(uuid.uuid4())
        event = threading.Event()
        answers: list[dict[str, Any]] = []
        self._pending[request_id] = (event, answers)
        request = {"subtype": "mcp_message", "server_name": server, "message": message}
        self.emit({"type": "control_request", "request_id": request_id, "request": request})
        try:
            while not event.wait(0.02):
                if self._eof.is_set():
                    return {"error": {"message": "stdin closed"}}
        finally:
            self._pending.pop(request_id, None)
        response = answers[0].get("response") or {}
        return dict(response.get("mcp_response") or {"error": answers[0].get("error")})

    def ask_permission(self, request: dict[str, Any]) -> dict[str, Any]:
        """Send a can_use_tool control request and wait for the SDK's answer. An
        interrupt (or stdin closing) meanwhile cancels the request and the turn."""
        request_id = str(uuid.uuid4())
        event = threading.Event()
        answers: list[dict[str, Any]] = []
        self._pending[request_id] = (event, answers)
        self.state("requires_action")
        self.emit({"type": "control_request", "request_id": request_id, "request": request})
        try:
            while not event.wait(0.02):
                if self._interrupted.is_set() or self._eof.is_set():
                    self.emit({"type": "control_cancel_request", "request_id": request_id})
                    self.state("running")
                    raise Interrupted("aborted_tools", "[Request interrupted by user for tool use]")
        finally:
            self._pending.pop(request_id, None)
        response = answers[0]
        self.log(
            {
                "permission_response": response.get("response")
                if response.get("subtype") == "success"
                else response
            }
        )
        self.state("running")
        if response.get("subtype") != "success":
            return {"behavior": "deny", "message": str(response.get("error") or "error")}
        payload = response.get("response")
        return payload if isinstance(payload, dict) else {"behavior": "deny", "message": ""}

    # -- the main loop ------------------------------------------------------------------------

    def run(self) -> int:
        threading.Thread(target=self.read_stdin, name="stdin", daemon=True).start()
        while True:
            message = self._inbox.get()
            if message is None:
                return 1 if self.last_result_error else 0
            turn = Turn(self, message)
            try:
                turn.run()
            finally:
                turn.over()

    def turn_over(self) -> None:
        """A turn is answered: an interrupt from now on is for the next one, if any."""
        with self._state_lock:
            self._turns_owed -= 1
            if not self._turns_owed:
                self._interrupted.clear()


class Turn:
    """One user message, answered."""

    def __init__(self, cli: FakeClaude, message: dict[str, Any]) -> None:
        self.cli = cli
        self.message = message
        content = (message.get("message") or {}).get("content")
        if isinstance(content, str):
            self.text = content
        elif isinstance(content, list):
            self.text = "\n".join(
                str(block.get("text", ""))
                for block in content
                if isinstance(block, dict) and block.get("type") == "text"
            )
        else:
            self.text = ""
        self.started = time.monotonic()
        self.requests = 1  # model requests made so far this turn (num_turns)
        self.message_id = new_id("msg_")
        self.denials: list[dict[str, Any]] = []
        self.last_text = ""
        self.user_uuid = message.get("uuid") if isinstance(message.get("uuid"), str) else None
        self.answered = False
        self.said = ""  # what the last MCP call came back with

    def over(self) -> None:
        if not self.answered:
            self.answered = True
            self.cli.turn_over()

    # -- messages -----------------------------------------------------------------------------

    def assistant(self, block: dict[str, Any], **extra: Any) -> None:
        if block.get("type") == "text":
            self.last_text = block["text"]
        self.cli.emit(
            {
                "type": "assistant",
                "message": {
                    "id": self.message_id,
                    "type": "message",
                    "role": "assistant",
                    "model": extra.pop("model", self.cli.model),
                    "content": [block],
                    "stop_reason": extra.pop("stop_reason", None),
                    "stop_sequence": None,
                    "usage": extra.pop("usage", self.usage(10, 5)),
                },
                "parent_tool_use_id": None,
                "session_id": self.cli.session_id,
                "uuid": str(uuid.uuid4()),
                **extra,
            }
        )

    def text_block(self, text: str) -> None:
        self.assistant({"type": "text", "text": text})

    def user(self, content: list[dict[str, Any]], tool_use_result: Any = None) -> None:
        message: dict[str, Any] = {
            "type": "user",
            "message": {"role": "user", "content": content},
            "parent_tool_use_id": None,
            "session_id": self.cli.session_id,
            "uuid": str(uuid.uuid4()),
        }
        if tool_use_result is not None:
            message["tool_use_result"] = tool_use_result
        self.cli.emit(message)

    @staticmethod
    def usage(input_tokens: int, output_tokens: int) -> dict[str, Any]:
        return {
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cache_creation_input_tokens": 0,
            "cache_read_input_tokens": 0,
        }

    def init(self) -> None:
        cli = self.cli
        cli.emit(
            {
                "type": "system",
                "subtype": "init",
                "cwd": cli.cwd,
                "session_id": cli.session_id,
                "tools": TOOLS,
                "mcp_servers": [],
                "model": cli.model,
                "permissionMode": cli.mode,
                "slash_commands": [],
                "apiKeySource": "none",
                "claude_code_version": VERSION,
                "output_style": "default",
                "agents": [],
                "skills": [],
                "plugins": [],
                "capabilities": [],
                "uuid": str(uuid.uuid4()),
            }
        )

    def result(
        self,
        subtype: str,
        is_error: bool,
        terminal_reason: str,
        *,
        result: str | None = None,
        errors: list[str] | None = None,
        stop_reason: str | None = None,
        cost: float = COST_USD,
        usage: dict[str, Any] | None = None,
    ) -> None:
        usage = usage if usage is not None else self.usage(10 * self.requests, 5 * self.requests)
        asked = re.search(r"\bcost:(\d+(?:\.\d+)?)", self.text)
        if cost and asked:
            cost = float(asked.group(1))
        self.cli.total_cost += cost
        total = self.cli.total_cost
        budget = self.cli.max_budget
        if subtype == "success" and budget is not None and total >= budget:
            subtype, is_error, terminal_reason = "error_max_budget_usd", True, "max_budget_usd"
            errors, result = [f"Reached maximum budget (${budget})"], None
        message: dict[str, Any] = {
            "type": "result",
            "subtype": subtype,
            "is_error": is_error,
            "duration_ms": int((time.monotonic() - self.started) * 1000),
            "duration_api_ms": int((time.monotonic() - self.started) * 1000),
            "num_turns": self.requests,
            "stop_reason": stop_reason,
            "session_id": self.cli.session_id,
            "total_cost_usd": total,
            "usage": usage,
            "modelUsage": {}
            if cost == 0
            else {
                self.cli.model: {
                    "inputTokens": usage["input_tokens"],
                    "outputTokens": usage["output_tokens"],
                    "cacheReadInputTokens": 0,
                    "cacheCreationInputTokens": 0,
                    "webSearchRequests": 0,
                    "costUSD": total,
                    "contextWindow": 200000,
                    "maxOutputTokens": 32000,
                }
            },
            "permission_denials": self.denials,
            "terminal_reason": terminal_reason,
            "uuid": str(uuid.uuid4()),
        }
        if result is not None:
            message["result"] = result
        if errors is not None:
            message["errors"] = errors
        if self.user_uuid:
            message["user_message_uuid"] = self.user_uuid
            message["user_message_uuids"] = [self.user_uuid]
        self.cli.last_result_error = is_error
        self.over()  # before the result goes out, so a late interrupt misses this turn
        self.cli.emit(message)

    # -- the turn -----------------------------------------------------------------------------

    def run(self) -> None:
        cli = self.cli
        cli.log({"user": self.text})
        cli.state("running")
        self.init()
        if cli.replay:
            replay = dict(self.message)
            replay.update(session_id=cli.session_id, isReplay=True)
            replay.setdefault("uuid", str(uuid.uuid4()))
            cli.emit(replay)
        words = self.text.split()
        if cli.not_logged_in or "nologin" in words:
            self.not_logged_in()
        elif self.text.startswith("attack {"):
            self.attack(json.loads(self.text.removeprefix("attack ")))
        else:
            try:
                self.check()
                for index, word in enumerate(words):
                    self.keyword(word, words[index + 1 : index + 2])
                    self.check()
                self.text_block(f"echo: {self.text}")
                self.result(
                    "success", False, "completed", result=self.last_text, stop_reason="end_turn"
                )
            except Interrupted as stop:
                self.user([{"type": "text", "text": stop.marker}])
                self.result(
                    "error_during_execution",
                    True,
                    stop.terminal_reason,
                    errors=[
                        "[ede_diagnostic] result_type=user last_content_type=n/a stop_reason=null"
                    ],
                )
            except MaxTurns:
                self.result(
                    "error_max_turns",
                    True,
                    "max_turns",
                    errors=[f"Reached maximum number of turns ({cli.max_turns})"],
                )
        cli.state("idle")

    def attack(self, plan: dict[str, Any]) -> None:
        """What a hostile CLI (or a hook it runs) does on the system directly: the plan of
        tests/attacks.py, its results as the turn's text."""
        from attacks import carry_out  # beside this file, standard library only

        self.text_block(json.dumps(carry_out(plan)))
        self.result("success", False, "completed", result=self.last_text, stop_reason="end_turn")

    def check(self) -> None:
        if self.cli._interrupted.is_set():
            raise Interrupted("aborted_streaming", "[Request interrupted by user]")

    def not_logged_in(self) -> None:
        zero = self.usage(0, 0)
        self.assistant(
            {"type": "text", "text": NOT_LOGGED_IN},
            model="<synthetic>",
            stop_reason="stop_sequence",
            usage=zero,
            error="authentication_failed",
            is_api_error_message=True,
        )
        self.result(
            "success",
            True,
            "api_error",
            result=NOT_LOGGED_IN,
            stop_reason="stop_sequence",
            cost=0,
            usage=zero,
        )

    def keyword(self, word: str, following: list[str]) -> None:
        cwd = self.cli.cwd
        if word == "think":
            self.assistant(
                {
                    "type": "thinking",
                    "thinking": f"considering: {self.text}",
                    "signature": "ZmFrZS1zaWduYXR1cmU=",
                }
            )
        elif word == "todo":
            self.tool(
                "TodoWrite",
                {"todos": TODOS},
                lambda _: (
                    "Todos have been modified successfully. Ensure that you continue to use "
                    "the todo list to track your progress. Please proceed with the current "
                    "tasks if applicable",
                    {"oldTodos": [], "newTodos": TODOS},
                ),
            )
        elif word == "write":
            path = os.path.join(cwd, "new.txt")
            self.tool(
                "Write",
                {"file_path": path, "content": "hello\n"},
                lambda _: (
                    f"File created successfully at: {path}",
                    {
                        "type": "create",
                        "filePath": path,
                        "content": "hello\n",
                        "structuredPatch": [],
                        "originalFile": None,
                    },
                ),
            )
        elif word == "edit":
            path = os.path.join(cwd, "calc.py")
            self.tool(
                "Edit",
                {"file_path": path, "old_string": "a - b", "new_string": "a + b"},
                lambda _: (
                    f"The file {path} has been updated successfully.",
                    {
                        "filePath": path,
                        "oldString": "a - b",
                        "newString": "a + b",
                        "originalFile": None,
                        "structuredPatch": [],
                        "userModified": False,
                        "replaceAll": False,
                    },
                ),
            )
        elif word == "bash" or word.startswith("bash:"):
            target = word.partition(":")[2] or "build"
            self.tool(
                "Bash",
                {"command": f"rm -rf {target}"},
                lambda used: (
                    "removed",
                    {"stdout": "removed", "stderr": "", "interrupted": False, "isImage": False},
                ),
                after=lambda used: self.text_block(f"ran: {used.get('command', '')}"),
                denied=lambda message: self.text_block(f"denied: {message}"),
            )
        elif word == "question":
            self.tool(
                "AskUserQuestion",
                {"questions": [QUESTION]},
                self.question_result,
                after=self.question_answered,
                denied=lambda message: self.text_block(f"no answer: {message}"),
            )
        elif word == "slow":
            count = int(following[0]) if following and following[0].isdigit() else 3
            for i in range(1, count + 1):
                self.check()
                self.text_block(f"tick {i}/{count}")
                if i < count and self.cli._interrupted.wait(1.0):
                    self.check()
        elif word.startswith("mcp:"):
            tool, _, encoded = word[len("mcp:") :].partition(":")
            args = json.loads(base64.b64decode(encoded)) if encoded else {}
            self.tool(
                f"mcp__tailagent__{tool}",
                args,
                lambda used: (self.mcp_call(tool, used), None),
                after=lambda used: self.text_block(self.said),
                denied=lambda message: self.text_block(f"mcp {tool} denied: {message}"),
            )
        elif word == "crash":
            sys.stderr.write("fatal: fake claude crashed\n")
            sys.stderr.flush()
            time.sleep(0.2)  # let the SDK's stderr reader see it before stdout closes
            os._exit(1)

    def mcp_call(self, tool: str, args: dict[str, Any]) -> str:
        """The handshake (as the CLI makes it with each SDK server), then the call."""
        hello = {
            "protocolVersion": "2025-06-18",
            "capabilities": {},
            "clientInfo": {"name": "claude-code", "version": VERSION},
        }
        self.cli.mcp("tailagent", {"jsonrpc": "2.0", "id": 0, "method": "initialize",
                                   "params": hello})  # fmt: skip
        self.cli.mcp("tailagent", {"jsonrpc": "2.0", "method": "notifications/initialized"})
        call = {"name": tool, "arguments": args}
        answer = self.cli.mcp("tailagent", {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                                            "params": call})  # fmt: skip
        result = answer.get("result") or {}
        text = " ".join(str(c.get("text", "")) for c in result.get("content") or [])
        if "error" in answer:
            text = str(answer["error"].get("message"))
        said = "error" if "error" in answer or result.get("isError") else "said"
        self.said = f"mcp {tool} {said}: {text}"
        return text

    @staticmethod
    def answers(used: dict[str, Any]) -> dict[str, Any]:
        answers = used.get("answers")
        return answers if isinstance(answers, dict) else {}

    def question_result(self, used: dict[str, Any]) -> tuple[str, Any]:
        answers = self.answers(used)
        said = ", ".join(f'"{q}"="{a}"' for q, a in answers.items())
        return (
            f"User has answered your questions: {said}. You can now continue with the "
            "user's answers in mind.",
            {"questions": used.get("questions", []), "answers": answers},
        )

    def question_answered(self, used: dict[str, Any]) -> None:
        answers = self.answers(used)
        answer = answers.get(QUESTION["question"])
        if answer is None and answers:
            answer = next(iter(answers.values()))
        self.text_block(f"you chose {answer if answer is not None else ''}")

    # -- tools --------------------------------------------------------------------------------

    def needs_permission(self, name: str, tool_input: dict[str, Any]) -> bool:
        if name == "AskUserQuestion":
            return True  # it needs the user whatever the mode
        if name == "TodoWrite" or self.cli.mode == "bypassPermissions":
            return False
        if name in EDIT_TOOLS and self.cli.mode == "acceptEdits":
            return False
        rules = self.cli.allow_rules
        command = str(tool_input.get("command") or tool_input.get("file_path") or "")
        if name in rules or f"{name}({command})" in rules:
            return False
        return not any(
            rule.startswith(f"{name}(")
            and rule.endswith(":*)")
            and command.startswith(rule[len(name) + 1 : -3])
            for rule in rules
        )

    def tool(
        self,
        name: str,
        tool_input: dict[str, Any],
        run: Callable[[dict[str, Any]], tuple[str, Any]],
        *,
        after: Callable[[dict[str, Any]], None] | None = None,
        denied: Callable[[str], None] | None = None,
    ) -> None:
        """A tool call as the CLI makes one: the assistant's tool_use, a permission
        prompt if one is needed, the tool_result, and the next model request."""
        tool_use_id = new_id("toolu_")
        self.assistant(
            {"type": "tool_use", "id": tool_use_id, "name": name, "input": tool_input},
            stop_reason="tool_use",
        )
        used = tool_input
        if self.needs_permission(name, tool_input):
            if self.cli.mode == "dontAsk" and name != "AskUserQuestion":
                decision: dict[str, Any] = {
                    "behavior": "deny",
                    "message": f"Permission to use {name} has been denied because Claude "
                    "Code is running in don't ask mode.",
                }
            else:
                decision = self.cli.ask_permission(
                    self.permission_request(name, tool_input, tool_use_id)
                )
            if decision.get("behavior") == "allow":
                updated = decision.get("updatedInput")
                used = updated if isinstance(updated, dict) else tool_input
                self.remember(decision.get("updatedPermissions"))
            else:
                message = str(decision.get("message") or "")
                self.denials.append(
                    {"tool_name": name, "tool_use_id": tool_use_id, "tool_input": tool_input}
                )
                self.user(
                    [
                        {
                            "type": "tool_result",
                            "content": message or f"Permission to use {name} has been denied.",
                            "is_error": True,
                            "tool_use_id": tool_use_id,
                        }
                    ],
                    f"Error: {message}",
                )
                if denied is not None:
                    denied(message)
                if decision.get("interrupt"):
                    raise Interrupted("aborted_tools", "[Request interrupted by user for tool use]")
                self.next_request()
                return
        content, structured = run(used)
        self.user(
            [{"tool_use_id": tool_use_id, "type": "tool_result", "content": content}],
            structured,
        )
        self.next_request()
        if after is not None:
            after(used)

    @staticmethod
    def permission_request(
        name: str, tool_input: dict[str, Any], tool_use_id: str
    ) -> dict[str, Any]:
        request: dict[str, Any] = {
            "subtype": "can_use_tool",
            "tool_name": name,
            "display_name": name,
            "input": tool_input,
            "tool_use_id": tool_use_id,
        }
        if name == "AskUserQuestion":
            request["requires_user_interaction"] = True
        else:
            content = str(tool_input.get("command") or tool_input.get("file_path") or "")
            request["permission_suggestions"] = [
                {
                    "type": "addRules",
                    "rules": [{"toolName": name, "ruleContent": content}],
                    "behavior": "allow",
                    "destination": "localSettings",
                }
            ]
        return request

    def remember(self, updates: Any) -> None:
        """Keep the allow rules an answer sends back, as the CLI does for the session."""
        for update in updates if isinstance(updates, list) else []:
            if (
                isinstance(update, dict)
                and update.get("type") == "addRules"
                and update.get("behavior") == "allow"
            ):
                for rule in update.get("rules") or []:
                    name, content = rule.get("toolName"), rule.get("ruleContent")
                    if name:
                        self.cli.allow_rules.add(f"{name}({content})" if content else name)

    def next_request(self) -> None:
        """The tool_result goes back to the model: one more request, unless the turn
        was interrupted meanwhile or --max-turns forbids it."""
        self.check()
        if self.cli.max_turns is not None and self.requests >= self.cli.max_turns:
            raise MaxTurns
        self.requests += 1
        self.message_id = new_id("msg_")


def main() -> int:
    argv = sys.argv
    if "--version" in argv[1:] or "-v" in argv[1:]:
        print(f"{VERSION} (Claude Code)")
        return 0
    cli = FakeClaude(argv)
    cli.log({"argv": argv, "cwd": os.getcwd()})
    if cli.flag("--output-format") != "stream-json" or cli.flag("--input-format") != (
        "stream-json"
    ):
        print(
            "Error: this fake Claude Code only speaks --input-format stream-json "
            "--output-format stream-json",
            file=sys.stderr,
        )
        return 1
    if "--verbose" not in cli.flags:
        print(
            "Error: When using --print, --output-format=stream-json requires --verbose",
            file=sys.stderr,
        )
        return 1
    return cli.run()


if __name__ == "__main__":
    sys.exit(main())
