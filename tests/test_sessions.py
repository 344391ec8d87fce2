"""The session pool: one session per context, idle ones bounded, resumed from the map."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tailagent.agents.echo import EchoBackend, EchoSession
from tailagent.agents.events import AgentEvent, Notice, Text, Thought, with_ready
from tailagent.bridge.conversations.sessions import ContextBusy, SessionPool, ShareFull
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


async def test_a_turn_holds_its_context_from_its_start_not_its_session(
    session_map: SessionMap,
) -> None:
    """Reserved at the turn's start, before its worktree is made: a merge asked then
    sees it running (operations ask `holder`), and its share is still counted."""
    backend = EchoBackend()
    backend.max_sessions = 4
    pool = SessionPool(backend, session_map, per_caller=1)
    pool.reserve("ctx", "task-1")
    assert pool.holder("ctx") == "task-1"
    with pytest.raises(ContextBusy):
        pool.reserve("ctx", "task-2")
    with pytest.raises(ContextBusy):
        await pool.acquire("ctx", "task-2")
    await pool.acquire("ctx", "task-1", caller="alice")
    pool.reserve("ctx-b", "task-3")
    with pytest.raises(ShareFull):  # the reservation did not skip alice's share
        await pool.acquire("ctx-b", "task-3", caller="alice")
    await pool.release("ctx-b", "task-3")  # as a refused start does
    assert pool.holder("ctx-b") is None
    await pool.release("ctx", "task-1")
    assert pool.holder("ctx") is None


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


async def test_a_conversation_taken_over_from_a_box_gone_starts_a_new_session(
    session_map: SessionMap,
) -> None:
    """The store names the session the box gone ran (its files stayed there): the next
    session of the context is a new one, stored in its place, not a resume the agent
    here could not find. Only the next one: after it, the context resumes as any."""
    await session_map.put("ctx", "echo", "the-session-of-the-box-gone")
    pool = SessionPool(EchoBackend(), session_map)
    pool.start_afresh("ctx")
    session, resumed = await pool.acquire("ctx", "task-1")
    assert not resumed and session.session_id != "the-session-of-the-box-gone"
    assert await session_map.get("ctx", "echo") == session.session_id
    await pool.release("ctx", "task-1")
    await pool.aclose()  # the session ends: the next turn resumes it from the map
    again, resumed = await SessionPool(EchoBackend(), session_map).acquire("ctx", "task-2")
    assert resumed and again.session_id == session.session_id


def test_ready_text_and_thought_runs_are_joined_in_order() -> None:
    queue: asyncio.Queue[AgentEvent] = asyncio.Queue()
    for event in (Text("b"), Text("c"), Thought("t1"), Thought("t2"), Notice("n"), Text("d")):
        queue.put_nowait(event)
    assert with_ready(Text("a"), queue) == [Text("abc"), Thought("t1t2"), Notice("n"), Text("d")]
    assert queue.empty()
    assert with_ready(Notice("alone"), queue) == [Notice("alone")]
