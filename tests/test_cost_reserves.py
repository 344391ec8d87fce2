"""Budgets hold before a turn runs (issue 55): admitting a turn reserves what it may cost
of its person's day, a turn is refused while spent + running + reserved has reached the
budget (saying why and when it resets), the reservation becomes the turn's real cost
when it reports, and no reservation outlives a server's restart. Real servers, the echo
agent (`cost:N` reported at the turn's end, `slow N`), SQLite and a shared PostgreSQL,
and the rows the server kept."""

from __future__ import annotations

import signal
import sqlite3
import threading
import time
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.conftest import RunningServer, start_server
from tests.postgres import postgres_missing, running_postgres
from tests.test_cost import A2A, issue_token, sqlite_store, usage_today

BUDGET = "[budgets]\nper_caller_daily_usd = 1\n"
# Each of the four turns costs $0.90, reported only at its end, as in the issue.
TURN = "slow 2 cost:0.9"


def _serve(tmp: Path, config: str, state_dir: Path | None = None, *extra: str) -> RunningServer:
    path = tmp / "tailagent.toml"
    path.write_text(config)
    return start_server(tmp, "--config", str(path), *extra, state_dir=state_dir)


def _send(url: str, token: str, text: str, *, at_once: bool = False) -> dict[str, Any]:
    """A blocking SendMessage in a new conversation (`at_once`: returned as soon as the
    task is made); the whole JSON-RPC reply."""
    message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER", "parts": [{"text": text}]}
    params: dict[str, Any] = {"message": message}
    if at_once:
        params["configuration"] = {"returnImmediately": True}
    body = {"jsonrpc": "2.0", "id": 1, "method": "SendMessage", "params": params}
    headers = {**A2A, "Authorization": f"Bearer {token}"}
    reply: dict[str, Any] = httpx.post(url + "/", json=body, headers=headers, timeout=60).json()
    return reply


def _at_once(sends: list[tuple[str, str]], text: str) -> list[dict[str, Any]]:
    """One send per (server URL, token), all started together."""
    replies: list[dict[str, Any]] = [{} for _ in sends]
    gate = threading.Barrier(len(sends))

    def send(i: int) -> None:
        gate.wait()
        replies[i] = _send(*sends[i], text)

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(sends))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return replies


def _reserved(state_dir: Path) -> list[float]:
    connection = sqlite3.connect(state_dir / "tailagent.db")
    try:
        return [row[0] for row in connection.execute("SELECT usd FROM turn_reserved")]
    finally:
        connection.close()


def _day_spent(store_url: str) -> float:
    """Today's cost over every person in the store (no test here tests the CLI)."""
    return sum(day.cost.usd for day in usage_today(store_url))


def _check_refusal(said: str, held: str, source: str) -> None:
    """A refusal says what was spent and held, by which figure, and when it resets."""
    tomorrow = (datetime.now(UTC).date() + timedelta(days=1)).isoformat()
    assert said.startswith("token:ci has spent $"), said
    assert f"their running turns hold {held} more of it" in said, said
    assert f"(each reserves {source}" in said, said
    assert said.endswith(f"resets at {tomorrow} 00:00 UTC (midnight UTC)"), said


@pytest.mark.parametrize(
    ("cap", "source"),
    [
        ("per_task_usd = 1\n", "budgets.per_task_usd"),
        ("", "what is left of the budget: no budgets.per_task_usd"),
    ],
)
def test_four_turns_at_once_end_the_day_within_one_reserve(
    tmp_path: Path, cap: str, source: str
) -> None:
    """Four turns of one person started together against $1, each $0.90 reported at its
    end: the first reserves $1 (the task cap, or what is left of the day) and the three
    others are refused, saying why and when the budget resets; the day ends at $0.90,
    not the $3.60 of issue 55."""
    server = _serve(tmp_path, BUDGET + cap)
    try:
        token = issue_token(server, "ci", "caller")
        replies = _at_once([(server.url, token)] * 4, TURN)
        spent = _day_spent(sqlite_store(server))
        left = _reserved(server.state_dir)
    finally:
        server.stop()
    done = [r["result"]["task"] for r in replies if "result" in r]
    refused = [r["error"]["message"] for r in replies if "error" in r]
    assert [t["status"]["state"] for t in done] == ["TASK_STATE_COMPLETED"], replies
    assert len(refused) == 3
    for said in refused:
        _check_refusal(said, "$1.00", source)
    assert spent == pytest.approx(0.9) and spent <= 1.0 + 1.0
    assert left == []  # the turn's reservation became its cost


def test_a_reserve_is_held_while_its_turn_runs_and_released_when_it_reports(
    tmp_path: Path,
) -> None:
    """With `per_task_usd = 0.6`, two turns fit below $1 (reserved $0.60 each) and a
    third is refused while they run; once they report $0.10 each, their reservations
    are gone and the day holds $0.20, so the next turn is admitted."""
    server = _serve(tmp_path, BUDGET + "per_task_usd = 0.6\n")
    try:
        token = issue_token(server, "ci", "caller")
        first = _send(server.url, token, "slow 4 cost:0.1", at_once=True)
        second = _send(server.url, token, "slow 4 cost:0.1", at_once=True)
        held = _reserved(server.state_dir)
        third = _send(server.url, token, "cost:0.1")
        _wait(lambda: _reserved(server.state_dir) == [])
        spent = _day_spent(sqlite_store(server))
        fourth = _send(server.url, token, "cost:0.1")
        after = _reserved(server.state_dir)
    finally:
        server.stop()
    assert "result" in first and "result" in second
    assert held == [pytest.approx(0.6)] * 2
    _check_refusal(third["error"]["message"], "$1.20", "budgets.per_task_usd")
    assert spent == pytest.approx(0.2)
    assert fourth["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED"
    assert after == []


def test_a_restart_leaves_no_phantom_reservation(tmp_path: Path) -> None:
    """A turn holds the rest of the day when its server is killed; the server that
    starts again on the same state dir drops what its previous run held (that turn died
    with it), so the person's next turn is admitted and runs."""
    server = _serve(tmp_path, BUDGET)
    token = issue_token(server, "ci", "caller")
    try:
        assert "result" in _send(server.url, token, "slow 60 cost:0.9", at_once=True)
        _wait(lambda: _reserved(server.state_dir) == [pytest.approx(1.0)])
        refused = _send(server.url, token, "cost:0.1")
    finally:
        server.stop(signal.SIGKILL)
    assert "until one of them ends" in refused["error"]["message"]
    server = _serve(tmp_path, BUDGET, server.state_dir)
    try:
        left = _reserved(server.state_dir)
        after = _send(server.url, token, "cost:0.1")
        spent = _day_spent(sqlite_store(server))
    finally:
        server.stop()
    assert left == []
    assert after["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", after
    assert spent == pytest.approx(0.1)  # the killed turn never reported: nothing counted


@pytest.mark.skipif(postgres_missing() is not None, reason=postgres_missing() or "")
def test_servers_sharing_a_store_admit_one_reserve_between_them(tmp_path: Path) -> None:
    """Two servers on one PostgreSQL store, two turns started on each at once against
    $1 with `per_task_usd = 1`: one turn in all is admitted (the reservation and the
    check are one step under the person's lock), the other three are refused on either
    server, and the day ends at $0.90."""
    with running_postgres() as postgres:
        servers: list[RunningServer] = []
        for name in ("a", "b"):
            (tmp_path / name).mkdir()
            servers.append(_serve(tmp_path / name, BUDGET + "per_task_usd = 1\n",
                                  tmp_path / name / "state", "--store", postgres.url))  # fmt: skip
        try:
            tokens = [issue_token(server, "ci", "caller") for server in servers]
            sends = [(s.url, t) for s, t in zip(servers, tokens, strict=True)] * 2
            replies = _at_once(sends, TURN)
            spent = _day_spent(postgres.url)
        finally:
            for server in servers:
                server.stop()
    done = [r["result"]["task"] for r in replies if "result" in r]
    refused = [r["error"]["message"] for r in replies if "error" in r]
    assert [t["status"]["state"] for t in done] == ["TASK_STATE_COMPLETED"], replies
    assert len(refused) == 3
    for said in refused:
        _check_refusal(said, "$1.00", "budgets.per_task_usd")
    assert spent == pytest.approx(0.9)


def _wait(ready: Any, timeout: float = 30) -> None:
    deadline = time.monotonic() + timeout
    while not ready():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)
