"""A conversation's branch pushed to the team's shared repository after its turns, and
taken over from there by another box (workspace/conversation_repos/handover.py).

Two boxes here are two clones of one project, each with its own state dir, and one bare
repository both name as `workspace.shared_repository`. The attacks: the agent writes its
conversation's `.git/config` (a `url.<base>.insteadOf` that would send the push elsewhere,
an ssh command, hooks) and none of it is obeyed; then the same through a real server, the
hostile ACP agent writing it from inside its sandbox, where the shared repository is not
even to be seen. (The whole path, three boxes on the test tailnet and one killed:
tests/test_tailnet_cluster.py.)
"""

from __future__ import annotations

from pathlib import Path

import pytest
from google.protobuf.json_format import MessageToDict

from tailagent.config import checks
from tailagent.workspace import ConversationRepos
from tailagent.workspace.conversation_repos.handover import ref_of
from tests import test_worktrees
from tests.a2a_helpers import A2A, user_message
from tests.conftest import start_server
from tests.test_isolation import make_project
from tests.test_sandbox import HOSTILE, attempt
from tests.test_worktrees import TRAILERS, read, sh, write

no_identity = test_worktrees.no_identity


def bare(path: Path) -> Path:
    """The team's shared repository: bare, checking every object it receives."""
    sh(path.parent, "init", "-q", "--bare", str(path))
    sh(path, "config", "receive.fsckObjects", "true")
    return path


def shared_ref(shared: Path, context_id: str) -> str:
    """The commit the shared repository holds for the conversation ("" for none)."""
    found = sh(shared, "rev-parse", "-q", "--verify", ref_of(context_id), check=False)
    return found.strip()


def planted_ran(tmp_path: Path) -> list[str]:
    """The markers a planted command or hook would have left."""
    return sorted(p.name for p in tmp_path.iterdir() if p.name.startswith("ran"))


@pytest.fixture
def team(tmp_path: Path) -> tuple[Path, Path, Path]:
    """The person's project cloned on two boxes, and the shared repository."""
    upstream = tmp_path / "upstream"
    make_project(upstream, {"notes.txt": "from main\n"})
    for box in ("box1", "box2"):
        sh(tmp_path, "clone", "-q", str(upstream), str(tmp_path / box))
    return tmp_path / "box1", tmp_path / "box2", bare(tmp_path / "team.git")


def repos(box: Path, shared: Path) -> ConversationRepos:
    return ConversationRepos(
        box, box.parent / f"{box.name}-state" / "worktrees", shared=str(shared)
    )


async def test_a_turns_commit_is_pushed_and_another_box_goes_on_from_it(
    team: tuple[Path, Path, Path],
) -> None:
    box1, box2, shared = team
    first, second = repos(box1, shared), repos(box2, shared)
    worktree = await first.ensure("ctx-1")
    write(worktree.path / "notes.txt", "from main\nthe agent on box1\n")
    commit = await first.commit_turn("ctx-1", "edit notes", TRAILERS)
    assert commit is not None
    assert await first.hand_over("ctx-1") == commit
    assert shared_ref(shared, "ctx-1") == commit
    # Only the conversation's ref: nothing of the person's other branches or tags.
    listed = sh(shared, "for-each-ref", "--format=%(refname)").split()
    assert listed == [ref_of("ctx-1")]

    # box1 is gone; box2 has never seen the conversation.
    assert await second.get("ctx-1") is None
    assert await second.take_over("ctx-1") == commit
    taken = await second.ensure("ctx-1")
    assert taken.path.is_relative_to(box2.parent / "box2-state")
    assert read(taken.path / "notes.txt") == "from main\nthe agent on box1\n"
    log = sh(taken.path, "log", "-1", "--format=%H%n%B", taken.branch)
    assert log.startswith(commit) and "Requested-by: alice@example.com (laptop)" in log
    assert await second.take_over("ctx-1") == commit  # its own copy is at it: kept
    assert (await second.get("ctx-1")) == taken

    # It goes on, is pushed from here, and is merged into box2's checkout.
    write(taken.path / "notes.txt", "from main\nthe agent on box1\nand on box2\n")
    again = await second.commit_turn("ctx-1", "more notes", TRAILERS)
    assert await second.hand_over("ctx-1") == again == shared_ref(shared, "ctx-1")
    # box1 is back, and the conversation's box2 is gone in turn: box1's old copy is
    # behind the shared repository, and is replaced by what box2 pushed.
    stale = await first.get("ctx-1")
    assert stale is not None and await first.take_over("ctx-1") == again
    fresh = await first.get("ctx-1")
    assert fresh is not None and "and on box2" in read(fresh.path / "notes.txt")
    assert not stale.path.exists() or fresh.path == stale.path
    merged = await second.merge("ctx-1")
    assert merged.removed and "and on box2" in read(box2 / "notes.txt")
    assert shared_ref(shared, "ctx-1") == ""  # merged: nothing is left to take over
    await first.aclose()
    await second.aclose()


async def test_nothing_pushed_is_nothing_taken(team: tuple[Path, Path, Path]) -> None:
    """A conversation whose turns changed nothing, or one discarded, leaves no ref: the
    other box starts it from its own base, as any conversation starts."""
    box1, box2, shared = team
    first, second = repos(box1, shared), repos(box2, shared)
    await first.ensure("ctx-idle")
    assert await first.hand_over("ctx-idle") is None
    assert await second.take_over("ctx-idle") is None
    assert await second.get("ctx-idle") is None  # no directory, no record made for it

    worktree = await first.ensure("ctx-gone")
    write(worktree.path / "draft.txt", "a draft\n")
    assert await first.commit_turn("ctx-gone", "draft", TRAILERS)
    assert await first.hand_over("ctx-gone")
    await first.discard("ctx-gone")
    assert shared_ref(shared, "ctx-gone") == ""
    assert await second.take_over("ctx-gone") is None
    await first.aclose()
    await second.aclose()


async def test_the_agents_config_does_not_steer_the_push(
    team: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """The conversation's `.git/config` is the agent's: a rewrite of the shared
    repository's URL to one of its own, an ssh command, a pre-push hook, a receive-pack
    of its own. The branch lands in the repository the operator named, and nothing runs."""
    box1, _, shared = team
    evil = bare(tmp_path / "evil.git")
    marker = tmp_path / "ran"
    first = repos(box1, shared)
    worktree = await first.ensure("ctx-evil")
    own = worktree.path
    hooks = own / ".git" / "evil-hooks"
    write(hooks / "pre-push", f"#!/bin/sh\ntouch '{marker}-pre-push'\n")
    (hooks / "pre-push").chmod(0o755)
    for key, value in (
        (f"url.{evil}.insteadOf", str(shared)),
        (f"url.{evil}.pushInsteadOf", str(shared)),
        ("core.sshCommand", f"touch '{marker}-ssh'"),
        ("core.hooksPath", str(hooks)),
        ("remote.origin.url", str(evil)),
        ("remote.origin.receivepack", f"touch '{marker}-receive'; git receive-pack"),
        ("push.default", "matching"),
    ):
        sh(own, "config", key, value)
    write(own / "notes.txt", "the agent's\n")
    commit = await first.commit_turn("ctx-evil", "edit", TRAILERS)
    assert await first.hand_over("ctx-evil") == commit
    assert shared_ref(shared, "ctx-evil") == commit
    assert sh(evil, "for-each-ref").strip() == ""
    assert planted_ran(tmp_path) == []
    await first.aclose()


async def test_a_hook_in_the_shared_repository_runs_nothing_here(
    team: tuple[Path, Path, Path], tmp_path: Path
) -> None:
    """A local shared repository's receive-pack and upload-pack run as this server: a
    hook a teammate planted there (who can write it, as they push) runs nothing on the
    push, the takeover's look or its fetch."""
    box1, box2, shared = team
    marker = tmp_path / "ran"
    for hook in ("pre-receive", "update", "post-receive", "post-update", "reference-transaction"):
        write(shared / "hooks" / hook, f"#!/bin/sh\ntouch '{marker}-{hook}'\ncat >/dev/null\n")
        (shared / "hooks" / hook).chmod(0o755)
    sh(shared, "config", "core.fsmonitor", f"touch '{marker}-fsmonitor'")
    first, second = repos(box1, shared), repos(box2, shared)
    worktree = await first.ensure("ctx-hooks")
    write(worktree.path / "notes.txt", "pushed past the hooks\n")
    commit = await first.commit_turn("ctx-hooks", "edit", TRAILERS)
    assert await first.hand_over("ctx-hooks") == commit == shared_ref(shared, "ctx-hooks")
    assert await second.take_over("ctx-hooks") == commit
    await first.discard("ctx-hooks")
    assert shared_ref(shared, "ctx-hooks") == ""
    assert planted_ran(tmp_path) == []
    await first.aclose()
    await second.aclose()


@pytest.mark.parametrize(
    "url", ["relative/team.git", "ext::sh -c touch% /tmp/x", "fd::3", "ftp://host/team.git"]
)
def test_a_shared_repository_only_by_path_or_a_plain_url(url: str) -> None:
    """No transport that hands git a command (`ext::`, `fd::`), no relative path."""
    with pytest.raises(ValueError):
        checks.shared_repository(url)


@pytest.mark.parametrize(
    ("url", "protocol"),
    [("/srv/team.git", "file"), ("git@git.example.com:team/app.git", "ssh"),
     ("ssh://git.example.com/team.git", "ssh"), ("https://git.example.com/team.git", "https")],
)  # fmt: skip
def test_each_url_is_reached_by_its_own_transport(url: str, protocol: str) -> None:
    assert checks.remote_protocol(url) == protocol


async def test_the_hostile_agent_neither_sees_nor_steers_the_shared_repository(
    tmp_path: Path,
) -> None:
    """Through a real server, the agent fenced as it is by default: from inside its
    sandbox it looks for the shared repository, points its config's URLs and hooks
    elsewhere and commits. The turn's commit lands where the operator said, nothing it
    planted ran, and it never saw the shared repository."""
    make_project(tmp_path / "workspace", {"notes.txt": "from main\n"})
    shared, evil, marker = (
        bare(tmp_path / "team.git"),
        bare(tmp_path / "evil.git"),
        tmp_path / "ran",
    )
    config = tmp_path / "tailagent.toml"
    config.write_text(f'[workspace]\nshared_repository = "{shared}"\n')
    server = start_server(
        tmp_path, "--agent-command", f"python3 {HOSTILE}", "--config", str(config)
    )
    try:
        plan = {
            "run": [
                f"ls {shared}",
                f"git config url.{evil}.insteadOf {shared}",
                f"git config url.{evil}.pushInsteadOf {shared}",
                f"git config core.sshCommand 'touch {marker}-ssh'",
                f"mkdir -p .git/evil && printf '#!/bin/sh\\ntouch {marker}-hook\\n' "
                "> .git/evil/pre-push && chmod +x .git/evil/pre-push",
                "git config core.hooksPath .git/evil",
                "echo the agent was here > handed.txt",
            ]
        }
        agent = A2A(server.url, server.token)
        got, turn = await attempt(agent, plan)
        assert turn.final_state == "completed", turn
        assert not got[f"run ls {shared}"].startswith("ok"), got  # not in its sandbox
        assert all(v.startswith("ok") for k, v in got.items() if not k.startswith("run ls")), got
        task = await agent.get(turn.task_id)
        pushed = MessageToDict(task.metadata)["worktree"]
        assert pushed["shared"] == pushed["commit"] == shared_ref(shared, turn.context_id)
        assert sh(shared, "show", f"{pushed['commit']}:handed.txt") == "the agent was here\n"
        assert sh(evil, "for-each-ref").strip() == ""
        assert planted_ran(tmp_path) == []
        # Merged: the shared repository forgets it.
        await agent.send(user_message(context_id=turn.context_id, data={"kind": "merge"}))
        assert shared_ref(shared, turn.context_id) == ""
    finally:
        server.stop()
