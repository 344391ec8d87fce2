"""Push notifications: one POST per task state change, to every URL the task's
callers registered, signed with the card's key, off the turn's path.

The task store reports each state change; for a task with push configs it lands
in the task's own queue and returns at once, so a slow or dead receiver never
holds up a turn. Which tasks have configs is known here (configs are saved through
this server, or a server sharing the store signals it), so a task without any
costs no database read. One worker per task keeps its notifications in order. A
delivery is retried with backoff on network errors, 5xx, 408 and 429, a bounded
number of times; any other answer is final.

The body is a 1.0 StreamResponse: `statusUpdate` while the task runs or waits,
the whole `task` (without its history) once it ends, so the result arrives with
the last notification. Each POST carries a JWT (header `X-A2A-Notification-Signature`,
and `Authorization: Bearer` unless the config brought credentials of its own) signed
with the card's current key, whose `request_body_sha256` claim binds it to the
body; receivers verify it with the JWKS the card points at.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import logging
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable
from pathlib import Path

import httpx
from a2a.server.context import ServerCallContext
from a2a.server.tasks import PushNotificationConfigStore
from a2a.server.tasks.push_notification_config_store import normalize_push_notification_config
from a2a.types.a2a_pb2 import (
    StreamResponse,
    Task,
    TaskPushNotificationConfig,
    TaskState,
    TaskStatusUpdateEvent,
)
from a2a.utils.errors import InvalidParamsError
from google.protobuf.json_format import MessageToDict

from tailagent.card.publish import JWKS_PATH
from tailagent.config import PushSettings
from tailagent.output.metrics import PUSH_DELIVERIES
from tailagent.store.finality import UNFINISHED_STATES
from tailagent.webhooks.targets import PushRefused, PushTargets, Target

# Opens a2a-sdk's config store on first use; the bridge hands it over at wiring time, so
# push never imports the bridge that sits above it.
ConfigStoreOpener = Callable[[], Awaitable[PushNotificationConfigStore]]

log = logging.getLogger(__name__)

SIGNATURE_HEADER = "X-A2A-Notification-Signature"
TOKEN_HEADER = "X-A2A-Notification-Token"
TOKEN_LIFETIME = 300
# Notifications waiting per task; past it the oldest are dropped (the newest state wins).
MAX_QUEUED = 32
# A worker rereads a task's configs when this old; a change made here counts at once, one
# made on another server sharing the store within this.
CONFIGS_MAX_AGE = 1.0
_RETRY_STATUSES = {408, 429}
START_DELAY = 0.05
_RUNNING = (TaskState.TASK_STATE_SUBMITTED, TaskState.TASK_STATE_WORKING)


def payload(task: Task) -> bytes:
    """The body for a task in its new state, serialised once so the signed hash is exact."""
    if task.status.state in UNFINISHED_STATES:
        response = StreamResponse(
            status_update=TaskStatusUpdateEvent(
                task_id=task.id, context_id=task.context_id, status=task.status
            )
        )
    else:
        final = Task()
        final.CopyFrom(task)
        del final.history[:]
        response = StreamResponse(task=final)
    return json.dumps(MessageToDict(response), separators=(",", ":")).encode()


class PushSigner:
    """Signs each notification with the card's key. The key and the libraries that
    use it are loaded at the first delivery: a server at rest holds neither."""

    def __init__(self, state_dir: Path, issuer: str) -> None:
        self._state_dir = state_dir
        self._issuer = issuer

    def sign(self, url: str, task_id: str, body: bytes) -> str:
        import jwt

        from tailagent.card.keys import KeyStore

        key = KeyStore(self._state_dir).current()  # read per delivery: a rotation applies at once
        now = int(time.time())
        claims = {
            "iss": self._issuer,
            "aud": url,
            "iat": now,
            "exp": now + TOKEN_LIFETIME,
            "jti": uuid.uuid4().hex,
            "task_id": task_id,
            "request_body_sha256": hashlib.sha256(body).hexdigest(),
        }
        headers = {"kid": key.kid, "jku": self._issuer + JWKS_PATH, "typ": "JWT"}
        return jwt.encode(claims, key.key, algorithm=key.alg, headers=headers)  # type: ignore[arg-type]


class PushConfigs(PushNotificationConfigStore):
    """a2a-sdk's config store (opened on the first request about push configs), telling
    the dispatcher when a task's configs change, and holding at most `per_task` configs
    for a task: each state change is one signed POST to each. Unbounded, one task took
    2,000, and at 500 one cancel made 1,500 attempts over 24 s, none of which arrived
    (all waited out the server's own connection pool). Both ways of making a config
    come here: CreateTaskPushNotificationConfig and a config sent with a message."""

    def __init__(
        self, open_store: ConfigStoreOpener, dispatcher: PushDispatcher, per_task: int
    ) -> None:
        self._open_store = open_store
        self._dispatcher = dispatcher
        self._per_task = per_task
        # Counting a task's configs and saving one more are one step on this server.
        self._saving = asyncio.Lock()

    async def set_info(
        self,
        task_id: str,
        notification_config: TaskPushNotificationConfig,
        context: ServerCallContext,
    ) -> TaskPushNotificationConfig | None:
        store = await self._open_store()
        async with self._saving:
            held = {c.id for c in await store.get_info_for_dispatch(task_id)}
            config_id = normalize_push_notification_config(task_id, notification_config).id
            if config_id not in held and len(held) >= self._per_task:
                raise InvalidParamsError(
                    message=(
                        f"Task {task_id} has {len(held)} push notification configs, as many "
                        f"as one task may (push.max_configs_per_task = {self._per_task}): "
                        "delete one, or send this one with the id of one it replaces"
                    )
                )
            stored = await store.set_info(task_id, notification_config, context)
        self._dispatcher.watch(task_id)
        return stored

    async def get_info(
        self, task_id: str, context: ServerCallContext
    ) -> list[TaskPushNotificationConfig]:
        return await (await self._open_store()).get_info(task_id, context)

    async def get_info_for_dispatch(self, task_id: str) -> list[TaskPushNotificationConfig]:
        return await (await self._open_store()).get_info_for_dispatch(task_id)

    async def delete_info(
        self, task_id: str, context: ServerCallContext, config_id: str | None = None
    ) -> None:
        await (await self._open_store()).delete_info(task_id, context, config_id)
        self._dispatcher.forget_configs(task_id)


class PushDispatcher:
    def __init__(
        self,
        open_store: ConfigStoreOpener,
        targets: PushTargets,
        signer: PushSigner,
        policy: PushSettings,
        tailnet_proxy: str | None = None,
    ) -> None:
        """`open_store`: opens a2a-sdk's push config store (the bridge's, on first use).
        `tailnet_proxy`: the embedded node's SOCKS5 proxy, through which tailnet
        targets are reached (None: the host's network reaches the tailnet)."""
        self.configs = PushConfigs(open_store, self, policy.max_configs_per_task)
        self._targets = targets
        self._signer = signer
        self._policy = policy
        self._tailnet_proxy = tailnet_proxy
        # Made at the first delivery: a client loads the CA bundle (~30 ms of CPU each),
        # which a server whose tasks have no push config never needs.
        self._clients: tuple[httpx.AsyncClient, httpx.AsyncClient] | None = None
        self._queues: dict[str, deque[Task]] = {}
        self._workers: dict[str, asyncio.Task[None]] = {}
        # Unfinished tasks with push configs (or that may have some: see watch()).
        self._watched: set[str] = set()
        # task id -> when its configs were last read, and what they were (a change
        # made here forgets them).
        self._configs_read: dict[str, tuple[float, list[TaskPushNotificationConfig]]] = {}

    def watch(self, task_id: str) -> None:
        """From now on the task's state changes are delivered to its configs."""
        self._watched.add(task_id)
        self.forget_configs(task_id)

    def forget_configs(self, task_id: str) -> None:
        """The task's configs changed: its next notification reads them again."""
        self._configs_read.pop(task_id, None)

    def task_changed(self, task: Task) -> None:
        """Queues a notification for the task's new state; never waits."""
        if task.id not in self._watched:
            return
        if task.status.state not in UNFINISHED_STATES:
            self._watched.discard(task.id)  # its last notification
        queue = self._queues.setdefault(task.id, deque())
        if len(queue) >= MAX_QUEUED:
            queue.popleft()
            log.warning("push notifications for task %s are falling behind; dropped one", task.id)
        queue.append(task)
        if task.id not in self._workers:
            self._workers[task.id] = asyncio.create_task(
                self._drain(task.id), name=f"push:{task.id}"
            )

    async def _drain(self, task_id: str) -> None:
        queue = self._queues[task_id]
        loop = asyncio.get_running_loop()
        try:
            if queue[0].status.state in _RUNNING:
                # A task that just started is often done within moments: its
                # notifications then go out after its response, not during it.
                await asyncio.sleep(START_DELAY)
            while queue:
                task = queue.popleft()
                read_at, configs = self._configs_read.get(task_id, (None, []))
                if read_at is None or loop.time() - read_at > CONFIGS_MAX_AGE:
                    try:
                        configs = await self.configs.get_info_for_dispatch(task_id)
                    except Exception:
                        log.exception("reading the push configs of task %s", task_id)
                        continue
                    self._configs_read[task_id] = (loop.time(), configs)
                if configs:
                    body = payload(task)
                    await asyncio.gather(*(self._deliver(c, task_id, body) for c in configs))
        finally:
            del self._queues[task_id], self._workers[task_id]
            if task_id not in self._watched:  # its last notification is out
                self._configs_read.pop(task_id, None)

    async def _deliver(self, config: TaskPushNotificationConfig, task_id: str, body: bytes) -> None:
        try:
            target = await self._targets.resolve(config.url)
        except PushRefused as exc:
            PUSH_DELIVERIES.labels("refused").inc()
            log.warning("push for task %s not sent: %s", task_id, exc)
            return
        delay = self._policy.retry_delay  # doubled after each failed attempt
        for attempt in range(1, self._policy.attempts + 1):
            outcome = await self._post(target, config, task_id, body)
            if outcome is None:
                PUSH_DELIVERIES.labels("delivered").inc()
                return
            retry, why = outcome
            if not retry or attempt == self._policy.attempts:
                PUSH_DELIVERIES.labels("failed").inc()
                log.warning(
                    "push for task %s to %s failed after %d attempt(s): %s",
                    task_id, config.url, attempt, why,
                )  # fmt: skip
                return
            await asyncio.sleep(delay)
            delay *= 2

    async def _post(
        self, target: Target, config: TaskPushNotificationConfig, task_id: str, body: bytes
    ) -> tuple[bool, str] | None:
        """None when delivered, else (worth retrying, why not)."""
        token = self._signer.sign(config.url, task_id, body)
        headers = {"Content-Type": "application/json", SIGNATURE_HEADER: token}
        if config.token:
            headers[TOKEN_HEADER] = config.token
        auth = config.authentication
        if config.HasField("authentication") and auth.scheme and auth.credentials:
            headers["Authorization"] = f"{auth.scheme} {auth.credentials}"
        else:
            headers["Authorization"] = f"Bearer {token}"
        url = httpx.URL(config.url)
        extensions = {}
        http, tailnet_http = self._http_clients()
        if target.address is not None:
            http = tailnet_http
            # Connect to the address that was checked; the Host header and TLS name
            # stay the URL's own.
            headers["Host"] = url.netloc.decode()
            url = url.copy_with(host=target.address)
            if url.scheme == "https":
                extensions["sni_hostname"] = target.host
        try:
            response = await http.post(url, content=body, headers=headers, extensions=extensions)
        except httpx.HTTPError as exc:
            return True, f"{type(exc).__name__}: {exc}"
        if response.status_code < 300:
            return None
        retry = response.status_code >= 500 or response.status_code in _RETRY_STATUSES
        return retry, f"HTTP {response.status_code}"

    async def aclose(self, grace: float = 2.0) -> None:
        """Gives queued notifications (a stop's own last states among them) a moment,
        then gives up on the rest."""
        workers = list(self._workers.values())
        if workers:
            _, late = await asyncio.wait(workers, timeout=grace)
            for worker in late:
                worker.cancel()
            for worker in late:
                with contextlib.suppress(BaseException):
                    await worker
        if self._clients is not None:
            for client in set(self._clients):
                await client.aclose()

    def _http_clients(self) -> tuple[httpx.AsyncClient, httpx.AsyncClient]:
        """The client for addresses the host's network reaches, and the one for tailnet
        addresses (the same one, unless an embedded node's proxy is the way there)."""
        if self._clients is None:
            http = httpx.AsyncClient(timeout=self._policy.timeout, follow_redirects=False)
            tailnet_http = http
            if self._tailnet_proxy is not None:
                tailnet_http = httpx.AsyncClient(
                    timeout=self._policy.timeout,
                    follow_redirects=False,
                    proxy=self._tailnet_proxy,
                )
            self._clients = (http, tailnet_http)
        return self._clients
