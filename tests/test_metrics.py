"""/metrics: scraped and parsed after a few tasks; refused to callers without admin."""

from __future__ import annotations

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tests.a2a_helpers import A2A, user_message
from tests.conftest import RunningServer
from tests.test_tokens_and_owners import add_token


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


async def test_metrics_after_a_few_tasks(server: RunningServer) -> None:
    admin = A2A(server.url, server.token)
    await admin.turn("hello")
    asked = await admin.turn("ask:metrics")
    await admin.turn(user_message("yes", task_id=asked.task_id))
    await admin.turn("boom")
    async with admin.http() as http:
        await http.post(server.url, content="{}", headers={"Content-Type": "text/plain"})
        response = await http.get(server.url + "/metrics")
    assert response.status_code == 200
    found = samples(response.text)
    assert found[("tailagent_task_states_total", (("state", "completed"),))] >= 2
    assert found[("tailagent_task_states_total", (("state", "failed"),))] >= 1
    assert found[("tailagent_permission_prompts_total", (("kind", "permission"),))] >= 1
    decision = (
        "tailagent_permission_decisions_total",
        (("by", "token:local"), ("decision", "allow")),
    )
    assert found[decision] >= 1
    assert found[("tailagent_turn_seconds_count", ())] >= 3
    assert found[("tailagent_agent_sessions", ())] >= 1
    assert found[("tailagent_requests_total", (("route", "jsonrpc"), ("status", "200")))] >= 4
    assert found[("tailagent_refusals_total", (("reason", "content_type_not_supported"),))] >= 1


def test_metrics_are_refused_without_the_admin_role(server: RunningServer) -> None:
    token = add_token(server, "metrics-reader", "caller", "approver")
    response = httpx.get(server.url + "/metrics", headers={"Authorization": f"Bearer {token}"})
    assert response.status_code == 403
    # No token and no tailscaled on this box: a local caller, who needs a token.
    anonymous = httpx.get(server.url + "/metrics")
    assert anonymous.status_code == 401 and anonymous.headers["WWW-Authenticate"] == "Bearer"
