"""Tokens from the CLI, tasks scoped to their owner, approver enforcement, the audit log."""

from __future__ import annotations

import json
import stat
import subprocess
import sys
from pathlib import Path
from unittest.mock import ANY

import pytest
from a2a.types.a2a_pb2 import SubscribeToTaskRequest
from a2a.utils.errors import A2AError

from tailagent.access.tokens import TokenInfo, TokenStore
from tests.a2a_helpers import A2A, state_name, user_message
from tests.conftest import RunningServer
from tests.warm_start import cli_run


def tailagent(*args: str) -> subprocess.CompletedProcess[str]:
    return cli_run(
        [sys.executable, "-m", "tailagent", *args], capture_output=True, text=True, timeout=30
    )


def add_token(server: RunningServer, name: str, *roles: str) -> str:
    role_args = [arg for role in roles for arg in ("--role", role)]
    result = tailagent("token", "add", name, *role_args, "--state-dir", str(server.state_dir))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1 and lines[0].startswith("ta_")
    return lines[0]


def test_token_add_list_revoke(server: RunningServer) -> None:
    token = add_token(server, "ci-bot", "caller")
    tokens_file = server.state_dir / "tokens.json"
    assert stat.S_IMODE(tokens_file.stat().st_mode) == 0o600
    assert token not in tokens_file.read_text()
    listed = tailagent("token", "list", "--state-dir", str(server.state_dir))
    assert "ci-bot" in listed.stdout and "caller" in listed.stdout and token not in listed.stdout
    again = tailagent("token", "add", "ci-bot", "--state-dir", str(server.state_dir))
    assert again.returncode == 1 and "exists" in again.stderr

    import httpx

    body = {"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}}
    headers = {"A2A-Version": "1.0", "Authorization": f"Bearer {token}"}
    assert httpx.post(server.url, json=body, headers=headers).status_code == 200
    revoked = tailagent("token", "revoke", "ci-bot", "--state-dir", str(server.state_dir))
    assert revoked.returncode == 0
    refused = httpx.post(server.url, json=body, headers=headers)
    assert refused.status_code == 401
    assert refused.headers["www-authenticate"] == "Bearer"


def test_a_token_remembered_by_the_server_is_refused_once_revoked(tmp_path: Path) -> None:
    """The server remembers the tokens that verified; the CLI's revoke, right after,
    changes the file, and the next request's token is checked against it again."""
    serving, cli = TokenStore(tmp_path), TokenStore(tmp_path)
    for _ in range(20):
        token = cli.add("ci-bot", ("caller",))
        assert serving.verify(token) == TokenInfo("ci-bot", ("caller",), ANY)
        assert serving.verify(token) is not None  # remembered
        cli.revoke("ci-bot")
        assert serving.verify(token) is None
        assert serving.verify("ta_" + token[3:][::-1]) is None  # never a wrong one


async def test_tasks_belong_to_the_caller_that_created_them(server: RunningServer) -> None:
    alice = A2A(server.url, add_token(server, "alice", "caller", "approver"))
    bob = A2A(server.url, add_token(server, "bob", "caller", "approver"))
    admin = A2A(server.url, server.token)
    asked = await alice.turn("ask")
    for attempt in (
        bob.get(asked.task_id),
        bob.cancel(asked.task_id),
        bob.send(user_message("yes", task_id=asked.task_id)),
    ):
        with pytest.raises(A2AError, match="not found"):
            await attempt
    with pytest.raises(A2AError, match="not found"):
        async with bob.client() as client:
            async for _ in client.subscribe(SubscribeToTaskRequest(id=asked.task_id)):
                pass
    assert asked.task_id not in {t.id for t in await bob.list()}
    assert asked.task_id in {t.id for t in await alice.list()}
    # The admin (the box's own local token) may act on any task.
    assert state_name((await admin.get(asked.task_id)).status.state) == "input_required"
    assert state_name((await alice.cancel(asked.task_id)).status.state) == "canceled"


async def test_only_approvers_answer_permission_prompts(server: RunningServer) -> None:
    ci = A2A(server.url, add_token(server, "ci", "caller"))
    admin = A2A(server.url, server.token)
    asked = await ci.turn("ask:deploy")
    with pytest.raises(A2AError, match="lacks the approver role"):
        await ci.send(user_message("yes", task_id=asked.task_id))
    assert state_name((await ci.get(asked.task_id)).status.state) == "input_required"
    done = await admin.turn(user_message("yes", task_id=asked.task_id))
    assert done.final_state == "completed"
    assert state_name((await ci.get(asked.task_id)).status.state) == "completed"

    # A question is not a permission: any caller answers its own.
    question = await ci.turn("question")
    answered = await ci.turn(user_message("red", task_id=question.task_id))
    assert answered.final_state == "completed"

    audit = tailagent("audit", "--json", "--state-dir", str(server.state_dir))
    rows = [json.loads(line) for line in audit.stdout.splitlines()]
    mine = [r for r in rows if r["task_id"] == asked.task_id]
    assert len(mine) == 1
    assert mine[0]["decision"] == "allow"
    assert mine[0]["tool"] == "Bash" and mine[0]["input"] == "rm -rf deploy"
    assert mine[0]["answered_by"].startswith("token:local")


async def test_audit_records_denials_and_loop_protection(server: RunningServer) -> None:
    admin = A2A(server.url, server.token)
    asked = await admin.turn("ask:cache ask:cache")
    await admin.turn(user_message("no, keep the cache", task_id=asked.task_id))
    result = tailagent("audit", "--json", "--since", "1h", "--state-dir", str(server.state_dir))
    rows = [json.loads(line) for line in result.stdout.splitlines()]
    mine = [r for r in rows if r["task_id"] == asked.task_id]
    assert [r["decision"] for r in mine] == ["deny", "deny"]
    assert mine[0]["reason"] == "no, keep the cache"
    assert mine[1]["answered_by"] == "tailagent (loop protection)"
    table = tailagent("audit", "--state-dir", str(server.state_dir))
    assert "rm -rf cache" in table.stdout
