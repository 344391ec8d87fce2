"""Where a conversation works, and what its turns leave behind.

With isolation (`workspace.isolation = "repository"` in a git repository) every A2A
context gets a git worktree and branch of its own: its agent works there, each turn
that changed files ends with a commit whose trailers say who asked and who allowed
each step, and nothing reaches the base branch until a person merges it. Shared,
every conversation works in the workspace itself, as before.

The executor asks only three things of this module (`directory`, `turn_ended`, and
`turn_over` however the turn ended); the agents get a directory and never learn git.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from a2a.types.a2a_pb2 import Message
from google.protobuf.json_format import MessageToDict

from tailagent.config import WorkspaceSettings
from tailagent.workspace.conversation_repos import (
    BRANCH_PREFIX,
    ConversationRepos,
    MergePreview,
    OtherRepository,
    Start,
    WorktreeStatus,
    probe,
)
from tailagent.workspace.git import GitError

log = logging.getLogger(__name__)


def signature(who: str, device: str, delegated_by: str = "") -> str:
    """A person as a commit trailer names them: `alice@example.com (laptop)`, and for
    work another box handed here, that box too: `alice@example.com (laptop) via devbox-1`."""
    named = f"{who} ({device})" if device else who
    return f"{named} via {delegated_by}" if delegated_by else named


def subject_of(message: Message) -> str:
    """A commit's subject: the first line of what was asked."""
    text = " ".join(p.text for p in message.parts if p.HasField("text")).strip()
    return text.splitlines()[0][:72] if text else "a turn of the agent"


@dataclass
class TurnRecord:
    """What a turn's commit says: the first line of what was asked, by whom, and who
    allowed each step of it."""

    task_id: str
    context_id: str
    subject: str
    requested_by: str
    approvals: list[str] = field(default_factory=list)

    def trailers(self) -> list[tuple[str, str]]:
        return [
            ("Requested-by", self.requested_by),
            *(("Approved-by", approval) for approval in self.approvals),
            ("A2A-Task", self.task_id),
            ("A2A-Context", self.context_id),
        ]


class Conversations(Protocol):
    async def directory(self, context_id: str) -> Path | None:
        """The directory the context's agent works in (None: the workspace)."""
        ...

    def started(self, context_id: str) -> Start | None:
        """Where the conversation started, when its last `directory` started it (a new
        conversation, or one whose turns had changed nothing): said to the caller once."""
        ...

    async def turn_ended(self, turn: TurnRecord) -> dict[str, Any] | None:
        """Records the turn (a commit); what the task's final status says of it."""
        ...

    async def turn_over(self, context_id: str) -> None:
        """The conversation has no turn alive any more, however its last one ended
        (done, failed, cancelled, refused, or its agent never started): a branch with
        nothing ahead of its base goes."""
        ...

    async def aclose(self) -> None: ...


class Shared:
    """Every conversation in the workspace itself."""

    def __init__(self, why: str) -> None:
        self.why = why

    async def directory(self, context_id: str) -> Path | None:
        return None

    def started(self, context_id: str) -> Start | None:
        return None

    async def turn_ended(self, turn: TurnRecord) -> dict[str, Any] | None:
        return None

    async def turn_over(self, context_id: str) -> None:
        return None

    async def aclose(self) -> None:
        return None


class Isolated:
    """A git worktree and branch per conversation.

    Making a worktree costs a checkout (~0.2 s on 10,000 files, more on a busy disk), so,
    like the agents' warm spares, one is kept made ahead for the next new conversation;
    an agent started ahead can be started inside it (`spare_directory`)."""

    def __init__(self, worktrees: ConversationRepos, ahead: int = 1) -> None:
        self.worktrees = worktrees
        self._ahead = ahead
        self._making = asyncio.Lock()
        self._refill: asyncio.Task[None] | None = None
        self._spared: set[Path] = set()
        self._starts: dict[str, Start] = {}  # said once, by `started`
        # Conversations whose box is gone, to go on here from their shared branch.
        self._continuing: set[str] = set()
        # What a turn's directory needs before the turn (the fence handing what tailagent's
        # git wrote there to the agent's uid): blocking file work, run in a thread.
        self.before_turn: Callable[[Path], None] | None = None

    def start(self) -> None:
        """Makes the worktrees ahead in the background."""
        if self._refill is None or self._refill.done():
            self._refill = asyncio.create_task(self._fill(), name="worktrees made ahead")

    async def _fill(self) -> None:
        async with self._making:
            try:
                while len(self.worktrees.ready()) < self._ahead:
                    await self.worktrees.prepare()
            except GitError as exc:
                log.warning("could not make a worktree ahead: %s", exc)

    async def spare_directory(self) -> Path:
        """Where an agent started ahead should start: a worktree made ahead that no other
        has, so the conversation taking the worktree finds its agent already there."""
        async with self._making:
            ready = self.worktrees.ready()
            self._spared &= set(ready)
            fresh = [path for path in ready if path not in self._spared]
            # All spared (a spare agent that failed, say at a missing login, asks again):
            # the newest is shared rather than another made, so one is kept, not dozens.
            path = (fresh or ready[-1:] or [await self.worktrees.prepare()])[0]
            self._spared.add(path)
            return path

    def continue_here(self, context_id: str) -> None:
        """The conversation ran on a box that is gone: its next turn here starts from the
        last commit that box pushed to the shared repository (see `directory`)."""
        self._continuing.add(context_id)

    async def directory(self, context_id: str) -> Path | None:
        started = time.monotonic()
        before = await self.worktrees.get(context_id)
        continuing, taken = context_id in self._continuing, None
        if continuing:
            self._continuing.discard(context_id)
            taken = await self.worktrees.take_over(context_id)
        worktree = await self.worktrees.ensure(context_id)
        path = worktree.path
        if continuing:
            commit = taken or worktree.base_commit
            log.info("conversation %s: its box is gone; it goes on here from %s (%s)",
                     context_id, commit[:12], "its last commit in the shared repository"
                     if taken else "its branch had shared none")  # fmt: skip
            shown, checkout = str(worktree.shown), str(self.worktrees.repo)
            self._starts[context_id] = Start(worktree.base_branch, commit, shown, checkout, [],
                                             continued=True, shared=taken is not None)  # fmt: skip
        elif before is None or before.idle:  # made from the base's tip now
            try:
                self._starts[context_id] = await self.worktrees.start_of(worktree)
            except GitError as exc:  # the person's checkout could not be read: not said
                log.warning("conversation %s: where it starts is not said: %s", context_id, exc)
        if self.before_turn is not None:
            await asyncio.to_thread(self.before_turn, path)
        log.debug("conversation %s works in %s (%.0f ms)", context_id, path,
                  (time.monotonic() - started) * 1000)  # fmt: skip
        self.start()
        return path

    def started(self, context_id: str) -> Start | None:
        return self._starts.pop(context_id, None)

    async def aclose(self) -> None:
        if self._refill is not None:
            self._refill.cancel()
            with contextlib.suppress(BaseException):
                await self._refill
        try:  # nobody's until taken: it does not outlive the serving of its repository
            await self.worktrees.drop_ready()
        except (GitError, OSError) as exc:
            log.warning("the worktree made ahead was not removed: %s", exc)
        await self.worktrees.aclose()

    async def turn_over(self, context_id: str) -> None:
        try:
            await self.worktrees.release(context_id)
        except (GitError, OSError) as exc:
            log.warning("conversation %s: its empty branch was not removed: %s", context_id, exc)

    async def turn_ended(self, turn: TurnRecord) -> dict[str, Any] | None:
        try:
            commit = await self.worktrees.commit_turn(
                turn.context_id, turn.subject, turn.trailers()
            )
            status = await self.worktrees.status(turn.context_id)
            if commit is None and status.ahead == 0 and not status.files:
                await self.worktrees.release(turn.context_id)
            # What the turn really changed, read from its commit: what the page shows of
            # a finished turn, whatever the agent reported (bounded; see
            # workspace/conversation_repos/patches.py).
            change = await self.worktrees.committed(turn.context_id, commit) if commit else None
            pushed = await self._hand_over(turn.context_id, status.ahead)
        except GitError as exc:
            # The turn's work stays in the worktree, uncommitted: the next turn's commit
            # (or a person) picks it up. The turn fails saying why (turns/pump.py).
            log.warning("conversation %s: its turn was not committed: %s", turn.context_id, exc)
            return {"error": str(exc)}
        return {
            "branch": status.branch,
            "base": status.base_branch,
            "ahead": status.ahead,
            "behind": status.behind,
            "files": status.files,
            "commit": commit or "",
            **({"change": change.as_data()} if change is not None else {}),
            **({"shared": pushed} if pushed else {}),
        }

    async def _hand_over(self, context_id: str, ahead: int) -> str | None:
        """Pushes a branch with commits to the team's shared repository, when there is
        one; the commit pushed. A push that fails is said and the turn stands: its commit
        is here, only not yet where another box could take it."""
        if not ahead or not self.worktrees.hands_over:
            return None
        try:
            return await self.worktrees.hand_over(context_id)
        except (GitError, OSError) as exc:
            log.warning("conversation %s: its branch was not pushed to the shared "
                        "repository: %s", context_id, exc)  # fmt: skip
            return None


async def choose(workspace: WorkspaceSettings, cwd: Path, state_dir: Path) -> Isolated | Shared:
    """The isolation in force for the project at `cwd`: a repository per conversation when
    asked for and the project is a git repository that can have them; else shared,
    saying why."""
    if workspace.isolation == "shared":
        return Shared("workspace.isolation = shared")
    reason = await probe(cwd)
    if reason is not None:
        return Shared(reason)
    worktrees = ConversationRepos(cwd, state_dir / "worktrees", workspace.base,
                                  workspace.git_programs, workspace.shared_repository)  # fmt: skip
    if not worktrees.explained():
        log.info("%s", first_start(cwd, worktrees.root))
    return Isolated(worktrees)


def first_start(workspace: Path, root: Path) -> str:
    """What worktree mode does in a repository, said at the first start there: a
    newcomer running `serve` in a clone (of tailagent itself, even) learns where the
    agent's work goes before it makes a branch, and how to choose otherwise."""
    own = Path(__file__).resolve().is_relative_to(workspace.resolve())
    which = "tailagent's own checkout" if own else "a git repository"
    return (
        f"{workspace} is {which}: each conversation that changes files gets a branch, "
        f"tailagent/<8 characters of its id>, in a repository of its own in {root} that "
        "borrows this one's objects, until you `tailagent merge` or `tailagent discard` it "
        "(nothing reaches this repository before; one that changes nothing leaves no "
        "branch). To have the agent work on another project, start it there or with "
        "--cwd DIR; to let it edit this checkout itself, --isolation shared. (Said once "
        "for this repository.)"
    )


OPERATIONS = ("merge", "discard", "diff", "conversations")
STRATEGIES = ("squash", "merge", "rebase")


class Refused(Exception):
    """A conversation operation that cannot be done; str() is the one line to show."""


def requested_operation(message: Message) -> dict[str, Any] | None:
    """The merge, discard or diff a message asks for (a data part with that kind)."""
    for part in message.parts:
        if part.HasField("data"):
            data = MessageToDict(part.data)
            if isinstance(data, dict) and data.get("kind") in OPERATIONS:
                return data
    return None


async def operate(
    conversations: Isolated | Shared, context_id: str, request: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    """Carries out `{"kind": "merge" | "discard" | "diff", ...}` on a conversation
    (the caller's right to it is checked before): the reply's text and data."""
    kind = request.get("kind")
    if not isinstance(conversations, Isolated):
        raise Refused(
            f"conversations share the workspace here ({conversations.why}): there is no "
            "branch to merge, discard or diff"
        )
    worktrees = conversations.worktrees
    try:
        if await worktrees.get(context_id) is None:
            return _gone(worktrees, context_id, kind)
        if kind == "diff":
            diff = await worktrees.diff(context_id)
            return diff or "(no changes against the base)", {"kind": "diff", "diff": diff}
        if kind == "discard":
            if request.get("dryRun"):
                lost = await worktrees.would_lose(context_id)
                return _loss_text(lost, "would be lost"), {"kind": "discard", "dryRun": True,
                        "commits": lost.commits_lost, "files": lost.files_uncommitted}  # fmt: skip
            lost = await worktrees.discard(context_id)
            return _loss_text(lost, "discarded"), {"kind": "discard", "commits": lost.commits_lost,
                                                   "files": lost.files_uncommitted}  # fmt: skip
        if request.get("dryRun"):
            return _preview(await worktrees.preview(context_id))
        strategy = request.get("strategy", "squash")
        if strategy not in STRATEGIES:
            raise Refused(f"strategy must be one of {', '.join(STRATEGIES)}, not {strategy!r}")
        expect = str(request.get("expect") or "") or None
        merged = await worktrees.merge(
            context_id, strategy, keep=bool(request.get("keep")), expect=expect
        )
    except GitError as exc:
        raise Refused(str(exc)) from None
    gone = "; its worktree and branch are removed" if merged.removed else ""
    text = f"merged ({merged.strategy}) into {merged.base_branch} as {merged.commit[:12]}{gone}"
    return text, {"kind": "merge", "strategy": merged.strategy, "base": merged.base_branch,
                  "commit": merged.commit, "removed": merged.removed}  # fmt: skip


def _preview(preview: MergePreview) -> tuple[str, dict[str, Any]]:
    """A merge's dry run: what it would bring into the base, as a person reads it (the
    stat) and as a program or the page does (the stat, the bounded diff, and the tip to
    name as `expect`, so that the merge takes what was shown and nothing else)."""
    commits = f"{preview.commits} commit" + ("s" if preview.commits != 1 else "")
    text = (f"{preview.branch} ({commits}) would bring into {preview.base_branch}:\n"
            f"{preview.patch.stat()}")  # fmt: skip
    return text, {"kind": "merge", "dryRun": True, "branch": preview.branch,
                  "base": preview.base_branch, "tip": preview.tip, "commits": preview.commits,
                  **preview.patch.as_data()}  # fmt: skip


def _gone(worktrees: ConversationRepos, context_id: str, kind: Any) -> tuple[str, dict[str, Any]]:
    """The answer for a conversation without a worktree: merged already (a second
    merge is told where the first went, and is no error), or unknown here."""
    merged = worktrees.merged(context_id)
    if merged is None:
        raise Refused(
            f"no worktree for conversation {context_id}: it is unknown here, or it has "
            "not started a turn yet"
        )
    where = f"already merged into {merged.base_branch} at {merged.commit[:12]}"
    if kind != "merge":
        raise Refused(f"{where} ({merged.branch}, {merged.at}): nothing left to {kind}; "
                      f"`git show {merged.commit[:12]}` shows it")  # fmt: skip
    return f"{where} ({merged.branch}, {merged.at})", {"kind": "merge", "already": True,
            "base": merged.base_branch, "commit": merged.commit,
            "strategy": merged.strategy}  # fmt: skip


async def listing(conversations: Isolated | Shared, context_ids: list[str],
                  holders: dict[str, str]) -> tuple[str, dict[str, Any]]:  # fmt: skip
    """The caller's conversations (`context_ids`, theirs: checked before) with their
    branch, how far it is ahead of and behind its base, and what state it is in;
    `holders` names the task a turn runs in, for those that are busy ("": a task the
    caller may not read)."""
    if not isinstance(conversations, Isolated):
        raise Refused(
            f"conversations share the workspace here ({conversations.why}): no "
            "conversation has a branch of its own"
        )
    rows: list[dict[str, Any]] = []
    elsewhere: dict[str, int] = {}
    for context_id in context_ids:
        try:
            rows.append(await _row(conversations.worktrees, context_id, holders.get(context_id)))
        except OtherRepository as exc:  # one count per repository, not a row each
            if not exc.idle:  # changed nothing: nothing of it is kept there either
                elsewhere[exc.repository] = elsewhere.get(exc.repository, 0) + 1
    rows.sort(key=lambda row: str(row["since"]), reverse=True)
    others = [{"repository": _workspace_of(repository), "conversations": count}
              for repository, count in sorted(elsewhere.items())]  # fmt: skip
    lines = [f"{r['short']}  {r['branch'] or '-'}  +{r['ahead']}/-{r['behind']}  "
             f"{r['state']}" + (f"  {r['path']}" if r.get("path") else "")
             for r in rows]  # fmt: skip
    text = "\n".join(lines + [_elsewhere_line(other) for other in others])
    return text or "no conversations of yours with a worktree", {
        "kind": "conversations", "conversations": rows, "elsewhere": others}  # fmt: skip


def _workspace_of(common_dir: str) -> str:
    """The workspace a person serves (`--cwd`) for a repository's git common dir."""
    path = Path(common_dir)
    return str(path.parent if path.name == ".git" else path)


def _elsewhere_line(other: dict[str, Any]) -> str:
    count = other["conversations"]
    return (f"{count} conversation{'s' if count != 1 else ''} of yours with a branch in "
            f"{other['repository']}, served before from this state dir: serve it (--cwd) "
            "to see, merge or discard them")  # fmt: skip


async def _row(
    worktrees: ConversationRepos, context_id: str, task_id: str | None
) -> dict[str, Any]:
    """One conversation as `tailagent conversations` lists it."""
    row: dict[str, Any] = {"contextId": context_id, "branch": "", "base": "", "ahead": 0,
                           "behind": 0, "files": [], "since": ""}  # fmt: skip
    try:
        worktree = await worktrees.get(context_id)
        if worktree is None:
            merged = worktrees.merged(context_id)
            assert merged is not None  # listed: a worktree or a merge is known of it
            row |= {"branch": merged.branch, "base": merged.base_branch, "since": merged.at,
                    "state": f"merged at {merged.commit[:12]}"}  # fmt: skip
        else:
            status = await worktrees.status(context_id)
            row |= {"branch": "" if worktree.idle else status.branch,
                    "base": status.base_branch, "ahead": status.ahead, "behind": status.behind,
                    "files": status.files, "since": worktree.created, "idle": worktree.idle,
                    "state": _state(worktree.idle, status),
                    "path": str(worktree.shown)}  # fmt: skip
            if status.ahead and await worktrees.fate(context_id, status.branch,
                                                     status.tip) == "merged":  # fmt: skip
                row["state"] = "merged, kept: nothing new to merge"  # `merge --keep`
    except OtherRepository:
        raise  # not this repository's: listing counts it apart
    except GitError as exc:
        row["state"] = f"cannot be read: {exc}"
    if task_id is not None:
        row["state"] = "in a turn" + (f" (task {task_id})" if task_id else "")
    row["short"] = row["branch"].removeprefix(BRANCH_PREFIX) or context_id[:8]
    return row


def _state(idle: bool, status: WorktreeStatus) -> str:
    if idle:
        return "no changes, no branch"
    if status.ahead:
        return "changes to merge" + (", behind its base" if status.behind else "")
    return "changes not committed" if status.files else "no changes yet"


def _loss_text(lost: Any, verb: str) -> str:
    commits = "; ".join(lost.commits_lost) or "none"
    files = ", ".join(lost.files_uncommitted) or "none"
    return f"{verb}: commits not merged: {commits}; uncommitted files: {files}"
