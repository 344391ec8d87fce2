"""The session pool: one session per context, idle ones bounded, resumed from the map."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tailagent.agents.echo import EchoBackend, EchoSession
from tailagent.agents.events import AgentEvent, Notice, Text, Thought, with_ready
from tailagent.bridge.conversations.sessions import ContextBusy, SessionPool
from tailagent.store.database import open_database
from tailagent.store.session_map import SessionMap


@pytest.fixture
async def session_map(tmp_path: Path) -> AsyncIterator[SessionMap]:
    database = open_database(f"sqlite+aiosqlite:///{tmp_path / 'tailagent.db'}")
    sessions = SessionMap(database)
    await sessions.initialize()
    yield sessions
    await sessions.flush()
    await database.aclose()


async def test_a_context_is_lent_to_one_task_at_a_time(session_map: SessionMap) -> None:
    pool = SessionPool(EchoBackend(), session_map)
    session, resumed = await pool.acquire("ctx", "task-1")
    assert not resumed
    with pytest.raises(ContextBusy):
        await pool.acquire("ctx", "task-2")
    await pool.release("ctx", "task-1")
    again, _ = await pool.acquire("ctx", "task-2")
    assert again is session


async def test_sessions_are_capped_and_resume_from_the_map(
    session_map: SessionMap,
) -> None:
    backend = EchoBackend()
    backend.max_sessions = 2
    pool = SessionPool(backend, session_map)
    first: list[EchoSession] = []
    for n in range(3):
        session, _ = await pool.acquire(f"ctx-{n}", f"task-{n}")
        first.append(session)  # type: ignore[arg-type]
        await pool.release(f"ctx-{n}", f"task-{n}")
    assert first[0].closed and not first[1].closed  # the least recently used of three
    resumed, was_resumed = await pool.acquire("ctx-0", "task-later")
    assert was_resumed
    assert resumed is not first[0] and resumed.session_id == first[0].session_id
    kept, was_resumed = await pool.acquire("ctx-2", "task-other")
    assert kept is first[2] and not was_resumed


def test_ready_text_and_thought_runs_are_joined_in_order() -> None:
    queue: asyncio.Queue[AgentEvent] = asyncio.Queue()
    for event in (Text("b"), Text("c"), Thought("t1"), Thought("t2"), Notice("n"), Text("d")):
        queue.put_nowait(event)
    assert with_ready(Text("a"), queue) == [Text("abc"), Thought("t1t2"), Notice("n"), Text("d")]
    assert queue.empty()
    assert with_ready(Notice("alone"), queue) == [Notice("alone")]
