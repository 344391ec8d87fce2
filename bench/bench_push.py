"""Benchmark of push notifications: what a webhook costs a turn, and how soon it hears.

Against tailagent serve --agent echo on loopback (push.allowed_hosts = 127.0.0.1),
with a webhook receiver (Hypercorn) in a process of its own, so that receiving does
not compete with the client for its event loop:
  - N sequential SendMessage calls with no push config (the baseline);
  - N with a push config whose receiver answers at once, and the delay from each
    response to the arrival of that task's final notification;
  - N with a push config whose receiver never answers (deliveries must not block).

Usage: python bench/bench_push.py [--requests 200]
(`--receive` and `--hang` run the receiver; the benchmark starts it itself.)
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from hypercorn.asyncio import serve

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
from tests.conftest import start_server
from tests.webhook import loopback_config, request_body

HEADERS = {"A2A-Version": "1.0"}


class Webhook:
    """Prints each task's final notification as `task-id arrival-time`; may hang every
    POST (it then never answers)."""

    def __init__(self, hang: bool) -> None:
        self.hang = hang

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        payload = json.loads(await request_body(receive))
        if "task" in payload:
            print(payload["task"]["id"], time.time(), flush=True)
        if self.hang:
            await asyncio.Event().wait()
        await send({"type": "http.response.start", "status": 204, "headers": []})
        await send({"type": "http.response.body", "body": b""})


async def receive_forever(hang: bool) -> None:
    config, port = loopback_config()
    config.errorlog = None
    print(port, flush=True)
    await serve(Webhook(hang), config)  # type: ignore[arg-type]


class Receiver:
    """The receiver process, and when each task's final notification reached it."""

    def __init__(self, process: asyncio.subprocess.Process, port: int) -> None:
        self.process = process
        self.url = f"http://127.0.0.1:{port}/hook"
        self.final_at: dict[str, float] = {}
        self._reader = asyncio.create_task(self._read())

    @classmethod
    async def start(cls, hang: bool) -> Receiver:
        args = [__file__, "--receive", *(["--hang"] if hang else [])]
        process = await asyncio.create_subprocess_exec(
            sys.executable, *args, stdout=asyncio.subprocess.PIPE
        )
        assert process.stdout is not None
        return cls(process, int(await process.stdout.readline()))

    async def _read(self) -> None:
        assert self.process.stdout is not None
        async for line in self.process.stdout:
            task_id, at = line.decode().split()
            self.final_at[task_id] = float(at)

    async def arrival(self, task_id: str) -> float:
        async with asyncio.timeout(10):
            while task_id not in self.final_at:  # noqa: ASYNC110 (filled by the reader)
                await asyncio.sleep(0.0005)
        return self.final_at[task_id]

    async def stop(self) -> None:
        self.process.kill()
        await self.process.wait()
        self._reader.cancel()


def send_message(push_url: str | None) -> dict[str, Any]:
    params: dict[str, Any] = {
        "message": {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": "hi"}]}
    }
    if push_url:
        params["configuration"] = {"taskPushNotificationConfig": {"url": push_url}}
    return {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}


async def run(
    url: str, n: int, headers: dict[str, str], receiver: Receiver | None, measure_lag: bool
) -> tuple[list[float], list[float]]:
    times, lags = [], []
    async with httpx.AsyncClient(headers=headers, timeout=30) as http:
        for _ in range(20):  # warm up
            await http.post(url, json=send_message(None))
        for _ in range(n):
            start = time.perf_counter()
            response = await http.post(url, json=send_message(receiver and receiver.url))
            times.append(time.perf_counter() - start)
            done = time.time()
            task = response.json()["result"]["task"]
            assert task["status"]["state"] == "TASK_STATE_COMPLETED"
            if receiver is not None and measure_lag:
                lags.append(await receiver.arrival(task["id"]) - done)
    return times, lags


async def main() -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=200)
    parser.add_argument("--receive", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--hang", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.receive:
        await receive_forever(args.hang)
        return 0
    ms = 1000
    with tempfile.TemporaryDirectory() as tmp:
        config = Path(tmp) / "push.toml"
        config.write_text('[push]\nallowed_hosts = ["127.0.0.1"]\ntimeout = 60\n')
        server = start_server(Path(tmp), "--config", str(config))
        headers = {**HEADERS, "Authorization": f"Bearer {server.token}"}
        try:
            base, _ = await run(server.url + "/", args.requests, headers, None, False)
            label = "no push config:"
            print(f"{label:24} SendMessage median {statistics.median(base) * ms:.2f} ms")
            for hang in (False, True):
                receiver = await Receiver.start(hang)
                n = args.requests if not hang else max(20, args.requests // 4)
                try:
                    times, lags = await run(server.url + "/", n, headers, receiver, not hang)
                finally:
                    await receiver.stop()
                label = "receiver never answers:" if hang else "receiver answers:"
                line = f"{label:24} SendMessage median {statistics.median(times) * ms:.2f} ms"
                if lags:
                    lags.sort()
                    line += (
                        f"; final notification {statistics.median(lags) * ms:.2f} ms after the"
                        f" response (p95 {lags[int(0.95 * len(lags))] * ms:.2f} ms)"
                    )
                print(line)
        finally:
            server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(asyncio.run(main()))
