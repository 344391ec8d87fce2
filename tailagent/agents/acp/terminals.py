"""Commands an agent runs through ACP terminals, once the caller has approved them.

An approved command is not sandboxed: it runs as the server's user. What bounds
it is here: an environment allowlist (the server's secrets stay out), a working
directory inside the workspace, an output cap that keeps the tail, a cap on
terminals per turn, and a kill of every terminal when the turn ends.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import uuid
from dataclasses import dataclass, field
from pathlib import Path

from tailagent.sandbox.fences import Fence

TERMINAL_ENV = ("PATH", "HOME", "LANG", "TMPDIR", "TERM", "SHELL", "USER", "TZ")


def terminal_environment(source: dict[str, str], extra: dict[str, str]) -> dict[str, str]:
    env = {k: v for k, v in source.items() if k in TERMINAL_ENV or k.startswith("LC_")}
    env.update(extra)
    return env


@dataclass
class Terminal:
    process: asyncio.subprocess.Process
    limit: int
    output: bytearray = field(default_factory=bytearray)
    truncated: bool = False
    reader: asyncio.Task[None] | None = None

    async def read(self) -> None:
        assert self.process.stdout is not None
        while chunk := await self.process.stdout.read(65536):
            self.output += chunk
            if len(self.output) > self.limit:
                del self.output[: len(self.output) - self.limit]
                self.truncated = True

    def text(self) -> str:
        return self.output.decode(errors="replace")


class TerminalLimit(Exception):
    pass


class Terminals:
    """The terminals of one agent session."""

    def __init__(self, workspace: Path, output_limit: int, per_turn: int, fence: Fence) -> None:
        self._workspace = workspace
        self._fence = fence  # the conversation's: an approved command runs inside it too
        self._output_limit = output_limit
        self._per_turn = per_turn
        self._started_this_turn = 0
        self._terminals: dict[str, Terminal] = {}

    async def create(
        self, command: str, args: list[str], cwd: Path, extra_env: dict[str, str], limit: int | None
    ) -> str:
        if self._started_this_turn >= self._per_turn:
            raise TerminalLimit(f"at most {self._per_turn} terminals per turn")
        self._started_this_turn += 1
        process = await asyncio.create_subprocess_exec(
            *self._fence.wrap([command, *args], cwd=cwd),
            stdin=asyncio.subprocess.DEVNULL,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.STDOUT,
            cwd=cwd,
            env=terminal_environment(dict(os.environ), extra_env),
            start_new_session=True,
        )
        cap = min(limit, self._output_limit) if limit else self._output_limit
        terminal = Terminal(process, cap)
        terminal.reader = asyncio.create_task(terminal.read(), name="terminal-output")
        terminal_id = uuid.uuid4().hex
        self._terminals[terminal_id] = terminal
        return terminal_id

    def get(self, terminal_id: str) -> Terminal:
        try:
            return self._terminals[terminal_id]
        except KeyError:
            raise KeyError(f"no terminal {terminal_id}") from None

    async def wait(self, terminal_id: str) -> int | None:
        terminal = self.get(terminal_id)
        code = await terminal.process.wait()
        if terminal.reader is not None:
            with contextlib.suppress(Exception):
                await terminal.reader
        return code

    def kill(self, terminal_id: str) -> None:
        process = self.get(terminal_id).process
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, 9)

    async def release(self, terminal_id: str) -> None:
        if terminal_id in self._terminals:
            self.kill(terminal_id)
            terminal = self._terminals.pop(terminal_id)
            with contextlib.suppress(Exception):
                await asyncio.wait_for(terminal.process.wait(), timeout=5)

    async def end_turn(self) -> None:
        """Kills and forgets every terminal: nothing an agent started outlives its turn."""
        for terminal_id in list(self._terminals):
            await self.release(terminal_id)
        self._started_this_turn = 0
