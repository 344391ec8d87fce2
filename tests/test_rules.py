"""Tool-use rules: allowed, denied and asked before any caller is, with audit rows."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from a2a.types.a2a_pb2 import GetExtendedAgentCardRequest
from google.protobuf.json_format import MessageToDict

from tailagent.config.tool_rules import parse_rules
from tests.a2a_helpers import A2A, kind_of, texts, user_message
from tests.conftest import RunningServer, start_server
from tests.test_tokens_and_owners import add_token
from tests.warm_start import cli_run

RULES = """
[[rules]]
tool = "Bash"
command = "rm -rf build"
decision = "allow"

[[rules]]
tool = "Bash"
command = "rm -rf secret*"
decision = "deny"

[[rules]]
tool = "Bash"
command = "rm -rf admin-only"
decision = "allow"
roles = ["admin"]

[[rules]]
tool = "*"
decision = "ask"
"""


@pytest.fixture(scope="module")
def ruled(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("rules")
    (tmp / "c.toml").write_text(RULES)
    server = start_server(tmp, "--config", str(tmp / "c.toml"))
    yield server
    server.stop()


def audit(server: RunningServer, task_id: str) -> list[dict[str, str]]:
    result = cli_run(
        [sys.executable, "-m", "tailagent", "audit", "--json",
         "--state-dir", str(server.state_dir)],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    return [r for r in map(json.loads, result.stdout.splitlines()) if r["task_id"] == task_id]


def notices(turn) -> list[str]:  # type: ignore[no-untyped-def]
    return [texts(s.status.message) for s in turn.statuses if kind_of(s) == "notice"]


async def test_an_allow_rule_answers_for_the_caller(ruled: RunningServer) -> None:
    turn = await A2A(ruled.url, ruled.token).turn("ask")
    assert turn.final_state == "completed"  # never paused
    assert "Allowed by rule 1: allow Bash command 'rm -rf build'" in notices(turn)[0]
    (row,) = audit(ruled, turn.task_id)
    assert row["decision"] == "allow" and row["answered_by"].startswith("tailagent (rule 1")


async def test_a_deny_rule_refuses_and_loop_protection_still_holds(ruled: RunningServer) -> None:
    turn = await A2A(ruled.url, ruled.token).turn("ask:secrets")
    assert turn.final_state == "completed"
    assert any("Denied by rule 2" in n for n in notices(turn))
    again = await A2A(ruled.url, ruled.token).turn("ask:secrets ask:secrets")
    assert again.final_state == "failed"
    assert "same denied permission again" in texts(again.last_message)


async def test_a_rule_limited_to_a_role_and_the_ask_rule(ruled: RunningServer) -> None:
    admin = await A2A(ruled.url, ruled.token).turn("ask:admin-only")
    assert admin.final_state == "completed"
    caller = A2A(ruled.url, add_token(ruled, "rules-caller", "caller", "approver"))
    asked = await caller.turn("ask:admin-only")
    assert asked.final_state == "input_required"  # rule 3 is not for it; rule 4 asks
    done = await caller.turn(user_message("yes", task_id=asked.task_id))
    assert done.final_state == "completed"
    (row,) = audit(ruled, asked.task_id)
    assert row["answered_by"].startswith("token:rules-caller")


def test_bad_rules_are_refused_with_the_rule_named(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="rule 2: `decision` must be allow, deny or ask"):
        parse_rules([{"tool": "Bash", "decision": "allow"}, {"tool": "Edit", "decision": "maybe"}])
    (tmp_path / "c.toml").write_text('[[rules]]\ntool = "Bash"\ndecision = "allow"\ncolour = 1\n')
    result = cli_run(
        [sys.executable, "-m", "tailagent", "serve", "--config", str(tmp_path / "c.toml")],
        capture_output=True, text=True, timeout=30,
    )  # fmt: skip
    assert result.returncode == 2
    assert "rules: rule 1: unknown key 'colour'" in result.stderr


# --- the extended card says which rules apply to the asking caller ------------------------------

EXTENSION = "urn:tailagent:caller:v1"


async def extended(a2a: A2A) -> dict[str, Any]:
    async with a2a.client() as client:
        card = await client.get_extended_agent_card(GetExtendedAgentCardRequest())
    extensions = MessageToDict(card)["capabilities"]["extensions"]
    params: dict[str, Any] = next(e for e in extensions if e["uri"] == EXTENSION)["params"]
    return params


async def test_the_extended_card_says_who_you_are_and_what_applies(ruled: RunningServer) -> None:
    admin = A2A(ruled.url, ruled.token)
    async with admin.http() as http:
        public = await http.get(ruled.url + "/.well-known/agent-card.json",
                                headers={"A2A-Version": "1.0"})  # fmt: skip
    assert public.json()["capabilities"]["extendedAgentCard"] is True
    mine = await extended(admin)
    assert mine["caller"] == "token:local"
    assert mine["roles"] == ["admin", "approver", "caller"]
    assert len(mine["rules"]) == 4
    caller = await extended(A2A(ruled.url, add_token(ruled, "ext-caller", "caller")))
    assert caller["caller"] == "token:ext-caller" and caller["roles"] == ["caller"]
    assert len(caller["rules"]) == 3  # the admin-only rule does not apply to it
    assert not any("for admin" in rule for rule in caller["rules"])
