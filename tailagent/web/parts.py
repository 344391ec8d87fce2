"""What the desk uses of the running server, handed over when the page is mounted."""

from __future__ import annotations

from dataclasses import dataclass

from tailagent.bridge.conversations.workplace import Conversations
from tailagent.bridge.requests.handler import GuardedRequestHandler
from tailagent.cluster.carry import Carrier
from tailagent.sandbox.fences import FenceReport
from tailagent.store.tasks import CoalescingTaskStore
from tailagent.web.sessions import BrowserSessions
from tailagent.web.views.live import Desk
from tailagent.webpush.service import WebPush


@dataclass(frozen=True)
class DeskParts:
    store: CoalescingTaskStore
    handler: GuardedRequestHandler
    desk: Desk
    sessions: BrowserSessions
    secret: bytes
    workspace: str
    webpush: WebPush
    conversations: Conversations  # where each conversation works (its worktree)
    # How agents are fenced (Sandbox.report): the header says so when they are not.
    fence: FenceReport | None = None
    # How a person's answer to another box's task gets there (None: alone on the store).
    carrier: Carrier | None = None
