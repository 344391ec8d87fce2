"""/metrics: scraped and parsed after a few tasks; refused to callers without admin."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
from prometheus_client.parser import text_string_to_metric_families

from tailagent.output.metrics import MAX_CALLER_LABELS
from tests.a2a_helpers import A2A, user_message
from tests.conftest import RunningServer, start_server
from tests.tailnet import FakeTailscaled, send_message, whois
from tests.test_desk import CAP
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


def test_decisions_are_labelled_by_the_first_100_people_then_other(tmp_path: Path) -> None:
    """105 people of the tailnet each allow a step: /metrics names the first 100 of them
    (by login, as the cost labels do) and counts the other 5 as "other"."""
    fake = FakeTailscaled(tmp_path / "tailscaled")
    people = {f"100.64.1.{i}": f"p{i}@example.com" for i in range(1, MAX_CALLER_LABELS + 6)}
    for ip, login in people.items():
        fake.peers[ip] = whois(login, ip=ip, caps={CAP: [{"roles": ["caller", "approver"]}]})
    fake.start()
    config = tmp_path / "tailagent.toml"
    config.write_text(f'[access]\ncapability = "{CAP}"\n')
    server = start_server(tmp_path, "--config", str(config), "--tailscale-socket", str(fake.socket))
    try:

        def allow_one(ip: str) -> None:
            """As tailscale serve forwards a request from that person's device."""
            with httpx.Client(headers={"X-Forwarded-For": ip, "A2A-Version": "1.0"}) as http:
                asked = http.post(server.url, json=send_message(f"ask:{ip}"), timeout=30).json()
                task = asked["result"]["task"]
                assert task["status"]["state"] == "TASK_STATE_INPUT_REQUIRED", asked
                answer = send_message("yes")
                answer["params"]["message"].update(taskId=task["id"], messageId=f"a-{ip}")
                done = http.post(server.url, json=answer, timeout=30).json()
                assert done["result"]["task"]["status"]["state"] == "TASK_STATE_COMPLETED", done

        with ThreadPoolExecutor(8) as pool:
            list(pool.map(allow_one, people))
        scraped = httpx.get(
            server.url + "/metrics", headers={"Authorization": f"Bearer {server.token}"}
        )
        by = {
            dict(labels)["by"]: value
            for (name, labels), value in samples(scraped.text).items()
            if name == "tailagent_permission_decisions_total"
        }
        assert by.pop("other") == 5
        assert sorted(by.values()) == [1.0] * MAX_CALLER_LABELS
        assert set(by) < set(people.values())
    finally:
        server.stop()
        fake.stop()
