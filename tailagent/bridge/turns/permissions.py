"""Permission prompts decided without a person, and the audit row every decision gets.

The tool rules allow or deny a request before anyone is asked; loop protection ends a
turn whose agent asks again for what was denied (or is denied too often). Both change
with the rules and their audit, not with how turns start, stream or are answered, and
the answer and cancel paths write their rows through the same `record`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from pathlib import Path

from a2a.server.tasks import TaskUpdater

from tailagent.agents.events import Notice, PermissionAsked, PermissionDecision, QuestionAsked
from tailagent.bridge.answers.reading import deny_message
from tailagent.bridge.answers.waiting import Waiting
from tailagent.bridge.rules.matching import first_match
from tailagent.bridge.turns.runtime import DRAIN_TIMEOUT, Runtimes, TaskRuntime, log
from tailagent.config.tool_rules import Rule
from tailagent.cost.ledger import person_of
from tailagent.output.metrics import DECISIONS, caller_label
from tailagent.sandbox.fences import FenceReport
from tailagent.store.audit import AuditEntry, AuditLog, summarize


def request_key(event: PermissionAsked) -> str:
    return event.tool + " " + json.dumps(event.input, sort_keys=True, ensure_ascii=False)


class PermissionDecisions:
    def __init__(
        self,
        audit: AuditLog,
        rules: tuple[Rule, ...],
        workspace: Path,
        runtimes: Runtimes,
        fence: FenceReport | None = None,
    ) -> None:
        # How the step ran if allowed, on every row: "sandbox on, network on".
        self._fence = fence.words() if fence else ""
        self._audit = audit
        self._rules = rules
        self._workspace = workspace
        self._runtimes = runtimes

    async def record(
        self,
        task: TaskRuntime | Waiting,
        asked: PermissionAsked,
        allow: bool,
        reason: str,
        by: str,
        label: str,
    ) -> None:
        """Writes the audit row; `label` is the decider's owner name, or "tailagent" for
        the rules. On /metrics a person is named as in the cost labels (their login, the
        first 100 people, then "other"): one label per person would grow without bound."""
        named = label if label == "tailagent" else caller_label(person_of(label))
        DECISIONS.labels("allow" if allow else "deny", named).inc()
        entry = AuditEntry(
            task_id=task.task_id,
            context_id=task.context_id,
            tool=asked.tool,
            input=summarize(asked.input),
            decision="allow" if allow else "deny",
            reason=reason,
            answered_by=by,
            fence=self._fence,
        )
        try:
            await self._audit.record(entry)
        except Exception:
            log.exception("writing the audit log")

    async def apply_rule(
        self, runtime: TaskRuntime, event: PermissionAsked, updater: TaskUpdater
    ) -> bool:
        """Decides by the first matching rule; False when the caller must be asked.
        A prompt relayed from another box is always the person's to answer: the rules
        here speak for this box's agent, not for what a peer's agent does there."""
        if event.relayed_from:
            return False
        root = runtime.directory or self._workspace  # where the agent's relative paths start
        # Off the loop: it resolves paths on disk, and a long command takes a while to read.
        rules, roles = self._rules, runtime.roles
        rule = await asyncio.to_thread(first_match, rules, event, roles, root) if rules else None
        if rule is None or rule.decision == "ask":
            return False
        allow = rule.decision == "allow"
        by = f"tailagent ({rule.describe()})"
        if allow and runtime.turn is not None:
            runtime.turn.approvals.append(f"{by}: {event.tool}")
        await self.record(runtime, event, allow, rule.describe(), by, "tailagent")
        wanted = "allow" if allow else "reject"
        option = next((o.id for o in event.options if o.kind.startswith(wanted)), None)
        if allow:
            decision = PermissionDecision(True, option)
        else:
            runtime.denied.add(request_key(event))  # asked again, loop protection ends it
            why = f"denied by {rule.describe()}"
            decision = PermissionDecision(False, option, deny_message(why), reason=why)
        verdict = "Allowed" if allow else "Denied"
        await runtime.publisher.publish(
            updater, Notice(f"{verdict} by {rule.describe()}: {event.title}")
        )
        await runtime.session.answer(event.request_id, decision)
        return True

    async def interrupt(
        self,
        runtime: TaskRuntime,
        pending: PermissionAsked,
        reason: str,
        why: str,
        updater: TaskUpdater,
    ) -> None:
        """Denies with interrupt, lets the agent wind down unheard, then fails once, saying why."""
        option = next((o.id for o in pending.options if not o.allows), None)
        decision = PermissionDecision(
            False, option, deny_message(reason), interrupt=True, reason=reason
        )
        with contextlib.suppress(Exception):
            await runtime.session.answer(pending.request_id, decision)
        try:
            async with asyncio.timeout(DRAIN_TIMEOUT):
                async for event in runtime.events:
                    if isinstance(event, PermissionAsked | QuestionAsked):
                        await runtime.session.answer(event.request_id, decision)
        except (TimeoutError, Exception):
            log.warning("task %s: agent did not stop after an interrupt", runtime.task_id)
            with contextlib.suppress(Exception):
                await runtime.session.cancel()
        await self._runtimes.end(runtime)
        await runtime.publisher.fail(updater, why, kind="loop_protection")
