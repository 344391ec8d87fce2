"""`tailagent merge`, `discard`, `diff` and `conversations`: what a conversation's
worktree holds, and bringing it back into its base branch (or dropping it), on request
only. A conversation is named by its id or the start of it, as its branch
`tailagent/<short id>` shows it (the server picks among the caller's own).

Each is one A2A message to the conversation with a data part (`{"kind": "merge",
"strategy": "squash"}`, `{"kind": "discard"}`, `{"kind": "diff"}`): the server
checks the caller's right to the conversation and answers with one message. A merge
and a discard first ask what they would do (`"dryRun": true`) and, on a terminal, ask
the person; a merge then names the tip it showed (`"expect"`). Its
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
from rich.console import Console
from rich.text import Text

from tailagent.client.columns import GAP, ID_LEAST, Column, fitted, widths
from tailagent.client.connect import Target, a2a_client, open_http
from tailagent.client.errors import EXIT_COMPLETED, EXIT_USAGE, run_command
from tailagent.client.render import message_data, message_text
from tailagent.output.visible import json_line, visible

FILES = 3  # a row names this many of its files, then how many more


async def _reply(
    target: Target, args: argparse.Namespace, request: dict[str, Any]
) -> Message | None:
    context_id = getattr(args, "context", None) or ""
    message = Message(message_id=uuid.uuid4().hex, role=Role.ROLE_USER, context_id=context_id)
    message.parts.append(Part(data=ParseDict(request, Value()), media_type="application/json"))
    async with open_http(target, args.token) as http, a2a_client(target, http) as client:
        async for event in client.send_message(SendMessageRequest(message=message)):
            if event.HasField("message"):
                return event.message
    return None


async def _ask(target: Target, args: argparse.Namespace, request: dict[str, Any]) -> str:
    reply = await _reply(target, args, request)
    return visible(message_text(reply)) if reply is not None else ""


async def _list(args: argparse.Namespace, target: Target) -> int:
    """`tailagent conversations`: the caller's conversations with a branch (or a merge)
    here, newest first: short id, branch, commits ahead/behind its base, state, files;
    then one line for each repository this state dir served before that holds some."""
    reply = await _reply(target, args, {"kind": "conversations"})
    rows: list[dict[str, Any]] = []
    elsewhere: list[dict[str, Any]] = []
    for data in message_data(reply) if reply is not None else []:
        rows += data.get("conversations") or []
        elsewhere += data.get("elsewhere") or []
    for row in rows:  # counts came through a protobuf Struct, as floats
        row |= {key: int(row.get(key, 0)) for key in ("ahead", "behind")}
    if args.json:
        for row in rows:
            print(json_line(row))
    else:
        _print_table([row for row in rows if not row.get("idle")])
    notes = Console(stderr=True, highlight=False)  # wrapped to the terminal, word by word
    quiet = [row for row in rows if row.get("idle")]  # changed nothing: no branch to show
    if quiet and not args.json:
        notes.print(Text(f"and {len(quiet)} that changed nothing (no branch)"))
    for other in elsewhere:
        count = int(other.get("conversations") or 0)
        notes.print(Text(visible(f"and {count} with a branch in {other.get('repository')}, "
                                 "served before from this state dir: serve it (--cwd) to "
                                 "see, merge or discard them", one_line=True)))  # fmt: skip
    if not args.json:
        _print_folders([row for row in rows if not row.get("idle")], notes)
    return EXIT_COMPLETED


def _print_table(rows: list[dict[str, Any]]) -> None:
    """The rows fitted to the terminal (see columns.py): the short id whole, a long
    state or file list wrapped in its column; at most FILES files named per row. The
    branch is always `tailagent/<short id>`: when the ids would not fit whole beside it,
    it is left out."""
    if not rows:
        print("no conversations of yours with a branch on this agent", file=sys.stderr)
        return
    files = [[str(name) for name in row.get("files") or []] for row in rows]
    said = [", ".join(names[:FILES]) + (f" and {len(names) - FILES} more"
            if len(names) > FILES else "") for names in files]  # fmt: skip

    def cells(key: str) -> list[str]:
        return [visible(str(row.get(key, "")), one_line=True) for row in rows]

    counts = [f"+{row['ahead']}/-{row['behind']}" for row in rows]
    branch = Column("branch", cells("branch"), least=None)
    columns = [
        Column("conversation", cells("short"), least=ID_LEAST, rank=1),  # diff takes it
        branch,
        Column("+/-", counts, least=None, justify="right"),
        Column("state", cells("state")),
        Column("files", [visible(text, one_line=True) for text in said]),
    ]
    console = Console(highlight=False)
    sizes = widths(columns, console.width)
    if sizes[0] < columns[0].wanted() or sum(sizes) + GAP * 4 > console.width:
        columns.remove(branch)  # `tailagent/<short id>` again: the ids come first
    console.print(fitted(columns, console.width))


def _print_folders(rows: list[dict[str, Any]], notes: Console) -> None:
    """Where each listed conversation's files are (`cd` there to read or run them), a
    line each after the other notes on stderr: a path is too long for a column, and
    the table stays what programs and people parse."""
    folders = [(row["short"], row["path"]) for row in rows if row.get("path")]
    if folders:
        notes.print(Text("folders:"))
    for short, path in folders:
        notes.print(Text(visible(f"  {short}  {path}", one_line=True)))


async def _run(args: argparse.Namespace, target: Target) -> int:
    if args.command == "conversations":
        return await _list(args, target)
    if args.command == "diff":
        if not args.json:
            print(await _ask(target, args, {"kind": "diff"}))
            return EXIT_COMPLETED
        reply = await _reply(target, args, {"kind": "diff"})
        data = next(iter(message_data(reply)), {}) if reply is not None else {}
        context = reply.context_id if reply is not None else args.context
        print(json_line({"context": context, "diff": "", **data}))
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
    return await _merge(args, target)


async def _merge(args: argparse.Namespace, target: Target) -> int:
    """`tailagent merge`: what the branch would bring (its stat, read from git), then,
    once confirmed, the merge of exactly that (the branch's tip it was read at: a branch
    that moved since is refused). Without a terminal it merges only with `--yes`."""
    preview = await _reply(target, args, {"kind": "merge", "dryRun": True})
    print(visible(message_text(preview)) if preview is not None else "")
    data = next((d for d in message_data(preview) if d.get("dryRun")), None) if preview else None
    if data is None:  # already merged: the server said where
        return EXIT_COMPLETED
    if not args.yes:
        if not sys.stdin.isatty():
            print("tailagent: nothing merged: add --yes to merge it", file=sys.stderr)
            return EXIT_USAGE
        answer = await asyncio.to_thread(
            input, f"Merge it into {visible(str(data['base']))}? [y/N] "
        )
        if answer.strip().lower() not in ("y", "yes"):
            print("nothing merged")
            return EXIT_COMPLETED
    request = {"kind": "merge", "strategy": args.strategy, "keep": args.keep,
               "expect": str(data["tip"])}  # fmt: skip
    print(await _ask(target, args, request))
    return EXIT_COMPLETED


def conversation_command(args: argparse.Namespace) -> int:
    return run_command(args.url, args.state_dir, lambda target: _run(args, target))
