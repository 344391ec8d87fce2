"""Ctrl-C while a turn streams, as events on the loop rather than a KeyboardInterrupt
thrown wherever the program happens to be: the command can then decide what the
interrupt means for the task (see tailagent.client.call)."""

from __future__ import annotations

import asyncio
import contextlib
import signal
from typing import Any


class Interrupts:
    def __init__(self) -> None:
        self._hit = asyncio.Event()

    def __enter__(self) -> Interrupts:
        asyncio.get_running_loop().add_signal_handler(signal.SIGINT, self._hit.set)
        return self

    def __exit__(self, *_: object) -> None:
        asyncio.get_running_loop().remove_signal_handler(signal.SIGINT)

    async def first_or(self, work: asyncio.Task[Any]) -> bool:
        """Waits for `work` or a Ctrl-C; True if Ctrl-C came first."""
        hit = asyncio.create_task(self._hit.wait())
        done, _ = await asyncio.wait({work, hit}, return_when=asyncio.FIRST_COMPLETED)
        hit.cancel()
        return work not in done

    async def again(self, seconds: float) -> bool:
        """True if Ctrl-C comes again within `seconds`."""
        self._hit.clear()
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(seconds):
                await self._hit.wait()
                return True
        return False

    @staticmethod
    async def settle(work: asyncio.Task[Any]) -> None:
        """Lets cancelled work finish unwinding (closing its connection)."""
        with contextlib.suppress(BaseException):
            await work
