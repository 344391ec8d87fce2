"""The desk's doors: the sign-in link on the box, the cookie's reach, and the page's rules.

A real server with no tailscaled (so every request is a local one), the real
`tailagent web` command, a real Chromium for the sign-in itself, and raw HTTP for
the rules a browser would never break on its own (a form body on a JSON endpoint, a
cookie sent to the A2A routes).
"""

from __future__ import annotations

import re
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from playwright.sync_api import Browser, expect

from tests.conftest import RunningServer, start_server
from tests.warm_start import cli_run

RPC_SEND = {
    "jsonrpc": "2.0",
    "id": 1,
    "method": "SendMessage",
    "params": {"message": {"messageId": "m1", "role": "ROLE_USER", "parts": [{"text": "hi"}]}},
}


@pytest.fixture(scope="module")
def local(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    tmp = tmp_path_factory.mktemp("desk-local")
    server = start_server(tmp, "--tailscale-socket", str(tmp / "no-tailscaled.sock"))
    yield server
    server.stop()


def web(server: RunningServer, *extra: str) -> subprocess.CompletedProcess[str]:
    return cli_run(
        [sys.executable, "-m", "tailagent", "web", "--state-dir", str(server.state_dir), *extra],
        capture_output=True,
        text=True,
        timeout=30,
    )


def signin_link(server: RunningServer) -> str:
    done = web(server)
    assert done.returncode == 0, done.stderr
    found = re.search(r"http://\S+/desk/signin\?ticket=\S+", done.stdout)
    assert found is not None, done.stdout
    return found.group(0)


def owner_link(server: RunningServer) -> str:
    """A sign-in link asked for as `tailagent web` asks (the local token, on a loopback
    connection of this user), for the tests whose subject is the session and not the
    command: it spares them a CLI run (~0.55 s of CPU)."""
    reply = httpx.post(
        f"{server.url}/desk/signin-link",
        json={},
        headers={"Authorization": f"Bearer {server.token}"},
        timeout=10,
    )
    assert reply.status_code == 200, reply.text
    return server.url + str(reply.json()["path"])


@contextmanager
def signed_in(server: RunningServer) -> Iterator[httpx.Client]:
    """An HTTP client holding a session cookie, as a browser would after the link."""
    with httpx.Client(base_url=server.url, timeout=10) as client:
        assert client.get(owner_link(server)).status_code == 303
        yield client


def test_the_link_signs_in_once_and_the_cookie_is_strict(
    local: RunningServer, browser: Browser
) -> None:
    link = signin_link(local)
    context = browser.new_context()
    page = context.new_page()
    page.goto(link)
    assert page.url == f"{local.url}/desk/"
    assert "ticket" not in page.url  # the credential leaves the address bar
    expect(page.locator(".viewer")).to_have_text("this box's owner")
    (cookie,) = context.cookies()
    assert cookie["httpOnly"] is True
    assert cookie["sameSite"] == "Strict"
    assert cookie["path"] == "/desk"
    again = browser.new_context().new_page()
    again.goto(link)
    expect(again.locator(".refusal")).to_contain_text("used already or is too old")
    context.close()


def test_without_the_link_the_page_says_how_to_sign_in(local: RunningServer) -> None:
    refused = httpx.get(f"{local.url}/desk/")
    assert refused.status_code == 401
    assert refused.headers["content-type"].startswith("text/html")
    assert "tailagent web" in refused.text


def test_the_cookie_never_counts_on_the_a2a_routes(local: RunningServer) -> None:
    with signed_in(local) as client:
        cookie = "; ".join(f"{k}={v}" for k, v in client.cookies.items())
        assert client.get("/desk/").status_code == 200
    reply = httpx.post(
        f"{local.url}/",
        json=RPC_SEND,
        headers={"A2A-Version": "1.0", "Cookie": cookie},
    )
    assert reply.status_code == 401
    rest = httpx.get(f"{local.url}/tasks", headers={"A2A-Version": "1.0", "Cookie": cookie})
    assert rest.status_code == 401


def test_every_page_carries_a_strict_policy(local: RunningServer) -> None:
    with signed_in(local) as client:
        for path in ("/desk/", "/desk/static/desk.js", "/desk/tasks/no-such-task"):
            headers = client.get(path).headers
            policy = headers["content-security-policy"]
            assert "default-src 'self'" in policy and "frame-ancestors 'none'" in policy
            assert "unsafe-inline" not in policy and "unsafe-eval" not in policy
            assert headers["x-content-type-options"] == "nosniff"
            assert headers["referrer-policy"] == "same-origin"


def test_posts_from_another_site_or_without_a_token_are_refused(local: RunningServer) -> None:
    with signed_in(local) as client:
        page = client.get("/desk/").text
        token = re.search(r'name="token" value="([^"]+)"', page)
        assert token is not None
        form = {"token": token.group(1), "text": "from elsewhere"}
        for headers in (
            {"Sec-Fetch-Site": "cross-site", "Origin": local.url},
            {"Sec-Fetch-Site": "same-site", "Origin": local.url},
            {"Origin": "http://evil.example.com"},
            {},  # a browser always sends Origin on a POST
        ):
            refused = client.post("/desk/tasks", data=form, headers=headers)
            assert refused.status_code == 403, headers
        no_token = client.post("/desk/tasks", data={"text": "x"}, headers={"Origin": local.url})
        assert no_token.status_code == 403
        assert "token is not valid" in no_token.text
        # The same form from the page's own origin goes through.
        sent = client.post(
            "/desk/tasks", data=form, headers={"Sec-Fetch-Site": "same-origin", "Origin": local.url}
        )
        assert sent.status_code == 303
    tasks = httpx.post(
        f"{local.url}/",
        json={"jsonrpc": "2.0", "id": 1, "method": "ListTasks", "params": {}},
        headers={"A2A-Version": "1.0", "Authorization": f"Bearer {local.token}"},
        timeout=30,  # httpx's 5 s was too short for a loaded box
    ).json()["result"]["tasks"]
    prompts = [t["history"][0]["parts"][0]["text"] for t in tasks]
    assert prompts.count("from elsewhere") == 1  # only the same-origin one


def test_the_json_endpoint_refuses_a_form_body(local: RunningServer) -> None:
    bearer = {"Authorization": f"Bearer {local.token}"}
    refused = httpx.post(f"{local.url}/desk/signin-link", data={"a": "b"}, headers=bearer)
    assert refused.status_code == 415


def test_funnel_requests_are_refused_on_the_page_too(local: RunningServer) -> None:
    with signed_in(local) as client:
        refused = client.get("/desk/", headers={"Tailscale-Funnel-Request": "?1"})
    assert refused.status_code == 403


def test_revoking_the_local_token_ends_the_sessions(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--tailscale-socket", str(tmp_path / "none.sock"))
    try:
        with signed_in(server) as client:
            assert client.get("/desk/").status_code == 200
            cli_run(
                [sys.executable, "-m", "tailagent", "token", "revoke", "local",
                 "--state-dir", str(server.state_dir)],
                check=True, capture_output=True,
            )  # fmt: skip
            assert client.get("/desk/").status_code == 401
    finally:
        server.stop()


def test_tailagent_web_explains_where_it_cannot_help(tmp_path: Path) -> None:
    server = start_server(tmp_path, listen=f"unix:{tmp_path / 'agent.sock'}")
    try:
        done = web(server)
    finally:
        server.stop()
    assert done.returncode == 2
    assert "a browser cannot open" in done.stderr
    remote = cli_run(
        [sys.executable, "-m", "tailagent", "web", "--url", "https://agentbox.example.ts.net"],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert remote.returncode == 0
    assert "no sign-in needed" in remote.stdout
