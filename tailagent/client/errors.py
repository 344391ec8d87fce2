"""What the CLI's A2A commands share at their edge: exit codes, and one line for
every way a call can go wrong (the server's own reason when it refused).

Exit codes a script can rely on: 0 completed, 1 failed / canceled / rejected (or
a cancel of a task that had already ended), 2 usage or connection error or a task
that does not exist (or a stream cut whose task's end cannot be read), 3
input-required (the reply command is printed), 130 interrupted (Ctrl-C), 141 the
output's reader went away (tailagent.cli.run).
"""

from __future__ import annotations

import asyncio
import contextlib
import sys
from collections.abc import Callable, Coroutine, Iterator
from typing import Any

import httpx
from a2a.client import A2AClientError
from a2a.types.a2a_pb2 import TaskState
from a2a.utils.errors import A2AError

from tailagent.client.connect import Target, parse_target
from tailagent.client.render import Outcome
from tailagent.output.visible import visible

EXIT_COMPLETED, EXIT_FAILED, EXIT_USAGE, EXIT_INPUT_REQUIRED = 0, 1, 2, 3
EXIT_INTERRUPTED = 130


class UsageError(Exception):
    """A command line that cannot be carried out; str() says why."""


class Refused(Exception):
    """The agent, or what the user asked of it, is refused; str() says why."""


def exit_code(outcome: Outcome) -> int:
    """What a turn (or a task followed to its end) came to, as the exit code. A task
    whose end this client could not read (the stream cut, the server gone) is a
    connection error, not a failure of the task: it may still be running."""
    if outcome.direct_message is not None or outcome.state == TaskState.TASK_STATE_COMPLETED:
        return EXIT_COMPLETED
    if outcome.prompt is not None:
        return EXIT_INPUT_REQUIRED
    if outcome.unfinished:
        return EXIT_USAGE
    return EXIT_FAILED


def complain(text: str) -> None:
    """One line on stderr for the person. It may hold a server's (or an agent's) own
    words, a reason or an id: shown escaped, like all text from outside."""
    print(visible(text, one_line=True), file=sys.stderr)


def run_command(
    url: str | None,
    state_dir: str | None,
    command: Callable[[Target], Coroutine[Any, Any, int]],
) -> int:
    """Runs one A2A command against the agent at `url`, turning each failure into
    one line on stderr and its exit code."""
    try:
        target = parse_target(url, state_dir)
    except ValueError as exc:
        complain(f"tailagent: {exc}")
        return EXIT_USAGE
    try:
        return asyncio.run(command(target))
    except (UsageError, Refused) as exc:
        complain(f"tailagent: {exc}")
    except (httpx.HTTPError, A2AClientError) as exc:
        if _refused_connection(exc):
            complain(
                f"tailagent: nothing answers at {target.url}: start `tailagent serve`, "
                "or say where the agent is with --url"
            )
        elif isinstance(exc, httpx.HTTPError) and not _status(exc):
            complain(f"tailagent: cannot reach {target.url}: {reason(exc)}")
        else:
            print(
                visible(f"tailagent: {target.url}: {reason(exc)}", one_line=True)
                + _hint(target, exc),
                file=sys.stderr,
            )
    except A2AError as exc:
        complain(f"tailagent: {target.url} refused the request: {reason(exc)}")
    except KeyboardInterrupt:
        print("tailagent: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    return EXIT_USAGE


def _causes(exc: BaseException) -> Iterator[BaseException]:
    """The error and what led to it (a2a-sdk wraps httpx's errors in its own)."""
    cause: BaseException | None = exc
    while cause is not None:
        yield cause
        cause = cause.__cause__ or cause.__context__


def _status(exc: BaseException) -> int | None:
    found = next((c for c in _causes(exc) if isinstance(c, httpx.HTTPStatusError)), None)
    return found.response.status_code if found is not None else None


def _hint(target: Target, exc: BaseException) -> str:
    """What to do about a refusal for want of a token, when none could be sent."""
    missing = target.missing_credentials() if _status(exc) == 401 else None
    return f"\n  {missing}" if missing else ""


def _refused_connection(exc: BaseException) -> bool:
    return any(isinstance(cause, httpx.ConnectError) for cause in _causes(exc))


def _refusal(body: object) -> str | None:
    """`error: reason` from a refusal body in any binding's shape (see access/refusals.py)."""
    if not isinstance(body, dict):
        return None
    error = body.get("error")
    if isinstance(error, dict) and error.get("message"):
        word = (error.get("data") or {}).get("error") or error.get("status", "")
        return f"{word}: {error['message']}"
    if body.get("reason"):
        return f"{error}: {body['reason']}"
    return None


def reason(exc: BaseException) -> str:
    """One line: the server's own reason when it refused (401/403/503), else the error."""
    status = next((c for c in _causes(exc) if isinstance(c, httpx.HTTPStatusError)), None)
    if status is not None:
        with contextlib.suppress(ValueError):
            refused = _refusal(status.response.json())
            if refused is not None:
                return f"{status.response.status_code} {refused}"
    said = [_said(cause) for cause in _causes(exc)]
    if said[0] and not said[0].endswith(":"):
        return said[0]
    # a2a-sdk's "Network communication error: " around an httpx error with no text of
    # its own: the reason is further down (the OS's "Connection reset by peer").
    found = next((s for s in said[1:] if s and not s.endswith(":")), None)
    if found is None:
        network = any(isinstance(c, httpx.TransportError | OSError) for c in _causes(exc))
        found = "the connection closed" if network else type(exc).__name__
    return f"{said[0]} {found}" if said[0] else found


def _said(exc: BaseException) -> str:
    """An error's own words, on one line: an OS error's without its errno."""
    text = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
    return next(iter(text.strip().splitlines()), "")
