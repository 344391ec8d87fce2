"""`tailagent merge`, `discard` and `diff`: what a conversation's worktree holds, and
bringing it back into its base branch (or dropping it), on request only.

Each is one A2A message to the conversation with a data part (`{"kind": "merge",
"strategy": "squash"}`, `{"kind": "discard"}`, `{"kind": "diff"}`): the server
checks the caller's right to the conversation and answers with one message. Its
text holds what the agent wrote (a diff of its files): it is printed escaped.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import uuid
from typing import Any

from a2a.types.a2a_pb2 import Message, Part, Role, SendMessageRequest
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Value

from tailagent.client.connect import Target, a2a_client, open_http
from tailagent.client.errors import EXIT_COMPLETED, EXIT_USAGE, run_command
from tailagent.client.render import message_text
from tailagent.visible import visible


async def _ask(target: Target, args: argparse.Namespace, request: dict[str, Any]) -> str:
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, context_id=args.context)
    message.parts.append(Part(data=ParseDict(request, Value()), media_type="application/json"))
    async with open_http(target, args.token) as http, a2a_client(target, http) as client:
        async for event in client.send_message(SendMessageRequest(message=message)):
            if event.HasField("message"):
                return visible(message_text(event.message))
    return ""


async def _run(args: argparse.Namespace, target: Target) -> int:
    if args.command == "diff":
        print(await _ask(target, args, {"kind": "diff"}))
        return EXIT_COMPLETED
    if args.command == "discard":
        print(await _ask(target, args, {"kind": "discard", "dryRun": True}))
        if not args.yes:
            if not sys.stdin.isatty():
                print("tailagent: nothing discarded: add --yes to discard it", file=sys.stderr)
                return EXIT_USAGE
            answer = await asyncio.to_thread(input, "Discard it? [y/N] ")
            if answer.strip().lower() not in ("y", "yes"):
                print("nothing discarded")
                return EXIT_COMPLETED
        print(await _ask(target, args, {"kind": "discard"}))
        return EXIT_COMPLETED
    request = {"kind": "merge", "strategy": args.strategy, "keep": args.keep}
    print(await _ask(target, args, request))
    return EXIT_COMPLETED


def conversation_command(args: argparse.Namespace) -> int:
    return run_command(args.url, args.state_dir, lambda target: _run(args, target))
