"""Where a new conversation starts among boxes (cluster/placement.py), and the boxes'
rows in a real store (cluster/boxes.py): what the test tailnet's cluster tests rely on,
each rule on its own."""

from __future__ import annotations

import time
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from tailagent.cluster import boxes as boxes_module
from tailagent.cluster.boxes import Box, BoxTable
from tailagent.cluster.placement import choose
from tailagent.store.database import Database, open_database


def box(name: str, running: int, capacity: int = 2, draining: bool = False) -> Box:
    return Box(name, f"http://{name}.tail.test", running, capacity, draining)


def test_a_new_conversation_goes_to_the_least_loaded_box_and_a_tie_stays() -> None:
    here = box("a", 1)
    assert choose(here, [here, box("b", 0), box("c", 1)]) == box("b", 0)
    assert choose(box("a", 0), [box("a", 0), box("b", 0)]) is None  # no hop for nothing
    assert choose(here, [here, box("b", 1)]) is None
    # Load is against capacity: 2 of 8 is less full than 1 of 2.
    assert choose(box("a", 1), [box("a", 1), box("b", 2, capacity=8)]) == box("b", 2, 8)


def test_a_full_or_draining_box_hands_every_new_conversation_on() -> None:
    assert choose(box("a", 2), [box("a", 2), box("b", 1)]) == box("b", 1)
    draining = box("a", 0, draining=True)
    assert choose(draining, [draining, box("b", 1)]) == box("b", 1)
    # ...but never to a box with no room, nor to one that drains: then it stays.
    assert choose(box("a", 2), [box("a", 2), box("b", 2), box("c", 0, draining=True)]) is None


@pytest.fixture
async def database(tmp_path: Path) -> AsyncIterator[Database]:
    db = open_database(f"sqlite+aiosqlite:///{tmp_path / 'tailagent.db'}")
    yield db
    await db.aclose()


async def test_a_box_gone_quiet_is_claimed_once_and_a_live_one_never(
    database: Database, monkeypatch: pytest.MonkeyPatch
) -> None:
    table = BoxTable(database)
    await table.write(box("live", 1))
    await table.write(box("quiet", 1))
    assert [b.server_id for b in await table.live()] == ["live", "quiet"]
    # The quiet box's row ages past STALE (its clock moved on without it).
    now = time.time()
    monkeypatch.setattr(boxes_module.time, "time", lambda: now + boxes_module.STALE + 1)
    await table.write(box("live", 1))
    assert [b.server_id for b in await table.live()] == ["live"]
    first, second = await table.claim_gone(), await table.claim_gone()
    assert first == [("quiet", "http://quiet.tail.test")] and second == []
    await table.remove("live")
    assert await table.live() == []
