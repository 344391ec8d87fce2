"""What `tailagent call` is addressed to, settled before anything is sent.

- `--task` takes the start of a task's id, as `watch` and `cancel` do (short_ids.py),
  and `--request` the start of the id of the prompt that task waits on: the commands
  `call` prints to answer a prompt fit an 80-column terminal. A start that does not
  fit the waiting prompt's id goes as given, and the server refuses it naming the
  prompt that does wait: an answer never reaches a prompt other than the one it names.
- A bare answer (`allow`, `deny`, `deny: a reason`, `option:ID`) without `--task` is
  meant for the prompt that waits, not as a new one: it answers the caller's one
  task in input-required (ListTasks shows each caller only its own); when several
  wait it names them and sends nothing; when none does it says so and sends nothing.
  The word itself as a new prompt means nothing to an agent, which is why it is read
  as an answer; `--new` sends it as a prompt all the same.
- `--context NAME` that names none of the caller's conversations starts a new one by
  that name: said on stderr, since a typo would otherwise start it without a word
  (and `--context c` would then fit two). `--existing` refuses it instead, naming the
  caller's conversations nearest the name.

The caller's tasks and conversations are read as short_ids.py reads them: among the
caller's latest SEARCHED tasks. From an agent that lists no tasks (another A2A server),
`--context` goes as given, without a word.
"""

from __future__ import annotations

import argparse
import difflib
import re
import shutil
import sys

from a2a.client import Client
from a2a.types.a2a_pb2 import (
    GetTaskRequest,
    ListTasksRequest,
    StreamResponse,
    Task,
    TaskState,
)
from a2a.utils.errors import A2AError

from tailagent.client.errors import UsageError, complain
from tailagent.client.render import Outcome, Prompt
from tailagent.client.short_ids import PAGE, SEARCHED, is_whole, short_context, whole_task_id
from tailagent.output.titles import first_prompt
from tailagent.output.visible import visible

# An answer to a permission prompt, as `call` prints the commands that give one: the
# word alone, or followed by a reason after punctuation ("deny: run pytest -x").
# "Allow uploads of large files" and "allow-list a host" are prompts.
ANSWER = re.compile(
    r"\s*(?:(?:allow|deny)(?:(?:\s*[:,;.!]|\s+[—–-]\s).*)?|option:\S+)\s*", re.I | re.S
)
NEAREST = 3  # of the caller's conversations, a refused name is shown this many near it


def is_answer(text: str) -> bool:
    """Whether `text` reads as an answer to a waiting prompt rather than a new prompt."""
    return ANSWER.fullmatch(text) is not None


async def address(client: Client, args: argparse.Namespace) -> None:
    """Sets `args.task` to the task the call answers or continues (a whole id), and
    checks `args.context`: see the module's note. Raises UsageError, nothing sent,
    when the call cannot go as asked."""
    if args.new and args.task:
        raise UsageError("--new sends a new prompt, --task answers a task: give one of them")
    if args.existing and not args.context:
        raise UsageError("--existing is about --context: it goes with one")
    if args.task:
        args.task = await whole_task_id(client, args.task)
        if args.request:
            args.request = await _whole_request_id(client, args.task, args.request)
        return
    if not args.new and not args.context and not args.answer and is_answer(args.text):
        args.task = await _waiting_task(client, args.text)
        return
    if args.context:
        await _check_context(client, args.context, args.existing)


async def _tasks(client: Client, request: ListTasksRequest) -> tuple[list[Task], bool]:
    """The caller's latest tasks `request` asks for (up to SEARCHED), and whether that
    was all of them."""
    found: list[Task] = []
    while True:
        page = await client.list_tasks(request)
        found += page.tasks
        request.page_token = page.next_page_token
        if not request.page_token or len(found) >= SEARCHED:
            return found, not request.page_token


async def _waiting_task(client: Client, text: str) -> str:
    """The id of the caller's one task that waits for permission, for `text` to answer."""
    request = ListTasksRequest(page_size=PAGE, status=TaskState.TASK_STATE_INPUT_REQUIRED)
    waiting, _ = await _tasks(client, request)  # with their history: their titles
    said = visible(text.strip(), one_line=True)
    if not waiting:
        raise UsageError(
            f"none of your tasks waits for an answer, so {said!r} answers nothing: nothing "
            "sent (to send it as a new prompt: --new)"
        )
    if len(waiting) > 1:
        complain(f"tailagent: {len(waiting)} of your tasks wait for an answer:")
        for task in waiting:
            print(_waiting_line(task), file=sys.stderr)
        raise UsageError(f"nothing sent: say which with --task, e.g. --task {waiting[0].id[:8]}")
    task = waiting[0]
    if (prompt := _prompt(task)) is not None and prompt.kind == "ask_user_question":
        raise UsageError(
            f"your waiting task {task.id[:8]} ({visible(first_prompt(task), one_line=True)}) "
            f"asks a question, not for permission: answer it with `tailagent call --task "
            f"{task.id[:8]} --answer QUESTION=LABEL` (or send {said!r} as a new prompt: --new)"
        )
    return task.id


async def _whole_request_id(client: Client, task_id: str, start: str) -> str:
    """The id of the prompt the task waits on when `start` is the start of it; else
    `start` as given, for the server to refuse by the prompt that does wait."""
    try:
        task = await client.get_task(GetTaskRequest(id=task_id, history_length=0))
    except A2AError:
        return start  # not found, or not the caller's: the send says so
    prompt = _prompt(task)
    if prompt is not None and prompt.request_id and prompt.request_id.startswith(start):
        return prompt.request_id
    return start


def _prompt(task: Task) -> Prompt | None:
    """What a waiting task asks, as `call` read it when the task paused."""
    pending = Outcome()
    pending.observe(StreamResponse(task=task))
    return pending.prompt


def _waiting_line(task: Task) -> str:
    """A waiting task in one line of the terminal: the start of its id `--task` takes,
    its title and what it asks, cut with an ellipsis where the line ends."""
    prompt = _prompt(task)
    asked = (prompt.data.get("title") or prompt.text) if prompt is not None else ""
    line = f"  {task.id[:8]}  {first_prompt(task)}" + (f" — asks: {asked}" if asked else "")
    line = visible(line, one_line=True)
    width = shutil.get_terminal_size().columns
    return line if len(line) <= width else line[: width - 1] + "…"


async def _check_context(client: Client, name: str, existing: bool) -> None:
    """Says on stderr that `name` starts a new conversation when it names none of the
    caller's (as the server would look it up: a whole id, a branch's short id, the start
    of an id); with `existing`, refuses instead, naming the nearest of theirs."""
    try:
        tasks, whole = await _tasks(client, ListTasksRequest(page_size=PAGE, history_length=0))
    except A2AError:
        return  # an agent that lists no tasks (ListTasks is not every agent's): no telling
    shorts = {task.context_id: short_context(task) for task in tasks}
    short = name.removeprefix("tailagent/")  # its branch, as short_context reads it
    if any(c == name or s == short or c.startswith(short) for c, s in shorts.items()):
        return
    among = "" if whole else f" among your latest {len(tasks)} tasks"
    if not existing:
        complain(f"tailagent: no conversation of yours{among} is {name}: this starts a new "
                 "one by that name (--existing refuses instead)")  # fmt: skip
        return
    names = set(shorts.values()) | {c for c in shorts if not is_whole(c)}
    near = difflib.get_close_matches(short, sorted(names), n=NEAREST, cutoff=0.5)
    hint = (f"did you mean {' or '.join(near)}?" if near
            else "`tailagent conversations` lists yours")  # fmt: skip
    raise UsageError(f"no conversation of yours{among} is {name}; nothing sent ({hint})")
