"""`tailagent call`: one turn (or, with -i, a whole conversation) against an agent.

Exit codes: see tailagent.client.errors. Ctrl-C during a turn offers to cancel the
task (a second Ctrl-C within seconds does); with --cancel-on-interrupt, or when
stdin is not a terminal (a script, `timeout -s INT`), the first one cancels it.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import uuid
from pathlib import Path
from typing import TYPE_CHECKING, Any

import httpx
from a2a.client import A2AClientError, Client
from a2a.types.a2a_pb2 import (
    CancelTaskRequest,
    GetTaskRequest,
    Message,
    Part,
    Role,
    SendMessageRequest,
    StreamResponse,
)
from google.protobuf.json_format import ParseDict
from google.protobuf.struct_pb2 import Value
from rich.console import Console
from rich.prompt import Prompt as AskPrompt
from rich.text import Text

from tailagent.card.verify import KnownAgents, fetch_card, verify_card
from tailagent.client.addressing import address
from tailagent.client.connect import (
    Target,
    a2a_client,
    open_http,
)
from tailagent.client.errors import (
    EXIT_INTERRUPTED,
    Refused,
    UsageError,
    complain,
    exit_code,
    run_command,
)
from tailagent.client.follow import Show, printer, take_up
from tailagent.client.interrupts import Interrupts
from tailagent.client.render import (
    Outcome,
    OutputConsole,
    Prompt,
    Renderer,
    question_options,
    status_event,
)
from tailagent.cost.figures import dollars, shown_usd, token_figure
from tailagent.output.visible import visible

if TYPE_CHECKING:
    from tailagent.card.keys import KeyStore

CONFIRM_SECONDS = 3.0


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


def _own_keys(state_dir: Path | None) -> KeyStore | None:
    """This box's server's signing keys, when its state dir is readable here and has them."""
    # Here, not at the top: the key store brings cryptography's serialization, ~20 ms of
    # CPU, and is read only when a pinned key no longer verifies.
    from tailagent.card.keys import KeyStore

    if state_dir is None:
        return None
    keys = KeyStore(state_dir)
    return keys if keys.exists() else None


async def check_card(
    url: str, http: httpx.AsyncClient, require_signed: bool, own_state: Path | None = None
) -> None:
    """A pinned key that no longer verifies stops the call; so, with --require-signed,
    does an unsigned or unpinned card. `own_state`: the state dir of the server at `url`,
    readable here (this box's own server): its current key is trusted as it is, so the
    pin follows a `tailagent keys rotate` made there."""
    known = KnownAgents()
    pinned = known.get(url)
    if pinned is None and not require_signed:
        return
    card = await fetch_card(url, http)
    verdict = await verify_card(card, url, http, pinned)
    if not verdict.valid and pinned is not None and (keys := _own_keys(own_state)) is not None:
        own = await verify_card(card, url, http, {"jwk": keys.current().jwk})
        if own.valid and own.jwk is not None:
            known.pin(url, own.jwk)
            complain(
                f"tailagent: {url} signs with a new key (`keys rotate` in {own_state}); "
                f"pinned it: {own.jwk.get('kid')}"
            )
            verdict = own
    if not verdict.valid:
        raise Refused(f"{url}'s card is {verdict.status}")
    if require_signed and not verdict.pinned:
        raise Refused(
            f"{url}'s card is {verdict.status}; --require-signed wants a pinned key "
            f"(`tailagent card {url} --trust` pins it)"
        )


async def run_call(args: argparse.Namespace, target: Target, console: Console) -> int:
    answers = parse_answers(args.answer)

    def message_as_given() -> Message:
        return build_message(
            args.text,
            task_id=args.task,
            context_id=args.context,
            request_id=args.request,
            answers=answers,
        )

    message = message_as_given()  # an empty call is refused before anything is sent
    renderer = Renderer(console, target.reply_options())
    async with open_http(target, args.token) as http:
        await check_card(target.base, http, args.require_signed, target.credentials)
        async with a2a_client(target, http) as client:
            await address(client, args)  # whole ids, the waiting task, a new conversation
            message = message_as_given()  # with the whole ids `address` found
            if answers and args.task:
                await _check_answers(client, args.task, answers)
            while True:
                outcome = Outcome()
                show = printer(renderer, outcome, as_json=args.json)
                with Interrupts() as interrupts:
                    turn = asyncio.create_task(_follow(client, message, outcome, show))
                    if await interrupts.first_or(turn):
                        turn.cancel()
                        await interrupts.settle(turn)
                        await _interrupted(client, outcome, show, interrupts, args)
                        return EXIT_INTERRUPTED
                cut = turn.result()
                if outcome.unfinished and outcome.task_id:
                    await take_up(client, outcome, show, target.url, cut)
                if outcome.prompt is None or args.json:
                    break
                if not args.interactive:
                    renderer.prompt(outcome)
                    break
                message = _ask_in_terminal(console, renderer, outcome, outcome.prompt)
    if not args.json:
        renderer.changes(outcome)
        if (said := cost_line(outcome)) is not None:
            console.print(Text(said, "dim"))
    return exit_code(outcome)


def cost_line(outcome: Outcome) -> str | None:
    """What the task cost, and its conversation so far: the call's last line, when the
    agent reported a cost (None for a free turn, which has nothing to say)."""
    usd = shown_usd(outcome.cost)
    if usd <= 0:
        return None
    tokens = tuple(token_figure(outcome.cost.get(k)) or 0 for k in ("inputTokens", "outputTokens"))
    said = f"cost {dollars(usd)}"
    if any(tokens):
        said += f" ({tokens[0]:,} tokens in, {tokens[1]:,} out)"
    if outcome.conversation_cost:
        said += f"; this conversation {dollars(shown_usd(outcome.conversation_cost))}"
    return said


async def _follow(
    client: Client, message: Message, outcome: Outcome, show: Show
) -> BaseException | None:
    """Streams one turn; returns what cut the stream, if something did after the
    task had started (the caller then reads the task's state)."""
    try:
        async for event in client.send_message(SendMessageRequest(message=message)):
            show(event)
    except (A2AClientError, httpx.HTTPError) as exc:
        if not outcome.task_id:
            raise
        return exc
    return None


async def _interrupted(
    client: Client, outcome: Outcome, show: Show, interrupts: Interrupts, args: argparse.Namespace
) -> None:
    """Ctrl-C during a turn: cancel the task, at once or on a second Ctrl-C."""
    task_id = outcome.task_id
    if not task_id or not outcome.unfinished:
        print("tailagent: interrupted", file=sys.stderr)
        return
    cancel_at_once = args.cancel_on_interrupt or not sys.stdin.isatty()
    if not cancel_at_once:
        complain(
            f"tailagent: Ctrl-C again within {CONFIRM_SECONDS:.0f} s cancels task {task_id}; "
            f"otherwise the task goes on without this terminal (`tailagent watch {task_id}` "
            "follows it again)"
        )
        if not await interrupts.again(CONFIRM_SECONDS):
            complain(f"tailagent: task {task_id} goes on without this terminal")
            return
    show(status_event(await client.cancel_task(CancelTaskRequest(id=task_id))))
    complain(f"tailagent: canceled task {task_id}")


async def _check_answers(client: Client, task_id: str, answers: dict[str, str]) -> None:
    """--answer must name a question the task asks and one of its labels (a typo
    would otherwise reach the agent as the person's choice)."""
    task = await client.get_task(GetTaskRequest(id=task_id, history_length=0))
    pending = Outcome()
    pending.observe(StreamResponse(task=task))
    if pending.prompt is not None and pending.prompt.kind == "permission_request":
        # The server would read the answers as a reply in words, not a clear yes or
        # no, and deny the step: the person meant something else.
        asked = pending.prompt.data.get("title") or pending.prompt.text
        raise UsageError(
            f"task {task_id} asks for permission ({asked}), not a question: "
            "answer it with allow or deny (or option:ID), not --answer"
        )
    if pending.prompt is None or pending.prompt.kind != "ask_user_question":
        return  # nothing to check against: the server answers for itself
    options = question_options(pending.prompt)
    for question, label in answers.items():
        if question not in options:
            asked = "; ".join(repr(q) for q in options)
            raise UsageError(f"task {task_id} does not ask {question!r}; it asks {asked}")
        if options[question] and label not in options[question]:
            raise UsageError(
                f"{label!r} does not answer {question!r}: pick one of "
                + ", ".join(repr(o) for o in options[question])
            )


def _ask_in_terminal(
    console: Console, renderer: Renderer, outcome: Outcome, prompt: Prompt
) -> Message:
    renderer.prompt(outcome, replies=False)  # the details and the choices, once
    if prompt.kind == "ask_user_question":
        answers = {
            question: _choose(console, question, labels)
            for question, labels in question_options(prompt).items()
        }
        return build_message(
            "",
            task_id=outcome.task_id,
            context_id=outcome.context_id,
            request_id=prompt.request_id,
            answers=answers,
        )
    choices = "allow, deny"
    if prompt.data.get("options"):
        choices += ", or option:ID"
    reply = AskPrompt.ask(f"{choices} (a reason may follow)", console=console)
    return build_message(
        reply,
        task_id=outcome.task_id,
        context_id=outcome.context_id,
        request_id=prompt.request_id,
        answers={},
    )


def _choose(console: Console, question: str, labels: list[str]) -> str:
    """The label a person picks for the agent's question, each shown as text (escaped)
    and typed as shown; what the agent gets is its own label."""
    shown = {visible(label, one_line=True): label for label in labels}
    typed = AskPrompt.ask(Text(visible(question)), choices=list(shown) or None, console=console)
    return shown.get(typed, typed)


def as_utf8(raw: bytes, what: str = "the message") -> str:
    """Text to send. A2A carries UTF-8 only: bytes that are not (a Latin-1 file in
    `git diff | tailagent call -`) go as U+FFFD rather than stop the call, and the
    person is told, in one line, that the agent will not read them as they were."""
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError:
        complain(f"tailagent: {what} holds bytes that are not UTF-8: sent as \ufffd (U+FFFD)")
        return raw.decode("utf-8", errors="replace")


def call_command(args: argparse.Namespace) -> int:
    console = OutputConsole(highlight=False, soft_wrap=True)
    # `tailagent call -`, or a message piped in: the message is stdin's text.
    piped = not args.text and not args.answer and not args.interactive and not sys.stdin.isatty()
    if args.text == "-" or piped:
        args.text = as_utf8(sys.stdin.buffer.read()).strip()
    else:
        # The command line, as Python decoded it (undecodable bytes as surrogates),
        # back to its bytes: the same rule as stdin.
        args.text = as_utf8(os.fsencode(args.text))
    args.answer = [as_utf8(os.fsencode(pair), "--answer") for pair in args.answer]
    return run_command(args.url, args.state_dir, lambda target: run_call(args, target, console))
