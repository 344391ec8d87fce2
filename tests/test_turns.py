"""agent.max_concurrent_turns: sends past the limit wait their turn, in order,
and none is refused."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path

from tests.a2a_helpers import A2A
from tests.conftest import start_server
from tests.test_metrics import samples


async def test_a_send_past_the_limit_waits_for_a_place_then_runs(tmp_path: Path) -> None:
    config = tmp_path / "tailagent.toml"
    config.write_text("[agent]\nmax_concurrent_turns = 1\n")
    server = start_server(tmp_path, "--config", str(config))
    try:
        agent = A2A(server.url, server.token)
        slow = asyncio.create_task(agent.turn("slow 2"))
        await asyncio.sleep(0.5)  # the slow turn holds the one place
        quick = asyncio.create_task(agent.turn("hello"))
        async with agent.http() as http:
            for _ in range(40):
                scraped = samples((await http.get(server.url + "/metrics")).text)
                if scraped[("tailagent_turns_waiting", ())] == 1:
                    break
                await asyncio.sleep(0.05)
        assert scraped[("tailagent_turns_waiting", ())] == 1
        assert not quick.done()
        slow_turn = await slow
        slow_ended = time.monotonic()
        quick_turn = await quick
        assert time.monotonic() - slow_ended < 2  # it ran as soon as the place was free
        assert (slow_turn.final_state, quick_turn.final_state) == ("completed", "completed")
        async with agent.http() as http:
            scraped = samples((await http.get(server.url + "/metrics")).text)
        assert scraped[("tailagent_turns_waiting", ())] == 0
    finally:
        assert server.stop() == 0, server.log()
