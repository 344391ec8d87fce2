"""A caller who is not admin chooses only modes that keep asking, through a real server:
each agent's own list, an unknown agent's modes refused until the operator lists
some, and admins free to choose any mode."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from a2a.utils.errors import A2AError

from tailagent.access.tokens import TokenStore
from tests.a2a_helpers import A2A, user_message
from tests.conftest import RunningServer, start_server
from tests.test_acp import agent_command, answer_text


def callers(server: RunningServer) -> tuple[A2A, A2A]:
    """The admin (the local token) and a caller who may answer prompts but is not admin.
    The caller's token is added as `tailagent token add` adds it, without a CLI run (it is
    only the way in), under a name of its own, so servers shared by tests may get more."""
    name = f"mode-picker-{uuid.uuid4().hex[:6]}"
    token = TokenStore(server.state_dir).add(name, ("caller", "approver"))
    return A2A(server.url, server.token), A2A(server.url, token)


@pytest.fixture(scope="module")
def codex(tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningServer]:
    """The codex preset, run on the fake agent: shared by the tests that neither restart it
    nor configure it, each in conversations of its own."""
    server = start_server(
        tmp_path_factory.mktemp("codex"), "--agent", "codex", "--agent-command", agent_command()
    )
    yield server
    assert server.stop() == 0


async def refused(a2a: A2A, mode: str, reason: str) -> None:
    with pytest.raises(A2AError, match=reason):
        await a2a.send(user_message("setup", metadata={"mode": mode}))


async def mode_reached(a2a: A2A, mode: str) -> bool:
    """Whether a turn asked for in `mode` ran in it (the fake ACP agent's `setup` says)."""
    turn = await a2a.turn(user_message("setup", metadata={"mode": mode}))
    return f"mode: {mode};" in answer_text(turn)


async def test_echo_takes_claude_codes_modes_that_keep_asking(server: RunningServer) -> None:
    admin, caller = callers(server)  # the session's echo server, as it comes
    others = r"others may choose default, acceptEdits, plan"
    for mode in ("auto", "bypassPermissions", "dontAsk", "Default"):
        await refused(caller, mode, rf"mode '{mode}' is not one .* {others}")
    for mode in ("default", "acceptEdits", "plan"):
        turn = await caller.turn(user_message("hello", metadata={"mode": mode}))
        assert turn.final_state == "completed"
    turn = await admin.turn(user_message("hello", metadata={"mode": "auto"}))
    assert turn.final_state == "completed"


async def test_a_known_acp_agent_has_its_own_list(codex: RunningServer) -> None:
    # The codex preset, run on the fake agent: Codex's names for its modes.
    admin, caller = callers(codex)
    await refused(caller, "agent-full-access", "only admins may choose it; others may choose "
                  "read-only, workspace-write")  # fmt: skip
    assert await mode_reached(caller, "workspace-write")
    assert await mode_reached(caller, "read-only")
    # codex-acp's default, `agent`, lets an automatic reviewer approve: not a caller's.
    await refused(caller, "agent", "others may choose read-only, workspace-write")
    assert await mode_reached(admin, "agent-full-access")


async def test_an_unknown_agents_modes_are_refused_until_the_operator_lists_some(
    tmp_path: Path,
) -> None:
    server = start_server(tmp_path / "plain", "--agent-command", agent_command())
    admin, caller = callers(server)
    try:
        for mode in ("plan", "default", "bypassPermissions"):
            await refused(caller, mode, "no mode of this agent is known to keep asking")
        assert await mode_reached(admin, "plan")
    finally:
        server.stop()
    config = tmp_path / "listed.toml"
    config.write_text('[agent]\ncaller_modes = ["plan"]\n')
    server = start_server(
        tmp_path / "listed", "--agent-command", agent_command(), "--config", str(config)
    )
    _, caller = callers(server)
    try:
        assert await mode_reached(caller, "plan")
        await refused(caller, "default", "others may choose plan")
    finally:
        server.stop()


async def test_a_mode_an_admin_chose_does_not_outlast_the_admins_turn(
    codex: RunningServer,
) -> None:
    """A mode lasts as long as the agent's session: an admin's `agent-full-access` turn in a
    caller's conversation must not leave that caller's next turns unguarded."""
    admin, caller = callers(codex)
    since = len(codex.log())  # the log of the shared server from this test on
    started = await caller.turn(user_message("setup", metadata={"mode": "workspace-write"}))
    context_id = started.context_id
    helped = await admin.turn(
        user_message("setup", context_id=context_id, metadata={"mode": "agent-full-access"})
    )
    assert "mode: agent-full-access;" in answer_text(helped)
    after = await caller.turn(user_message("setup", context_id=context_id))
    assert after.context_id == context_id
    said = answer_text(after)
    assert "mode: " in said and "mode: agent-full-access;" not in said, said
    assert "reloading it" in codex.log()[since:]
    # An admin's own next turn there is the admin's to choose again.
    again = await admin.turn(
        user_message("setup", context_id=context_id, metadata={"mode": "agent-full-access"})
    )
    assert "mode: agent-full-access;" in answer_text(again)
