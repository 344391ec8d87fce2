"""The offline echo agent: deterministic, instant, and able to show every event.

It answers with what it was sent. Keywords in the prompt make it act out the
vocabulary, in the order they appear, so demos and tests can exercise the whole
bridge without a model account:

    think  plan  tool  edit  edit:PATH  ask  ask:NAME  question  slow N  boom  cost:N
    delegate:PEER text...

Keywords are read in any case; what follows a colon is kept as written. `ask`
always asks for the same command (so asking twice trips loop protection); `ask:NAME`
asks for a command about NAME (distinct requests). `edit` really fixes calc.py in its
working directory (`return a - b` becomes `return a + b`, the rest of the file kept; a
missing calc.py is made, already fixed; one with nothing to fix is left alone, and no
change is reported); `edit:PATH` writes the prompt's first line to PATH, a path relative
to the working directory (`edit:notes/hello.txt` makes `notes/` as needed), so two
conversations can conflict on purpose. An absolute PATH, or one through `..`, fails
the edit's tool call: the echo agent writes inside its working directory only.
`cost:N` makes the turn report that it cost N dollars (and the prompt's words as its
tokens), so costs and budgets can be shown without a paid agent. `delegate:PEER` hands
the rest of the prompt (its keywords are the peer's, not acted out here) to PEER, a
tailagent on the tailnet named by host name or URL, through the turn's tools, and
answers with the peer's answer: so the whole delegation path shows without a model.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import itertools
import json
import re
import uuid
from collections.abc import AsyncIterator
from pathlib import Path

from tailagent.agent_kinds.claude import CLAUDE_CODE_MODES as CLAUDE_CODE
from tailagent.agents.events import (
    NO_PERSON_TURN,
    AgentEvent,
    Answer,
    DelegationFailed,
    FileChanged,
    Notice,
    PermissionAsked,
    PermissionDecision,
    PermissionOption,
    Plan,
    PlanEntry,
    PromptData,
    PromptFile,
    PromptPart,
    PromptText,
    Question,
    QuestionAnswers,
    QuestionAsked,
    QuestionOption,
    Skill,
    Text,
    Thought,
    ToolFinished,
    ToolStarted,
    TurnDone,
    TurnFailed,
    TurnOptions,
    TurnTools,
)

# A keyword, with its argument (`edit:notes/Hello.txt`), or a number (`slow 5`).
_WORD = re.compile(r"[A-Za-z]+(?::[\w./-]+)?|\d+")
# `delegate:PEER` and the rest of the prompt, which is the peer's to act out.
_HANDOFF = re.compile(r"\bdelegate:(\S+)\s*", re.IGNORECASE)
KEYWORDS = ("think", "plan", "tool", "edit", "ask", "question", "slow", "boom")
COLOUR_QUESTION = "Which colour do you prefer?"
CALC_BUG, CALC_FIX = "return a - b", "return a + b"
CALC_AFTER = f"def add(a, b):\n    {CALC_FIX}\n"


def _prompt_text(parts: list[PromptPart]) -> str:
    chunks = []
    for part in parts:
        if isinstance(part, PromptText):
            chunks.append(part.text)
        elif isinstance(part, PromptData):
            chunks.append(json.dumps(part.data, sort_keys=True))
        elif isinstance(part, PromptFile):
            chunks.append(part.reference(part.save()))
    return "\n".join(chunks)


def handoff_of(text: str) -> tuple[str, tuple[str, str] | None]:
    """The prompt's own part, and the (peer, message) its `delegate:PEER` hands on."""
    found = _HANDOFF.search(text)
    if found is None:
        return text, None
    return text[: found.start()], (found.group(1), text[found.end() :])


def cost_of(text: str) -> float:
    """What a prompt says its turn costs: the sum of its `cost:N` words (dollars), so a
    demo or a test can show costs and budgets without a paid agent."""
    total = 0.0
    for word in _WORD.findall(text):
        keyword, _, amount = word.partition(":")
        if keyword.lower() == "cost":
            with contextlib.suppress(ValueError):
                total += max(0.0, float(amount))
    return total


def script(text: str) -> list[tuple[str, str]]:
    """The actions a prompt asks for, as (keyword, argument) pairs, in order."""
    words = _WORD.findall(text)
    actions: list[tuple[str, str]] = []
    for i, word in enumerate(words):
        keyword, _, arg = word.partition(":")
        keyword = keyword.lower()  # the argument, a path or a name, keeps its case
        if keyword not in KEYWORDS:
            continue
        if keyword == "slow":
            following = words[i + 1] if i + 1 < len(words) else ""
            arg = following if following.isdigit() else "3"
        actions.append((keyword, arg))
    return actions


class EchoSession:
    def __init__(self, session_id: str, cwd: Path) -> None:
        self._session_id = session_id
        self._cwd = cwd
        self._turns = 0
        self._answers: dict[str, asyncio.Future[Answer]] = {}
        self._cancelled = asyncio.Event()
        self.closed = False

    @property
    def session_id(self) -> str:
        return self._session_id

    @property
    def alive(self) -> bool:
        return not self.closed

    async def answer(self, request_id: str, answer: Answer) -> None:
        future = self._answers.get(request_id)
        if future is None or future.done():
            raise KeyError(f"no pending request {request_id}")
        future.set_result(answer)

    async def cancel(self) -> None:
        self._cancelled.set()
        for future in self._answers.values():
            if not future.done():
                future.set_result(PermissionDecision(allow=False, message="cancelled"))

    async def close(self) -> None:
        self.closed = True
        await self.cancel()

    def _expect(self, request_id: str) -> asyncio.Future[Answer]:
        """Registers the answer slot before the prompt is yielded: the bridge may
        answer before it resumes this generator."""
        future: asyncio.Future[Answer] = asyncio.get_running_loop().create_future()
        self._answers[request_id] = future
        return future

    async def _wait(self, request_id: str) -> Answer:
        try:
            return await self._answers[request_id]
        finally:
            del self._answers[request_id]

    async def prompt(
        self, parts: list[PromptPart], options: TurnOptions | None = None
    ) -> AsyncIterator[AgentEvent]:
        self._cancelled.clear()
        self._turns += 1
        text = _prompt_text(parts)
        own, handoff = handoff_of(text)
        tool_ids = (f"tool-{n}" for n in itertools.count(1))
        for keyword, arg in script(own):
            if self._cancelled.is_set():
                break
            if keyword == "think":
                yield Thought("Thinking about: " + text)
            elif keyword == "plan":
                steps = ("Read the code", "Fix the bug", "Run the tests")
                yield Plan(tuple(PlanEntry(s, "pending") for s in steps))
                yield Plan(
                    (
                        PlanEntry(steps[0], "completed"),
                        PlanEntry(steps[1], "in_progress"),
                        PlanEntry(steps[2], "pending"),
                    )
                )
            elif keyword == "tool":
                tool_id = next(tool_ids)
                yield ToolStarted(tool_id, "Read", "Read calc.py", {"path": "calc.py"})
                yield ToolFinished(tool_id, "completed", "def add(a, b):\n    return a - b\n")
            elif keyword == "edit":
                tool_id = next(tool_ids)
                path = arg or "calc.py"
                yield ToolStarted(tool_id, "Edit", f"Edit {path}", {"path": path})
                try:
                    diff = self._edit(path, text)
                except (OSError, ValueError) as exc:
                    yield ToolFinished(tool_id, "failed", str(exc))
                    continue
                if not diff:
                    yield ToolFinished(tool_id, "completed", f"{path}: nothing to change")
                    continue
                yield FileChanged(path, diff)
                yield ToolFinished(tool_id, "completed")
            elif keyword == "ask":
                async for event in self._ask(arg or "build", next(tool_ids)):
                    yield event
                    if isinstance(event, TurnDone):
                        return
            elif keyword == "question":
                request_id = uuid.uuid4().hex
                choices = (
                    QuestionOption("red", "Choose red"),
                    QuestionOption("blue", "Choose blue"),
                )
                self._expect(request_id)
                yield QuestionAsked(request_id, (Question(COLOUR_QUESTION, "Colour", choices),))
                answer = await self._wait(request_id)
                if isinstance(answer, QuestionAnswers):
                    chosen = answer.answers.get(COLOUR_QUESTION, "")
                    yield Text(f"You chose {chosen}.\n")
            elif keyword == "slow":
                seconds = int(arg)
                for tick in range(1, seconds + 1):
                    try:
                        await asyncio.wait_for(self._cancelled.wait(), timeout=1.0)
                    except TimeoutError:
                        yield Text(f"tick {tick}/{seconds}\n")
                    else:
                        break
            elif keyword == "boom":
                yield TurnFailed("boom: the echo agent failed on purpose")
                return
        if handoff is not None and not self._cancelled.is_set():
            tools = options.tools if options is not None else None
            async for event in _hand_off(*handoff, tools, next(tool_ids)):
                yield event
        for event in self._ending(text, own, handoff is not None):
            yield event

    def _ending(self, text: str, own: str, handed: bool) -> list[AgentEvent]:
        """How a turn ends: cancelled; with the peer's answer (its cost the peer's, not
        counted here); or, the echo's own, with the prompt echoed."""
        if self._cancelled.is_set():
            return [TurnDone(stop_reason="cancelled", usage={"turns": self._turns})]
        if handed:
            return [TurnDone(usage={"turns": self._turns}, cost=cost_of(own))]
        words = len(text.split())  # an echo's "tokens": the prompt's words, then "echo:" too
        usage = {"turns": self._turns, "inputChars": len(text), "inputTokens": words,
                 "outputTokens": words + 1}  # fmt: skip
        return [Text("echo: "), Text(text), TurnDone(usage=usage, cost=cost_of(text))]

    def _edit(self, path: str, prompt: str) -> str:
        """Writes the change it shows to a real file of its working directory: `calc.py`
        gets its bug fixed (made, fixed, if missing), any other path the prompt's first
        line. Returns the diff of what it wrote, from the file as it was ("" when nothing
        changed): a turn's commit holds exactly the change it reported."""
        root = self._cwd.resolve()
        if Path(path).is_absolute() or ".." in Path(path).parts:
            raise ValueError(f"{path}: the echo agent writes inside its working directory only")
        target = (root / path).resolve()  # a symbolic link out of it is refused too
        if not target.is_relative_to(root) or target == root:
            raise ValueError(f"{path} is outside the working directory")
        target.parent.mkdir(parents=True, exist_ok=True)
        existed = target.exists()
        before = target.read_text() if existed else ""
        if path == "calc.py":
            after = before.replace(CALC_BUG, CALC_FIX, 1) if existed else CALC_AFTER
        else:
            after = prompt.splitlines()[0] + "\n" if prompt.strip() else "\n"
        if existed and after == before:
            return ""
        target.write_text(after)
        lines = difflib.unified_diff(
            before.splitlines(keepends=True), after.splitlines(keepends=True),
            f"a/{path}" if existed else "/dev/null", f"b/{path}",
        )  # fmt: skip
        return "".join(lines)

    async def _ask(self, target: str, tool_id: str) -> AsyncIterator[AgentEvent]:
        command = f"rm -rf {target}"
        request_id = uuid.uuid4().hex
        self._expect(request_id)
        yield PermissionAsked(
            request_id=request_id,
            tool="Bash",
            input={"command": command},
            title=f"Run `{command}`",
            reason="The echo agent asks before every command.",
            options=(
                PermissionOption("allow_once", "Allow", "allow_once"),
                PermissionOption("reject_once", "Deny", "reject_once"),
            ),
        )
        decision = await self._wait(request_id)
        if self._cancelled.is_set():
            return
        if isinstance(decision, PermissionDecision) and decision.allow:
            yield ToolStarted(tool_id, "Bash", command, {"command": command})
            yield ToolFinished(tool_id, "completed", f"removed {target}")
            return
        if isinstance(decision, PermissionDecision) and decision.interrupt:
            yield TurnDone(stop_reason="interrupted", usage={"turns": self._turns})
            return
        # The denial's instructions are for the agent; a person reads their own words.
        reason = decision.reason if isinstance(decision, PermissionDecision) else ""
        yield Notice(
            f"Permission denied for `{command}` ({reason or 'no reason'}): not running it."
        )


async def _hand_off(
    peer: str, message: str, tools: TurnTools | None, tool_id: str
) -> AsyncIterator[AgentEvent]:
    """The `delegate` tool call: the peer's answer, or why there is none."""
    yield ToolStarted(tool_id, "delegate", f"Hand to {peer}", {"peer": peer, "message": message})
    if tools is None:
        yield ToolFinished(tool_id, "failed", NO_PERSON_TURN)
        yield Text(f"Could not hand to {peer}: {NO_PERSON_TURN}.\n")
        return
    try:
        answer = await tools.delegate(peer, message)
    except DelegationFailed as exc:
        yield ToolFinished(tool_id, "failed", str(exc))
        yield Text(f"Could not hand to {peer}: {exc}\n")
        return
    yield ToolFinished(tool_id, "completed", answer)
    yield Text(answer)


class EchoBackend:
    name = "echo"
    description = "An offline echo agent that answers with what it was sent."
    skills: tuple[Skill, ...] = (
        Skill(
            id="echo",
            name="Echo",
            description=(
                "Answers with the prompt. The words think, plan, tool, edit, ask, question, "
                "slow N and boom make it emit every kind of agent event; cost:N says the turn "
                "cost N dollars; delegate:PEER hands the rest to another tailagent."
            ),
            tags=("demo", "test"),
            examples=("think plan edit", "ask", "slow 5"),
        ),
    )

    max_sessions: int | None = None
    # Echo has no modes of its own: it takes Claude Code's names (and ignores them), so
    # a demo or a test meets the same rule as the default agent.
    caller_modes: tuple[str, ...] = CLAUDE_CODE

    def __init__(self, workspace: Path | None = None) -> None:
        self.workspace = workspace or Path.cwd()

    async def start(self) -> None:
        return None

    async def open_session(
        self, resume_id: str | None = None, cwd: Path | None = None
    ) -> EchoSession:
        return EchoSession(resume_id or uuid.uuid4().hex, cwd or self.workspace)

    async def aclose(self) -> None:
        return None
