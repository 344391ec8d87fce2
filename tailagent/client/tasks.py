"""`tailagent tasks`, `tailagent watch TASK` and `tailagent cancel TASK`: the caller's
own tasks on an agent (the server shows each caller only its own)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime

from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    ListTasksRequest,
    StreamResponse,
    SubscribeToTaskRequest,
    Task,
    TaskState,
)
from a2a.utils.errors import A2AError, TaskNotCancelableError, TaskNotFoundError
from google.protobuf.json_format import MessageToDict
from rich.console import Console
from rich.table import Table
from rich.text import Text

from tailagent.client.connect import Target, a2a_client, open_http
from tailagent.client.errors import EXIT_COMPLETED, EXIT_FAILED, complain, exit_code, run_command
from tailagent.client.follow import printer, read_the_end
from tailagent.client.render import (
    Outcome,
    OutputConsole,
    Renderer,
    json_of,
    message_text,
    state_name,
    status_event,
)
from tailagent.visible import visible

PAGE = 100


def _when(task: Task) -> str:
    """Short and local: the time today, else the date and time."""
    if not task.status.HasField("timestamp"):
        return ""
    moment = task.status.timestamp.ToDatetime(tzinfo=UTC).astimezone()
    today = datetime.now().astimezone().date()
    return moment.strftime("%H:%M:%S" if moment.date() == today else "%Y-%m-%d %H:%M")


def _branch(task: Task) -> str:
    """The conversation's branch and how far it is from its base, when it has one."""
    meta = MessageToDict(task.metadata) if task.HasField("metadata") else {}
    tree = meta.get("worktree") or {}
    if not tree.get("branch"):
        return ""
    return f"[{tree['branch']} +{int(tree['ahead'])}/-{int(tree['behind'])}] "


async def _list(args: argparse.Namespace, target: Target) -> int:
    async with open_http(target, args.token) as http, a2a_client(target, http) as client:
        request = ListTasksRequest(page_size=min(args.limit, PAGE), history_length=0)
        if args.state:
            request.status = TaskState.Value("TASK_STATE_" + args.state.upper().replace("-", "_"))
        tasks = list((await client.list_tasks(request)).tasks)
    tasks.sort(key=lambda t: t.status.timestamp.ToNanoseconds(), reverse=True)
    tasks = tasks[: args.limit]
    if args.json:
        for task in tasks:
            print(json.dumps(json_of(task)))
        return EXIT_COMPLETED
    table = Table(box=None, pad_edge=False)
    table.add_column("task", no_wrap=True, min_width=36)  # ids are copied: never cut
    table.add_column("state", no_wrap=True, min_width=len("input-required"))
    table.add_column(
        "updated", no_wrap=True, min_width=max((len(_when(t)) for t in tasks), default=8)
    )
    table.add_column("says", overflow="ellipsis", no_wrap=True, ratio=1)
    for task in tasks:
        says = _branch(task) + message_text(task.status.message).replace("\n", " ")
        # Text, not markup: a branch in brackets or an agent's words are shown as they
        # are, and escaped, one row a task.
        row = (task.id, state_name(task.status.state), _when(task), says[:60])
        table.add_row(*(Text(visible(cell, one_line=True)) for cell in row))
    Console(highlight=False).print(table)
    if not tasks:
        print("no tasks of yours on this agent", file=sys.stderr)
    return EXIT_COMPLETED


async def _watch(args: argparse.Namespace, target: Target) -> int:
    console = OutputConsole(highlight=False, soft_wrap=True)  # `| head`: 141, as call
    renderer, outcome = Renderer(console, target.reply_options()), Outcome()
    show = printer(renderer, outcome)
    async with open_http(target, args.token) as http, a2a_client(target, http) as client:
        task = await client.get_task(GetTaskRequest(id=args.task, history_length=0))
        show(StreamResponse(task=task))
        if not outcome.unfinished:
            # Nothing streams for a finished (or waiting) task: its state is the answer.
            show(status_event(task))
        else:
            async for event in client.subscribe(SubscribeToTaskRequest(id=args.task)):
                show(event)
            if outcome.unfinished:
                await read_the_end(client, outcome, show, target.url, None)
    renderer.prompt(outcome)
    return exit_code(outcome)


async def _cancel(args: argparse.Namespace, target: Target) -> int:
    async with open_http(target, args.token) as http, a2a_client(target, http) as client:
        try:
            task = await client.cancel_task(CancelTaskRequest(id=args.task))
        except TaskNotFoundError:
            raise  # no such task: exit 2, as for watch and call --task
        except TaskNotCancelableError as exc:
            complain(f"tailagent: {exc}")  # the server's words: how the task had ended
            return EXIT_FAILED
        except A2AError as exc:
            complain(f"tailagent: task {args.task} was not canceled: {exc}")
            return EXIT_FAILED
    print(visible(f"task {task.id}: {state_name(task.status.state)}", one_line=True))
    return EXIT_COMPLETED


def tasks_command(args: argparse.Namespace) -> int:
    commands = {"tasks": _list, "watch": _watch, "cancel": _cancel}
    command = commands[args.command]
    return run_command(args.url, args.state_dir, lambda target: command(args, target))
