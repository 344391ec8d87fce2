"""What numbering and keeping each event costs a long streamed turn.

Two tailagent servers on loopback, each with tests/fake_acp_agent.py: one as shipped
(every status and artifact update numbered and kept in the store, store/events.py),
one with `events_kept = 0` (none numbered or kept). Each runs `--turns` follow-up
turns of `--chunks` text chunks, alternating between the two, after a first turn that
starts the agent; the median time to a turn's last event, and the ratio.

Usage: python bench/bench_events.py [--chunks 2000] [--turns 9]
"""

from __future__ import annotations

import argparse
import asyncio
import shlex
import statistics
import sys
import tempfile
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from bench.bench_load import FAKE_ACP_AGENT, Server, chunked_turn
from tests.conftest import start_server


def start(tmp: Path, kept: bool) -> Server:
    config = tmp / "tailagent.toml"
    config.write_text("" if kept else "events_kept = 0\n")
    server = start_server(
        tmp, "--agent-command", shlex.join(FAKE_ACP_AGENT), "--config", str(config)
    )
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {server.token}"}
    url = server.url.rstrip("/") + "/"
    return Server("kept" if kept else "none", url, headers, server.process.pid, server.log,
                  server.stop)  # fmt: skip


async def main(chunks: int, turns: int) -> None:
    times: dict[str, list[float]] = {"kept": [], "none": []}
    with tempfile.TemporaryDirectory() as a, tempfile.TemporaryDirectory() as b:
        servers = [start(Path(a), True), start(Path(b), False)]
        try:
            async with httpx.AsyncClient(timeout=120) as http:
                contexts: dict[str, str] = {}
                for server in servers:
                    http.headers.update(server.headers)
                    _, _, contexts[server.name] = await chunked_turn(http, server, 1, None)
                for _ in range(turns):
                    for server in servers:
                        http.headers.update(server.headers)
                        elapsed, count, _ = await chunked_turn(
                            http, server, chunks, contexts[server.name]
                        )
                        assert count == chunks, f"{server.name}: {count} of {chunks} chunks"
                        times[server.name].append(elapsed)
        finally:
            for server in servers:
                server.stop()
    kept, none = statistics.median(times["kept"]), statistics.median(times["none"])
    print(f"one streamed turn of {chunks} chunks, median of {turns}:")
    print(f"  events numbered and kept: {kept * 1000:.0f} ms")
    print(f"  events_kept = 0:          {none * 1000:.0f} ms")
    print(f"  ratio: {kept / none:.3f}")


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--chunks", type=int, default=2000)
    parser.add_argument("--turns", type=int, default=9)
    options = parser.parse_args()
    asyncio.run(main(options.chunks, options.turns))
