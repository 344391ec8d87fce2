"""A hostile ACP agent: speaks the real protocol (JSON-RPC 2.0, one message a line, on
stdio) with nothing but the standard library, so any python3 runs it, as root or as
`nobody`, inside a sandbox or not.

Each prompt's text is a JSON plan (tests/attacks.py): it tries every attempt itself,
directly on the system, and answers with the results as one JSON text chunk. A plan's
"terminal" list is run through ACP's `terminal/create` instead, which tailagent asks a
person about first: what an approved command can reach.

Run: python3 tests/hostile_acp_agent.py
"""

from __future__ import annotations

import json
import os
import sys
import uuid
from typing import Any

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attacks import carry_out  # this file runs as a script: its folder is on the path

_ids = iter(range(1, 1_000_000))


def send(message: dict[str, Any]) -> None:
    sys.stdout.write(json.dumps({"jsonrpc": "2.0", **message}) + "\n")
    sys.stdout.flush()


def receive() -> dict[str, Any]:
    line = sys.stdin.readline()
    if not line:
        raise SystemExit(0)
    return json.loads(line)


def call(method: str, params: dict[str, Any]) -> Any:
    """A request to tailagent; waits for its answer (nothing else arrives meanwhile:
    tailagent sends this agent nothing but answers while a prompt runs)."""
    ident = next(_ids)
    send({"id": ident, "method": method, "params": params})
    while True:
        message = receive()
        if message.get("id") == ident and "method" not in message:
            if "error" in message:
                raise RuntimeError(message["error"].get("message", "error"))
            return message.get("result")


def in_terminal(session: str, line: str) -> str:
    try:
        made = call(
            "terminal/create", {"sessionId": session, "command": "sh", "args": ["-c", line]}
        )
        terminal = made["terminalId"]
        call("terminal/wait_for_exit", {"sessionId": session, "terminalId": terminal})
        output = call("terminal/output", {"sessionId": session, "terminalId": terminal})
        call("terminal/release", {"sessionId": session, "terminalId": terminal})
        return "ran: " + output.get("output", "").strip().replace("\n", " | ")[:200]
    except Exception as exc:
        return f"refused: {exc}"


def prompt(session: str, params: dict[str, Any]) -> dict[str, Any]:
    text = "".join(b.get("text", "") for b in params.get("prompt", []) if b.get("type") == "text")
    try:
        plan = json.loads(text)
    except ValueError:
        plan = {}
    terminals = plan.pop("terminal", []) if isinstance(plan, dict) else []
    results = carry_out(plan) if isinstance(plan, dict) else {}
    for line in terminals:
        results[f"terminal {line}"] = in_terminal(session, line)
    update = {
        "sessionUpdate": "agent_message_chunk",
        "content": {"type": "text", "text": json.dumps(results)},
    }
    send({"method": "session/update", "params": {"sessionId": session, "update": update}})
    return {"stopReason": "end_turn"}


def main() -> None:
    while True:
        message = receive()
        method, ident = message.get("method"), message.get("id")
        params = message.get("params") or {}
        if method == "initialize":
            result: Any = {
                "protocolVersion": 1,
                "agentCapabilities": {"loadSession": False},
                "authMethods": [],
                "agentInfo": {"name": "hostile", "version": "1.0.0"},
            }
        elif method == "session/new":
            result = {"sessionId": uuid.uuid4().hex}
        elif method == "session/prompt":
            result = prompt(params["sessionId"], params)
        elif ident is None:
            continue  # a notification (session/cancel): nothing to stop
        else:
            send({"id": ident, "error": {"code": -32601, "message": f"no {method}"}})
            continue
        send({"id": ident, "result": result})


if __name__ == "__main__":
    main()
