"""Costs are numbers and budgets hold: a figure that is no cost (an infinity, NaN, 5,000
digits) is refused where it enters and never reaches a page or a JSON line; a person's
turns started at once are held to their budget together; a restart charges a session's
turn what it grew by, not its whole running total again. A real server, the echo agent
(`cost:N`) or the fake ACP agent (`usage:C`, a usage_update with the session's running
total), and the real CLI reading what the server kept."""

from __future__ import annotations

import math
import subprocess
import sys
import threading
import uuid
from pathlib import Path
from typing import Any

import httpx
import pytest

from tailagent.access.tokens import TokenStore
from tests.tailnet import OWNER, FakeTailscaled
from tests.test_acp import start_acp
from tests.test_cost import (
    A2A,
    _rpc_send,
    issue_token,
    sqlite_store,
    tailnet,
    usage_rows,
    usage_today,
)
from tests.warm_start import cli_run

BUDGET_TEXT = "spent today (running turns included) reached the daily budget of $1.00"


def _metric(url: str, token: str, name: str) -> dict[str, float]:
    """The samples of one metric on /metrics, by their label text."""
    page = httpx.get(url + "/metrics", headers={"Authorization": f"Bearer {token}"}).text
    found: dict[str, float] = {}
    for line in page.splitlines():
        if line.startswith(name + "{"):
            labels, value = line.rsplit(" ", 1)
            found[labels[len(name) :]] = float(value)
    return found


def test_a_cost_that_is_no_number_is_refused_counted_and_never_stored(tmp_path: Path) -> None:
    """A caller's `cost:inf`, two costs that add up past a float and 5,000 digits: each
    turn completes, costs nothing, is counted on /metrics and logged once; the desk,
    `tasks` and `usage --json` stay readable and a real cost after them still counts."""
    with tailnet(tmp_path) as box:
        context = ""
        for text in ("cost:inf", "cost:1e308 cost:1e308", "cost:" + "9" * 5000, "cost:20000"):
            task = box.task("bob", text, context)
            context = task["contextId"]
            assert task["metadata"]["cost"]["usd"] == 0, text
        kept = box.task("bob", "cost:0.5", context)
        assert kept["metadata"]["conversationCost"]["usd"] == 0.5
        refused = _metric(box.server.url, box.server.token, "tailagent_costs_refused_total")
        desk = httpx.get(box.proxies["bob"].url + "/desk/", timeout=20)
        tasks = box.cli("tasks")
        rows = usage_rows(box)
        log = box.server.log()
    assert refused == {'{figure="turn cost"}': 4.0}
    assert desk.status_code == 200 and "$0.50" in desk.text
    assert tasks.returncode == 0, tasks.stderr
    assert rows["bob@example.com"]["usd"] == 0.5  # json.loads took every line
    assert log.count("not a finite number within the bounds") == 4  # once per turn
    assert "inf" in log and "9" * 41 not in log  # the figure shown, cut short


def test_an_acp_agents_usage_that_is_no_number_is_refused_and_the_session_still_counts(
    tmp_path: Path,
) -> None:
    """NaN, an infinity, a negative or a jump past $10,000 in an agent's usage_update is
    no running total: refused, and the session's next true total counts from the last
    true one."""
    server = start_acp(tmp_path)
    try:
        one = _rpc_send(server, "usage:0.5")
        two = _rpc_send(server, "usage:nan usage:inf usage:-1 usage:50000", one["contextId"])
        three = _rpc_send(server, "usage:0.75", one["contextId"])
        refused = _metric(server.url, server.token, "tailagent_costs_refused_total")
        usage = usage_today(sqlite_store(server))
    finally:
        server.stop()
    assert two["status"]["state"] == "TASK_STATE_COMPLETED"
    assert two["metadata"]["cost"]["usd"] == 0
    assert three["metadata"]["cost"]["usd"] == pytest.approx(0.25)
    assert three["metadata"]["conversationCost"]["usd"] == pytest.approx(0.75)
    assert refused == {'{figure="session\'s running cost"}': 4.0}
    (row,) = usage
    assert row.cost.usd == pytest.approx(0.75)


def test_a_stored_cost_that_is_no_number_breaks_no_page_and_no_json(tmp_path: Path) -> None:
    """Rows kept before costs were checked (an infinity, a negative) count as nothing:
    `usage --json` stays JSON, the person is not refused at "$inf"."""
    import sqlite3

    with tailnet(tmp_path, "[budgets]\nper_caller_daily_usd = 1\n") as box:
        first = box.task("bob", "cost:0.25")
        db = sqlite3.connect(box.server.state_dir / "tailagent.db")
        with db:
            db.execute(
                "INSERT INTO caller_usage VALUES ('user:bob@example.com', date('now'), 'x',"
                " 9e999, 9e999, 0, 1, '')"
            )
            db.execute(
                "INSERT INTO caller_usage VALUES ('user:bob@example.com', date('now'), 'y',"
                " -5, -3, 0, 1, '')"
            )
        db.close()
        again = box.task("bob", "cost:0.25", first["contextId"])
        rows = usage_rows(box)
        table = box.cli("usage")
    assert again["metadata"]["conversationCost"]["usd"] == 0.5
    assert rows["bob@example.com"]["usd"] == 0.5
    assert rows["bob@example.com"]["inputTokens"] == 2  # a word each
    assert "inf" not in table.stdout and "$0.50" in table.stdout


def _send_at_once(url: str, token: str, texts: list[str]) -> list[dict[str, Any]]:
    """SendMessage for each text, each in a new conversation, all started together."""
    replies: list[dict[str, Any]] = [{} for _ in texts]
    gate = threading.Barrier(len(texts))

    def send(i: int) -> None:
        message = {"messageId": uuid.uuid4().hex, "role": "ROLE_USER",
                   "parts": [{"text": texts[i]}]}  # fmt: skip
        body = {"jsonrpc": "2.0", "id": i, "method": "SendMessage",
                "params": {"message": message}}  # fmt: skip
        headers = {**A2A, "Authorization": f"Bearer {token}"}
        gate.wait()
        replies[i] = httpx.post(url + "/", json=body, headers=headers, timeout=90).json()

    threads = [threading.Thread(target=send, args=(i,)) for i in range(len(texts))]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    return replies


def test_turns_started_at_once_are_held_to_one_daily_budget(tmp_path: Path) -> None:
    """Four turns of one person started together against $1 a day, each admitted on a
    reserve of $0.25 (`budgets.reserve_usd`, not a cap) and reporting $0.30 more at each
    step: each is stopped at a report once spent plus running reaches $1, so the day
    ends within the budget plus one step per turn ($2.20), not at the $4.80 the four
    would cost; the next task is refused; nothing is counted twice."""
    config = "[budgets]\nper_caller_daily_usd = 1\nreserve_usd = 0.25\n"
    server = start_acp(tmp_path, config=config)
    steps = "usage:0.3 slow 2 usage:0.6 slow 2 usage:0.9 slow 2 usage:1.2"
    try:
        token = issue_token(server, "ci", "caller")
        replies = _send_at_once(server.url, token, [steps] * 4)
        fifth = httpx.post(server.url + "/", headers={**A2A, "Authorization": f"Bearer {token}"},
                           json={"jsonrpc": "2.0", "id": 5, "method": "SendMessage", "params": {
                               "message": {"messageId": "m5", "role": "ROLE_USER",
                                           "parts": [{"text": "more"}]}}}).json()  # fmt: skip
        usage = usage_today(sqlite_store(server))
    finally:
        server.stop()
    tasks = [reply["result"]["task"] for reply in replies]
    assert all(t["status"]["state"] == "TASK_STATE_FAILED" for t in tasks), tasks
    assert all(BUDGET_TEXT in t["status"]["message"]["parts"][0]["text"] for t in tasks), [
        t["status"]["message"]["parts"][0]["text"] for t in tasks
    ]
    (row,) = usage
    assert 1.0 <= row.cost.usd <= 1.0 + 4 * 0.3 + 1e-9
    assert row.cost.usd == pytest.approx(sum(t["metadata"]["cost"]["usd"] for t in tasks))
    assert fifth["error"]["message"].startswith("token:ci has spent $")


def test_a_restart_between_turns_charges_what_the_session_grew_by(tmp_path: Path) -> None:
    """An ACP session's running total was $0.50 when its turn was counted; after a
    restart its next turn reports $1.00: it is charged $0.50, not $1.00 again."""
    server = start_acp(tmp_path)
    try:
        one = _rpc_send(server, "usage:0.5")
    finally:
        assert server.stop() == 0
    server = start_acp(tmp_path, state_dir=server.state_dir)
    try:
        two = _rpc_send(server, "usage:1.0", one["contextId"])
        usage = usage_today(sqlite_store(server))
    finally:
        server.stop()
    assert two["metadata"]["agentSessionId"] == one["metadata"]["agentSessionId"]
    assert two["metadata"]["cost"]["usd"] == pytest.approx(0.5)
    (row,) = usage
    assert row.cost.usd == pytest.approx(1.0)


def test_a_turn_a_killed_server_left_is_charged_once(tmp_path: Path) -> None:
    """A turn had reported $0.30 more when its server was killed; after the restart the
    session's next turn is charged what the session grew by since the last counted
    total (that turn's share too), and what the killed turn reported while it ran no
    longer counts on its own: the person is not held to the $0.30 twice."""
    import signal
    import time

    budget = "[budgets]\nper_caller_daily_usd = 1.2\n"
    server = start_acp(tmp_path, config=budget)
    token = issue_token(server, "ci", "caller")
    try:
        one = _rpc_send(server, "usage:0.5", token=token)
        message = {"messageId": "m2", "role": "ROLE_USER", "contextId": one["contextId"],
                   "parts": [{"text": "usage:0.8 slow 60"}]}  # fmt: skip
        params = {"message": message, "configuration": {"returnImmediately": True}}
        body = {"jsonrpc": "2.0", "id": 2, "method": "SendMessage", "params": params}
        headers = {**A2A, "Authorization": f"Bearer {token}"}
        httpx.post(server.url + "/", json=body, headers=headers, timeout=20).raise_for_status()
        db = server.state_dir / "tailagent.db"
        deadline = time.monotonic() + 30
        # The session map is written within 50 ms of a session's start; a kill before
        # that leaves the next run a new session, a different case from this one.
        while (_running_rows(db) == [] or not _session_kept(db)) and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _running_rows(db) == [pytest.approx(0.3)]
    finally:
        server.stop(signal.SIGKILL)
    server = start_acp(tmp_path, config=budget, state_dir=server.state_dir)
    try:
        three = _rpc_send(server, "usage:1.0", one["contextId"], token=token)
        four = _rpc_send(server, "hello", one["contextId"], token=token)
    finally:
        server.stop()
    assert three["metadata"]["cost"]["usd"] == pytest.approx(0.5)  # 1.0 - 0.5
    assert _running_rows(server.state_dir / "tailagent.db") == []
    assert four["status"]["state"] == "TASK_STATE_COMPLETED"  # $1.00 spent, not $1.30


def _session_kept(db: Path) -> bool:
    import sqlite3

    connection = sqlite3.connect(db)
    try:
        return connection.execute("SELECT count(*) FROM agent_sessions").fetchone()[0] > 0
    finally:
        connection.close()


def _running_rows(db: Path) -> list[float]:
    import sqlite3

    connection = sqlite3.connect(db)
    try:
        return [row[0] for row in connection.execute("SELECT usd FROM turn_running")]
    except sqlite3.OperationalError:  # not made yet
        return []
    finally:
        connection.close()


def _budget(state_dir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return cli_run(
        [sys.executable, "-m", "tailagent", "budget", *args, "--state-dir", str(state_dir)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip


def test_budget_set_for_an_admin_says_it_holds_them_to_nothing(tmp_path: Path) -> None:
    """An admin is held to no budget: `budget set` keeps the amount but says so, for an
    admin token, a login the settings make admin and the owner of the node (tailscaled's
    word); for a plain caller it says when it holds."""
    fake = FakeTailscaled(tmp_path / "tailscaled").start()
    try:
        config = tmp_path / "tailagent.toml"
        config.write_text(
            f'[tailscale]\nsocket = "{fake.socket}"\n'
            '[access]\nallowed_logins = ["ann@example.com"]\nlogin_roles = ["admin"]\n'
        )
        # `budget` reads the store and the tokens itself: no server needs to run.
        state_dir = tmp_path / "state"
        state_dir.mkdir()
        TokenStore(state_dir).add("boss", ("admin",))
        TokenStore(state_dir).add("ci", ("caller",))
        said = {
            who: _budget(state_dir, "set", who, "1", "--config", str(config))
            for who in ("token:boss", "ann@example.com", OWNER, "token:ci")
        }
        listed = _budget(state_dir, "list", "--config", str(config))
    finally:
        fake.stop()
    for who, why in (("token:boss", "its token's roles"),
                     ("ann@example.com", "access.allowed_logins with access.login_roles"),
                     (OWNER, "the owner of this node")):  # fmt: skip
        assert said[who].returncode == 0, said[who].stderr
        assert f"is an admin here ({why}) and admins are held to no budget" in said[who].stdout
    assert "from their next task (days reset" in said["token:ci"].stdout
    assert "admin" not in said["token:ci"].stdout
    assert listed.stdout.count("$1.00 a day (their own)") == 4


def test_a_figure_is_a_cost_only_when_finite_and_within_bounds() -> None:
    """The bounds themselves, as every entry point applies them."""
    from tailagent.cost.figures import MAX_TURN_USD, shown_usd, token_figure, usd_figure

    assert usd_figure(0.25) == 0.25 and usd_figure(0) == 0 and usd_figure(MAX_TURN_USD)
    for bad in (math.inf, -math.inf, math.nan, -0.01, MAX_TURN_USD * 2, 10**5000, True, "1"):
        assert usd_figure(bad) is None, bad
    assert token_figure(12) == 12 and token_figure(12.0) == 12
    for bad in (math.inf, math.nan, 1.5, -1, 10**12, False, "3"):
        assert token_figure(bad) is None, bad
    assert shown_usd({"usd": "abc"}) == 0 and shown_usd(None) == 0 and shown_usd({"usd": 2}) == 2
