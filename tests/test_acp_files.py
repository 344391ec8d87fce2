"""An agent's file access (ACP `fs/read_text_file`, `fs/write_text_file`) through a
real server: it cannot freeze the server, blow its memory, or reach outside the
workspace by a FIFO, a sparse file, a symlink swapped mid-read or a hard link. Each
attack is made by tests/fake_acp_agent.py itself, as an agent would make it."""

from __future__ import annotations

import asyncio
import os
import re
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tailagent.config import AgentSettings
from tests.a2a_helpers import A2A
from tests.conftest import RunningServer
from tests.processes import status_kib
from tests.test_acp import answer_text, start_acp, workspace

CAP = AgentSettings().max_file_bytes  # the default, as a server gets it


@pytest.fixture(scope="module")
def files_server(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    server = start_acp(tmp_path_factory.mktemp("files"))
    yield server
    assert server.stop() == 0


@pytest.fixture
def agent(files_server: RunningServer) -> A2A:
    return A2A(files_server.url, files_server.token)


@pytest.fixture
def root(files_server: RunningServer) -> Path:
    return workspace(files_server).resolve()


def peak_memory(server: RunningServer) -> int:
    """The server's peak resident memory so far (VmHWM), in bytes."""
    kib = status_kib(server.process.pid, "VmHWM")
    assert kib is not None, "the server is gone"
    return kib * 1024


async def test_a_fifo_is_refused_at_once_and_the_server_keeps_answering(
    agent: A2A, files_server: RunningServer, root: Path
) -> None:
    (root / "pipe").unlink(missing_ok=True)
    turn = asyncio.ensure_future(agent.turn("fifo:pipe read:pipe write:pipe"))
    async with httpx.AsyncClient() as http:
        slowest = 0.0
        while not turn.done():
            started = time.monotonic()
            assert (await http.get(files_server.url + "/healthz", timeout=5)).status_code == 200
            slowest = max(slowest, time.monotonic() - started)
            await asyncio.sleep(0.05)
    answer = answer_text(await asyncio.wait_for(turn, timeout=30))
    assert "made fifo pipe" in answer
    assert "read refused" in answer and "pipe is a FIFO" in answer
    assert "write refused" in answer and "not a regular file" in answer
    assert slowest < 1.0
    # Nobody ever wrote to the FIFO: a read that waited on it would wait still.
    assert (root / "pipe").is_fifo()


async def test_a_huge_sparse_file_is_refused_without_being_read_into_memory(
    agent: A2A, files_server: RunningServer, root: Path
) -> None:
    size = 400 * 1024 * 1024
    (root / "sparse.bin").unlink(missing_ok=True)
    before = peak_memory(files_server)
    answer = answer_text(
        await agent.turn(f"sparse:sparse.bin:{size} read:sparse.bin read:sparse.bin:1:1")
    )
    assert (root / "sparse.bin").stat().st_size == size
    assert f"the file's {size} bytes are more than agent.max_file_bytes ({CAP} bytes)" in answer
    # One line of 400 MiB of zeros: the range is read only up to the cap, then refused.
    assert "the lines asked for come to more than agent.max_file_bytes" in answer
    assert answer.count("read refused") == 2
    grown = peak_memory(files_server) - before
    assert grown < 64 * 1024 * 1024, f"the server's peak memory grew by {grown} bytes"


async def test_line_and_limit_read_part_of_a_file_larger_than_the_cap(
    agent: A2A, root: Path
) -> None:
    count = CAP // 13 + 1000  # "line 0000001\n" is 13 bytes: past the cap
    (root / "numbered.txt").write_text("".join(f"line {i:07d}\n" for i in range(1, count + 1)))
    (root / "short.txt").write_text("one\ntwo\nthree\nfour")
    middle = count // 2
    answer = answer_text(
        await agent.turn(
            f"read:numbered.txt read:numbered.txt:{middle}:3 read:short.txt:2:2 "
            "read:short.txt:3 read:short.txt:9:1"
        )
    )
    assert "read refused" in answer and "more than agent.max_file_bytes" in answer
    assert f"read: line {middle:07d}\nline {middle + 1:07d}\nline {middle + 2:07d}\n\n" in answer
    assert "read: two\nthree\n\n" in answer
    assert "read: three\nfour\n" in answer
    assert "read: \n" in answer  # past the end: nothing


async def test_a_write_past_the_cap_is_refused_and_writes_nothing(agent: A2A, root: Path) -> None:
    answer = answer_text(await agent.turn(f"write:big.txt:{CAP + 1} write:fits.txt:{CAP}"))
    assert "write refused" in answer and f"{CAP + 1} bytes to write" in answer
    assert not (root / "big.txt").exists()
    assert (root / "fits.txt").stat().st_size == CAP


async def test_a_directory_swapped_for_a_symlink_mid_read_never_reads_outside(
    agent: A2A, root: Path, tmp_path: Path
) -> None:
    outside = tmp_path / "outside"
    outside.mkdir()
    (outside / "f").write_text("outside secret\n")
    answer = answer_text(await agent.turn(f"race:swapped:{outside} 3000"))
    counts = dict(re.findall(r"(\w+)=(\d+)", answer.split("race: ", 1)[1]))
    assert counts["outside"] == "0", answer
    # Both sides of the swap were met: reads inside, and the symlink refused.
    assert int(counts["inside"]) > 0 and int(counts["refused"]) > 0, answer


async def test_a_hard_link_to_a_file_outside_is_neither_read_nor_written(
    agent: A2A, root: Path, tmp_path: Path
) -> None:
    precious = tmp_path / "precious.txt"
    precious.write_text("the owner's file\n")
    (root / "linked.txt").unlink(missing_ok=True)
    fenced = await agent.turn(f"hardlink:linked.txt:{precious}")
    assert "linked linked.txt" not in answer_text(fenced)  # the file is not even in its view
    # As an agent without a fence could: the server's own file access must still refuse.
    os.link(precious, root / "linked.txt")
    answer = answer_text(await agent.turn("read:linked.txt write:linked.txt"))
    assert "read refused" in answer and "has 2 hard links" in answer
    assert "write refused" in answer
    assert "the owner's file" not in answer
    assert precious.read_text() == "the owner's file\n"


async def test_symlinks_that_stay_inside_the_workspace_still_work(agent: A2A, root: Path) -> None:
    (root / "real").mkdir(exist_ok=True)
    (root / "real" / "f.txt").write_text("through a link\n")
    for name, target in (("relative", "real"), ("absolute", str(root / "real"))):
        (root / name).unlink(missing_ok=True)
        (root / name).symlink_to(target)
    (root / "real" / "up").unlink(missing_ok=True)
    (root / "real" / "up").symlink_to("../real/f.txt")
    answer = answer_text(
        await agent.turn(
            "read:relative/f.txt read:absolute/f.txt read:real/up write:relative/new.txt"
        )
    )
    assert answer.count("read: through a link") == 3, answer
    assert (root / "real" / "new.txt").read_text() == "written by fake\n"
