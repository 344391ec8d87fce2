"""`tailagent call`: one turn (or, with -i, a whole conversation) against an agent.

Exit codes a script can rely on: 0 completed, 1 failed / canceled / rejected,
3 input-required (the reply command is printed), 2 usage or connection error.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import uuid
from typing import Any

import httpx
from a2a.client import A2AClientError, Client
from a2a.types.a2a_pb2 import (
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
    TaskState,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import A2AError
from google.protobuf.json_format import MessageToDict, ParseDict
from google.protobuf.struct_pb2 import Value
from rich.console import Console
from rich.prompt import Prompt as AskPrompt

from tailagent.card.verify import KnownAgents, fetch_card, verify_card
from tailagent.client.connect import a2a_client, choose_token, open_http, parse_target
from tailagent.client.render import Outcome, Prompt, Renderer

EXIT_COMPLETED, EXIT_FAILED, EXIT_USAGE, EXIT_INPUT_REQUIRED = 0, 1, 2, 3


class UsageError(Exception):
    pass


def parse_answers(pairs: list[str]) -> dict[str, str]:
    answers: dict[str, str] = {}
    for pair in pairs:
        question, sep, label = pair.rpartition("=")
        if not sep or not question.strip() or not label.strip():
            raise UsageError(f"--answer wants QUESTION=LABEL, not {pair!r}")
        answers[question.strip()] = label.strip()
    return answers


def build_message(
    text: str,
    *,
    task_id: str | None,
    context_id: str | None,
    request_id: str | None,
    answers: dict[str, str],
) -> Message:
    if not text and not answers:
        raise UsageError("nothing to send: give a message, or --answer QUESTION=LABEL")
    message = Message(
        message_id=uuid.uuid4().hex,
        role=Role.ROLE_USER,
        task_id=task_id or "",
        context_id=context_id or "",
    )
    if text:
        message.parts.append(Part(text=text))
    if answers:
        data: dict[str, Any] = {"answers": answers}
        if request_id:
            data["requestId"] = request_id
        message.parts.append(Part(data=ParseDict(data, Value()), media_type="application/json"))
    if request_id:
        message.metadata.update({"requestId": request_id})
    return message


class CardRefused(Exception):
    pass


async def check_card(url: str, http: httpx.AsyncClient, require_signed: bool) -> None:
    """A pinned key that no longer verifies stops the call; so, with --require-signed,
    does an unsigned or unpinned card."""
    pinned = KnownAgents().get(url)
    if pinned is None and not require_signed:
        return
    verdict = await verify_card(await fetch_card(url, http), url, http, pinned)
    if not verdict.valid:
        raise CardRefused(f"{url}'s card is {verdict.status}")
    if require_signed and not verdict.pinned:
        raise CardRefused(
            f"{url}'s card is {verdict.status}; --require-signed wants a pinned key "
            f"(`tailagent card {url} --trust` pins it)"
        )


def exit_code(outcome: Outcome) -> int:
    if outcome.direct_message is not None or outcome.state == TaskState.TASK_STATE_COMPLETED:
        return EXIT_COMPLETED
    if outcome.prompt is not None:
        return EXIT_INPUT_REQUIRED
    return EXIT_FAILED


async def run_call(args: argparse.Namespace, console: Console) -> int:
    answers = parse_answers(args.answer)
    message = build_message(
        args.text,
        task_id=args.task,
        context_id=args.context,
        request_id=args.request,
        answers=answers,
    )
    target = parse_target(args.url, args.state_dir)
    renderer = Renderer(console, target.url)
    token = choose_token(target, args.token, args.state_dir)
    async with open_http(target, token, args.state_dir) as http:
        await check_card(target.base, http, args.require_signed)
        async with a2a_client(target, http) as client:
            while True:
                outcome = Outcome()
                request = SendMessageRequest(message=message)
                show = _printer(args.json, renderer, outcome)
                try:
                    async for event in client.send_message(request):
                        show(event)
                except (A2AClientError, httpx.HTTPError) as exc:
                    if not outcome.task_id:
                        raise
                    cut: BaseException | None = exc
                else:
                    cut = None
                if outcome.unfinished and outcome.task_id:
                    await _read_the_end(client, outcome, show, target.url, cut)
                if outcome.prompt is None or args.json:
                    break
                if not args.interactive:
                    renderer.prompt(outcome)
                    break
                message = _ask_in_terminal(console, renderer, outcome, outcome.prompt)
    return exit_code(outcome)


def _printer(as_json: bool, renderer: Renderer, outcome: Outcome) -> Any:
    def show(event: StreamResponse) -> None:
        outcome.observe(event)
        if as_json:
            print(json.dumps(MessageToDict(event)), flush=True)
        else:
            renderer.event(event, outcome)

    return show


async def _read_the_end(
    client: Client, outcome: Outcome, show: Any, url: str, cut: BaseException | None
) -> None:
    """The stream ended before the task did (a server stopping, a connection cut):
    the task's state as the server stored it is the answer."""
    try:
        task = await client.get_task(GetTaskRequest(id=outcome.task_id))
    except (A2AClientError, A2AError, httpx.HTTPError) as exc:
        why = f" ({_reason(cut)})" if cut is not None else ""
        print(
            f"tailagent: the stream from {url} ended before task {outcome.task_id} did{why}, "
            f"and its state cannot be read now: {_reason(exc)}",
            file=sys.stderr,
        )
        return
    show(
        StreamResponse(
            status_update=TaskStatusUpdateEvent(
                task_id=task.id, context_id=task.context_id, status=task.status
            )
        )
    )


def _ask_in_terminal(
    console: Console, renderer: Renderer, outcome: Outcome, prompt: Prompt
) -> Message:
    console.print(f"[bold yellow]{prompt.text}[/]")
    if prompt.kind == "ask_user_question":
        answers: dict[str, str] = {}
        for question in prompt.data.get("questions") or []:
            labels = [o.get("label", "") for o in question.get("options") or []]
            answers[question["question"]] = AskPrompt.ask(
                question["question"], choices=labels or None, console=console
            )
        return build_message(
            "",
            task_id=outcome.task_id,
            context_id=outcome.context_id,
            request_id=prompt.request_id,
            answers=answers,
        )
    reply = AskPrompt.ask("allow or deny (a reason may follow)", console=console)
    return build_message(
        reply,
        task_id=outcome.task_id,
        context_id=outcome.context_id,
        request_id=prompt.request_id,
        answers={},
    )


def call_command(args: argparse.Namespace) -> int:
    console = Console(highlight=False, soft_wrap=True)
    try:
        args.url = parse_target(args.url, args.state_dir).url
    except ValueError as exc:
        print(f"tailagent: --url: {exc}", file=sys.stderr)
        return EXIT_USAGE
    try:
        return asyncio.run(run_call(args, console))
    except (UsageError, CardRefused) as exc:
        print(f"tailagent: {exc}", file=sys.stderr)
    except httpx.HTTPError as exc:
        why = str(exc) or type(exc).__name__
        print(f"tailagent: cannot reach {args.url}: {why}", file=sys.stderr)
    except A2AClientError as exc:
        print(f"tailagent: {args.url}: {_reason(exc)}", file=sys.stderr)
    except A2AError as exc:
        print(f"tailagent: {args.url} refused the request: {_reason(exc)}", file=sys.stderr)
    except BrokenPipeError:
        return EXIT_FAILED
    except KeyboardInterrupt:
        print("tailagent: interrupted", file=sys.stderr)
    return EXIT_USAGE


def _refusal(body: object) -> str | None:
    """`error: reason` from a refusal body in any binding's shape (see access/guard.py)."""
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    if isinstance(error, dict) and error.get("message"):
        word = (error.get("data") or {}).get("error") or error.get("status", "")
        return f"{word}: {error['message']}"
    if body.get("reason"):
        return f"{error}: {body['reason']}"
    return None


def _reason(exc: BaseException) -> str:
    """One line: the server's own reason when it refused (401/403/503), else the error."""
    cause: BaseException | None = exc
    while cause is not None:
        if isinstance(cause, httpx.HTTPStatusError):
            try:
                body = cause.response.json()
            except ValueError:
                break
            refused = _refusal(body)
            if refused is not None:
                return f"{cause.response.status_code} {refused}"
            break
        cause = cause.__cause__ or cause.__context__
    text = str(exc) or type(exc).__name__
    return text.splitlines()[0]
