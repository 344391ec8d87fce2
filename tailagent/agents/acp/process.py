"""One ACP agent process: spawned, drained, spoken to, and stopped.

Its stderr is read all the time: an agent that writes to a pipe nobody reads
stalls. The lines are logged (bounded), and the last ones are kept to quote when
a turn or a start fails.
"""

from __future__ import annotations

import asyncio
import collections
import contextlib
import logging
import os
import shutil
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any, TypeVar

import acp
from acp.connection import StreamDirection, StreamEvent
from acp.schema import (
    ClientCapabilities,
    ElicitationCapabilities,
    ElicitationFormCapabilities,
    FileSystemCapabilities,
    Implementation,
    InitializeResponse,
    SessionCapabilities,
)

from tailagent.agents.events import AgentStartError
from tailagent.mends.acp_cancel import send_cancel_request
from tailagent.sandbox.fences import Fence
from tailagent.sandbox.freezer import CgroupFreezer, Freezer, freezer_of, namespaced
from tailagent.version import __version__

log = logging.getLogger("tailagent.agents")

STDERR_TAIL_LINES = 20
STDERR_LOG_LINES = 200  # per process; past this, stderr is kept but no longer logged
STREAM_LIMIT = 16 * 1024 * 1024  # one ACP message may carry a whole file
REQUEST_CANCELLED = -32800
# After $/cancel_request, how long the agent has to answer the request it was told of.
CANCEL_ANSWER_WAIT = 1.0

T = TypeVar("T")


class AgentProcess:
    def __init__(
        self,
        argv: list[str],
        env: dict[str, str],
        cwd: Path,
        host: Callable[[AgentProcess], Any],
        fence: Fence | None = None,
    ) -> None:
        self.argv = argv
        self._env = env
        self._cwd = cwd
        # The conversation's sandbox: the agent starts inside it, and so does every
        # terminal command it is allowed to run (None: unfenced, sandbox.mode = off).
        self.fence = fence or Fence(cwd, (), "unfenced")
        self._host_factory = host
        self.host: Any = None
        self.connection: acp.core.ClientSideConnection | None = None
        self.info: InitializeResponse | None = None
        self._process: asyncio.subprocess.Process | None = None
        self._stderr: collections.deque[str] = collections.deque(maxlen=STDERR_TAIL_LINES)
        self._stderr_task: asyncio.Task[None] | None = None
        self.exited: asyncio.Task[int] | None = None
        # (method, sessionId) -> the JSON-RPC id of the last such request sent: what a
        # $/cancel_request names when tailagent gives up on it.
        self._sent: dict[tuple[str, str], int | str] = {}
        # Its fence's processes, stopped between turns (none unfenced: no namespace).
        self.freezer: Freezer | CgroupFreezer = Freezer(None)

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.returncode is None

    @property
    def supports_load(self) -> bool:
        caps = self.info.agent_capabilities if self.info else None
        return bool(caps and caps.load_session)

    def _session_caps(self) -> SessionCapabilities | None:
        caps = self.info.agent_capabilities if self.info else None
        return caps.session_capabilities if caps else None

    @property
    def supports_resume(self) -> bool:
        """session/resume: the agent reattaches a session without replaying its history."""
        caps = self._session_caps()
        return bool(caps and caps.resume is not None)

    @property
    def supports_close(self) -> bool:
        """session/close: the agent frees what a session holds when tailagent ends it."""
        caps = self._session_caps()
        return bool(caps and caps.close is not None)

    @property
    def auth_methods(self) -> list[Any]:
        return list(self.info.auth_methods or []) if self.info else []

    async def settle_stderr(self, bound: float = 1.0) -> None:
        """After an exit, lets the drain read the last lines before anyone quotes them."""
        if self._stderr_task is not None and not self.alive:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(asyncio.shield(self._stderr_task), timeout=bound)

    def stderr_tail(self) -> str:
        return "\n".join(self._stderr)

    def describe_exit(self) -> str:
        code = self._process.returncode if self._process else None
        tail = self.stderr_tail()
        return f"the agent exited (code {code})" + (f"; its last words:\n{tail}" if tail else "")

    async def start(self, handshake_timeout: float) -> None:
        """Spawns the process and completes the ACP handshake, or raises AgentStartError."""
        program = shutil.which(self.argv[0], path=self._env.get("PATH"))
        if program is None:
            where = "is not on PATH"
            if os.sep in self.argv[0]:
                where = "is not an executable file"
            raise AgentStartError(
                f"cannot start the agent: {self.argv[0]!r} {where}"
                + (" (install Node.js and npm)" if self.argv[0] in ("npx", "node") else "")
            )
        fenced = namespaced(self.fence.options)
        group = self.fence.group() if fenced else None  # see sandbox/cgroups.py
        argv = self.fence.wrap([program, *self.argv[1:]], group=group)
        try:
            self._process = await asyncio.create_subprocess_exec(
                *argv,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                env=self._env,
                cwd=self._cwd,
                limit=STREAM_LIMIT,
                start_new_session=True,  # its children die with it, not with our terminal
            )
        except OSError as exc:
            self.fence.retire(group)
            raise AgentStartError(f"cannot start the agent {self.argv[0]!r}: {exc}") from None
        process = self._process
        assert process.stdin and process.stdout and process.stderr
        if fenced:
            self.freezer = freezer_of(process.pid, group)
        self._stderr_task = asyncio.create_task(self._drain(process.stderr), name="agent-stderr")
        self.exited = asyncio.create_task(process.wait(), name="agent-exit")
        self.exited.add_done_callback(lambda _: self.fence.retire(group))
        self.host = self._host_factory(self)
        # acp 0.12.1 still routes elicitation/create only with its "unstable" switch.
        self.connection = acp.connect_to_agent(
            self.host,
            process.stdin,
            process.stdout,
            observers=[self._observe],
            use_unstable_protocol=True,
        )
        handshake = asyncio.ensure_future(
            self.connection.initialize(
                protocol_version=acp.PROTOCOL_VERSION,
                client_capabilities=ClientCapabilities(
                    fs=FileSystemCapabilities(read_text_file=True, write_text_file=True),
                    terminal=True,
                    elicitation=ElicitationCapabilities(form=ElicitationFormCapabilities()),
                ),
                client_info=Implementation(name="tailagent", version=__version__),
            )
        )
        done = await self._first_of(handshake, handshake_timeout)
        if handshake in done and handshake.exception() is None:
            self.info = handshake.result()
            return
        handshake.cancel()
        if handshake in done and not self.exited.done():
            # A broken pipe usually means the process is on its way out: say why.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(asyncio.shield(self.exited), timeout=1.0)
        if self.exited.done():
            await asyncio.sleep(0.05)  # let the drain catch the last stderr lines
            reason = self.describe_exit()
        elif handshake in done:
            reason = f"the ACP handshake failed: {handshake.exception()}"
        else:
            reason = f"no ACP handshake within {handshake_timeout:.0f} s"
        await self.stop(grace=1.0)
        raise AgentStartError(f"the agent {' '.join(self.argv)!r} did not start: {reason}")

    async def _first_of(self, handshake: asyncio.Future[Any], within: float) -> set[Any]:
        """The handshake's end or the process's, whichever comes first, waiting at most `within` s.
        Cancelled meanwhile (a server stopping while a spare starts), it takes the
        handshake, the connection's tasks and the process with it, or the loop would
        close on them pending."""
        assert self.exited is not None
        try:
            done, _ = await asyncio.wait(
                {handshake, self.exited}, timeout=within, return_when=asyncio.FIRST_COMPLETED
            )
        except asyncio.CancelledError:
            handshake.cancel()
            with contextlib.suppress(BaseException):
                await handshake
            await self.stop(grace=1.0)
            raise
        return done

    def _observe(self, event: StreamEvent) -> None:
        """Notes the id of each request sent: acp's calls do not return it, and a
        $/cancel_request must name it."""
        message = event.message
        if event.direction is not StreamDirection.OUTGOING or "id" not in message:
            return
        params = message.get("params")
        session_id = params.get("sessionId") if isinstance(params, dict) else None
        if isinstance(message.get("method"), str) and isinstance(session_id, str):
            self._sent[(message["method"], session_id)] = message["id"]

    async def bounded(self, call: Awaitable[T], method: str, session_id: str, within: float) -> T:
        """Awaits `call` (the `method` request for `session_id`) for `within` seconds.
        Past that tailagent gives up on it and says so with $/cancel_request, so the
        agent stops working on an answer nobody waits for; TimeoutError follows."""
        task = asyncio.ensure_future(call)
        done, _ = await asyncio.wait({task}, timeout=within)
        if task in done:
            return task.result()
        request_id = self._sent.get((method, session_id))
        connection = self.connection
        if request_id is not None and connection is not None and self.alive:
            log.info("agent %s: gave up on %s after %.0f s", self.pid, method, within)
            with contextlib.suppress(Exception):
                await send_cancel_request(connection, request_id)
            await asyncio.wait({task}, timeout=CANCEL_ANSWER_WAIT)
        task.cancel()
        with contextlib.suppress(BaseException):
            await task
        raise TimeoutError(f"{method} got no answer within {within:.0f} s")

    async def _drain(self, stream: asyncio.StreamReader) -> None:
        logged = 0
        while line := await stream.readline():
            text = line.decode(errors="replace").rstrip()
            self._stderr.append(text)
            if logged < STDERR_LOG_LINES:
                logged += 1
                log.info("agent %s stderr: %s", self.pid, text[:500])

    async def stop(self, grace: float = 5.0) -> None:
        """Closes stdin, waits `grace`, then terminates, then kills: bounded whatever it does."""
        process = self._process
        if process is None:
            return
        # A stopped process keeps a SIGTERM pending and reads no closed stdin: thaw first.
        self.thaw()
        if self.connection is not None:
            with contextlib.suppress(Exception):
                await self.connection.close()
        if process.returncode is None:
            with contextlib.suppress(Exception):
                assert process.stdin is not None
                process.stdin.close()
            for action in (None, "terminate", "kill"):
                if action == "terminate":
                    self._signal(15)
                elif action == "kill":
                    self._signal(9)
                try:
                    await asyncio.wait_for(asyncio.shield(self._wait()), timeout=grace)
                    break
                except TimeoutError:
                    continue
        if self._stderr_task is not None:
            with contextlib.suppress(Exception):
                await asyncio.wait_for(self._stderr_task, timeout=1.0)

    async def freeze(self) -> None:
        """Stops every process of the agent's fence: called only when no prompt is in
        flight (a turn ended, a spare ready) or while the agent waits on our answer. One
        whose processes do not all stop is ended: frozen or ended, never half."""
        if not self.alive or await self.freezer.freeze():
            return
        log.warning("agent %s: its processes did not stop between turns; ending it", self.pid)
        self.freezer.kill()
        self._signal(9)

    def thaw(self) -> None:
        """Continues the agent's fence; before anything is written to the agent."""
        self.freezer.thaw()

    async def _wait(self) -> int:
        assert self._process is not None
        return await self._process.wait()

    def _signal(self, signum: int) -> None:
        """Signals the agent's whole process group: npx spawns node, node may spawn more."""
        if self._process is None or self._process.returncode is not None:
            return
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(self._process.pid, signum)
