"""The server gives memory back once it is quiet after a burst, never in the middle."""

from __future__ import annotations

import asyncio

import pytest

from tailagent.process import memory


async def test_memory_is_trimmed_once_requests_are_done_and_none_come(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    trims: list[int] = []
    activity = {"requests": 0, "in_flight": 0}
    monkeypatch.setattr(memory, "POLL_SECONDS", 0.01)
    monkeypatch.setattr(memory, "QUIET_SECONDS", 0.1)
    monkeypatch.setattr(memory, "_trimmer", lambda: lambda: trims.append(activity["requests"]))
    watcher = asyncio.create_task(
        memory.trim_when_quiet(lambda: (activity["requests"], activity["in_flight"]))
    )
    try:
        await asyncio.sleep(0.2)
        assert trims == []  # nothing happened yet: nothing to give back
        activity.update(requests=1000, in_flight=400)  # a burst, streams still open
        await asyncio.sleep(0.2)
        assert trims == []  # no new request for a while, but streams are still running
        activity["in_flight"] = 0
        await asyncio.sleep(0.05)
        assert trims == []  # quiet is counted from when the last stream ended
        await asyncio.sleep(0.15)
        assert trims == [1000]
        await asyncio.sleep(0.2)
        assert trims == [1000]  # once, not again while it stays quiet
    finally:
        watcher.cancel()
