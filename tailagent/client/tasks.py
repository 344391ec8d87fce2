"""`tailagent tasks`, `tailagent watch TASK` and `tailagent cancel TASK`: the caller's
own tasks on an agent (the server shows each caller only its own)."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime

import httpx
from a2a.client import A2AClientError
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

from tailagent.client.columns import GAP, ID_LEAST, Column, widths
from tailagent.client.connect import Target, a2a_client, open_http
from tailagent.client.errors import EXIT_COMPLETED, EXIT_FAILED, complain, exit_code, run_command
from tailagent.client.follow import printer, take_up
from tailagent.client.render import (
    Outcome,
    OutputConsole,
    Renderer,
    json_of,
    message_text,
    state_name,
    status_event,
)
from tailagent.client.short_ids import short_context, whole_task_id
from tailagent.cost.figures import dollars, shown_usd
from tailagent.output.titles import first_prompt
from tailagent.output.visible import visible

PAGE = 100
SAYS = 30  # narrower than this, what a task says goes on a line of its own, under it
TITLE = 20  # and its title (the desk's: what was asked) goes on a line above that
SAYS_MOST = 200  # of what a task says, at most this much is shown


def _when(task: Task) -> str:
    """Short and local: the time today, the date and time this year, else the date."""
    if not task.status.HasField("timestamp"):
        return ""
    moment = task.status.timestamp.ToDatetime(tzinfo=UTC).astimezone()
    now = datetime.now().astimezone()
    if moment.date() == now.date():
        return moment.strftime("%H:%M")
    return moment.strftime("%m-%d %H:%M" if moment.year == now.year else "%Y-%m-%d")


def _changes(task: Task) -> str:
    """What the turn left on the conversation's branch, when it left something; once
    that branch was merged or discarded, that (the server says so: `worktree.state`)."""
    meta = MessageToDict(task.metadata) if task.HasField("metadata") else {}
    tree = meta.get("worktree") or {}
    ahead, behind = int(tree.get("ahead") or 0), int(tree.get("behind") or 0)
    files = [str(name) for name in tree.get("files") or []]
    if not tree.get("branch") or not (ahead or files):
        return ""
    if tree.get("state") in ("merged", "discarded"):
        return f"[{tree['state']}] "
    said = [f"+{ahead} commit" + ("s" if ahead != 1 else "")]
    said += [f"{behind} behind"] if behind else []
    said += [", ".join(files[:2]) + (f" and {len(files) - 2} more" if len(files) > 2 else "")]
    return f"[{', '.join(said)}] "


def _cost(task: Task) -> str:
    """What the task cost, and its conversation so far, when the agent reported a cost."""
    meta = MessageToDict(task.metadata) if task.HasField("metadata") else {}
    usd = shown_usd(meta.get("cost"))
    if usd <= 0:
        return ""
    total = shown_usd(meta.get("conversationCost"))
    return f"{dollars(usd)} (conversation {dollars(total)}) " if total > usd else f"{dollars(usd)} "


def _says(task: Task) -> str:
    says = _cost(task) + _changes(task) + message_text(task.status.message)
    return visible(" ".join(says.split()), one_line=True)[:SAYS_MOST]


def _table(tasks: list[Task], width: int) -> Table:
    """The tasks, one row each, fitted to `width` (see columns.py): the ids, states and
    times whole (a long conversation name wraps in its column, never narrower than an
    id `diff` takes), then each one's title (what was asked, as the desk shows it) and
    what it says in the room left. When that room is too small to read them, they go on
    lines of their own under the task, the title, then what it says, each as wide as
    the terminal allows (cut there, with an ellipsis)."""
    states = [state_name(task.status.state) for task in tasks]
    whens = [_when(task) for task in tasks]
    contexts = [visible(short_context(task), one_line=True) for task in tasks]
    titles = [visible(first_prompt(task), one_line=True) for task in tasks]
    says = [_says(task) for task in tasks]
    columns = [
        Column("task", [visible(task.id, one_line=True) for task in tasks], ID_LEAST, rank=2),
        Column("state", states, least=None),
        Column("updated", whens, least=None),
        Column("context", contexts, ID_LEAST, rank=1),  # the short id diff/merge/discard take
    ]
    room = width - sum(column.wanted() for column in columns) - GAP * (len(columns) + 1)
    beneath = room < TITLE + SAYS
    if not beneath:
        columns.append(Column("title", titles, least=TITLE, rank=0))
        columns.append(Column("says", says, least=SAYS, rank=0))
    sizes = widths(columns, width)
    if beneath:  # the task column takes what its lines beneath need of the room left
        room = width - sum(sizes[1:]) - GAP * (len(sizes) - 1)
        sizes[0] = max(sizes[0], min(room, 2 + max(map(len, titles + says), default=0)))
    table = Table(box=None, pad_edge=False)
    for column, size in zip(columns, sizes, strict=True):
        glimpse = column.header in ("title", "says")  # one line each: `watch` shows it all
        table.add_column(column.header, width=size, no_wrap=glimpse,
                         overflow="ellipsis" if glimpse else "fold")  # fmt: skip
    for task, state, when, context, title, text in zip(
        tasks, states, whens, contexts, titles, says, strict=True
    ):
        row = [Text(visible(cell, one_line=True)) for cell in (task.id, state, when, context)]
        if not beneath:
            table.add_row(*row, Text(title), Text(text))
            continue
        table.add_row(*row)
        for line, style in ((title, ""), (text, "dim")):
            if line:
                cut = line if len(line) <= sizes[0] - 2 else line[: sizes[0] - 3] + "…"
                table.add_row(Text("  " + cut, style=style), "", "", "")
    return table


async def _list(args: argparse.Namespace, target: Target) -> int:
    async with open_http(target, args.token) as http, a2a_client(target, http) as client:
        request = ListTasksRequest(page_size=min(args.limit, PAGE))
        if args.json:  # the table's titles are read from each task's history
            request.history_length = 0
        if args.state:
            request.status = TaskState.Value("TASK_STATE_" + args.state.upper().replace("-", "_"))
        tasks = list((await client.list_tasks(request)).tasks)
    tasks.sort(key=lambda t: t.status.timestamp.ToNanoseconds(), reverse=True)
    tasks = tasks[: args.limit]
    if args.json:
        for task in tasks:
            print(json.dumps(json_of(task)))
        return EXIT_COMPLETED
    console = Console(highlight=False)
    # Text, not markup: an agent's words are shown as they are, and escaped.
    console.print(_table(tasks, console.width))
    if not tasks:
        print("no tasks of yours on this agent", file=sys.stderr)
    return EXIT_COMPLETED


async def _watch(args: argparse.Namespace, target: Target) -> int:
    console = OutputConsole(highlight=False, soft_wrap=True)  # `| head`: 141, as call
    renderer, outcome = Renderer(console, target.reply_options()), Outcome()
    show = printer(renderer, outcome)
    async with open_http(target, args.token) as http, a2a_client(target, http) as client:
        args.task = await whole_task_id(client, args.task)
        task = await client.get_task(GetTaskRequest(id=args.task, history_length=0))
        show(StreamResponse(task=task))
        if not outcome.unfinished:
            # Nothing streams for a finished (or waiting) task: its state is the answer.
            show(status_event(task))
        else:
            cut: BaseException | None = None
            try:
                async for event in client.subscribe(SubscribeToTaskRequest(id=args.task)):
                    show(event)
            except (A2AClientError, httpx.HTTPError) as exc:
                cut = exc
            if outcome.unfinished:
                await take_up(client, outcome, show, target.url, cut)
    renderer.prompt(outcome)
    return exit_code(outcome)


async def _cancel(args: argparse.Namespace, target: Target) -> int:
    async with open_http(target, args.token) as http, a2a_client(target, http) as client:
        args.task = await whole_task_id(client, args.task)
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
