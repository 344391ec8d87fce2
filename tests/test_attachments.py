"""Attachments: embedded for agents that accept them, saved in the workspace's inbox
for the others, and refused when too large or given only as a URL not allowlisted."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from a2a.types.a2a_pb2 import Part
from a2a.utils.errors import A2AError

from tests.a2a_helpers import A2A, texts, user_message
from tests.conftest import start_server

FAKE = Path(__file__).with_name("fake_acp_agent.py")


def with_file(text: str, name: str, data: bytes, media_type: str = "text/plain"):  # type: ignore[no-untyped-def]
    message = user_message(text)
    message.parts.append(Part(raw=data, filename=name, media_type=media_type))
    return message


def answer(turn) -> str:  # type: ignore[no-untyped-def]
    return "".join(texts(a.artifact) for a in turn.artifacts("response"))


async def test_an_acp_agent_that_embeds_gets_the_file_as_a_resource(tmp_path: Path) -> None:
    server = start_server(tmp_path, "--agent-command", f"{sys.executable} {FAKE}")
    try:
        turn = await A2A(server.url, server.token).turn(with_file("look", "notes.txt", b"hi"))
        assert "resources: resource:attachment:///notes.txt" in answer(turn)
        assert not (tmp_path / "workspace" / ".tailagent").exists()
    finally:
        server.stop()


async def test_an_agent_that_does_not_embed_gets_a_workspace_file(tmp_path: Path) -> None:
    command = f"{sys.executable} {FAKE} --no-embedded-context"
    server = start_server(tmp_path, "--agent-command", command)
    try:
        data = bytes(range(256))
        turn = await A2A(server.url, server.token).turn(
            with_file("look", "../../etc/pass wd.bin", data, "application/octet-stream")
        )
        saved = tmp_path / "workspace" / ".tailagent" / "inbox" / turn.task_id / "pass_wd.bin"
        assert saved.read_bytes() == data  # the name sanitised, inside the workspace
        assert "resources:" not in answer(turn)
    finally:
        server.stop()


async def test_echo_saves_and_names_the_file(a2a: A2A) -> None:
    turn = await a2a.turn(with_file("see", "data.csv", b"a,b\n1,2\n", "text/csv"))
    assert "[attached file data.csv (text/csv, 8 bytes):" in answer(turn)


async def test_oversized_and_url_only_parts_are_refused(a2a: A2A) -> None:
    big = with_file("big", "big.bin", b"x" * (2 * 1024 * 1024 + 1))
    with pytest.raises(A2AError, match=r"attachments\.max_part_bytes"):
        await a2a.send(big)
    linked = user_message("linked")
    linked.parts.append(Part(url="http://127.0.0.1:1/secret", filename="s.txt"))
    with pytest.raises(A2AError, match=r"attachments\.url_hosts"):
        await a2a.send(linked)


async def test_an_allowlisted_host_is_still_never_a_private_address(tmp_path: Path) -> None:
    (tmp_path / "c.toml").write_text('[attachments]\nurl_hosts = ["localhost"]\n')
    server = start_server(tmp_path, "--config", str(tmp_path / "c.toml"))
    try:
        linked = user_message("linked")
        linked.parts.append(Part(url="http://localhost:1/secret", filename="s.txt"))
        turn = await A2A(server.url, server.token).turn(linked)
        assert turn.final_state == "failed"
        assert "loopback, private or link-local" in texts(turn.last_message)
    finally:
        server.stop()
