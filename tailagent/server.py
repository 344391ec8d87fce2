"""Starts one server: takes the state dir, binds the listener, joins the tailnet,
wires the rooms together (build_service), serves until a signal, and closes
everything in order. Each room lives in its own module: the app (app.py), the
store (store/opening.py), the listener (listening/listener.py), Hypercorn
(listening/serving.py)."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import socket
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, cast
from urllib.parse import urlsplit

from a2a.types.a2a_pb2 import Task
from hypercorn.asyncio import serve

from tailagent.access.forwarding import shared_forwarder
from tailagent.access.logline import AccessLog
from tailagent.agents.events import AgentBackend, AgentStartError
from tailagent.agents.registry import (
    agent_kind,
    agent_label,
    agent_named,
    agent_programs,
    make_backend,
    tools_wanted,
)
from tailagent.app import build_app
from tailagent.bridge.answers.waiting import can_wait
from tailagent.bridge.conversations.sessions import SessionPool
from tailagent.bridge.conversations.workplace import Conversations, Isolated, Shared, choose
from tailagent.bridge.requests.handler import GuardedRequestHandler
from tailagent.bridge.turns.executor import BridgeExecutor
from tailagent.card.builder import build_card
from tailagent.card.publish import CardPublisher, CardSigningFailed
from tailagent.cluster.boxes import BoxTable
from tailagent.cluster.placement import Placement
from tailagent.config import Settings, default_state_dir
from tailagent.cost.budgets import Spending
from tailagent.cost.ledger import Usage
from tailagent.cost.reserves import Reserves
from tailagent.delegation.directory import PeerDirectory
from tailagent.delegation.node_keys import KNOWN_NODES_FILE, CardPins, KnownNodes
from tailagent.delegation.outbound import DelegatorFactory
from tailagent.delegation.tool_socket import ToolSockets
from tailagent.listening.listener import listener_url, open_listener
from tailagent.listening.probe import healthy
from tailagent.listening.serving import hypercorn_config
from tailagent.mends.versions import say_refused
from tailagent.output.metrics import AGENT_PROCESSES, AGENT_SESSIONS_HELD, SANDBOX_PROXY_REFUSED
from tailagent.process.descriptors import raise_open_files_limit
from tailagent.process.memory import trim_when_quiet
from tailagent.process.sd_notify import Notifier
from tailagent.sandbox.bwrap import SandboxUnavailable
from tailagent.sandbox.fences import FenceReport, Sandbox
from tailagent.statedir.files import NotPrivate, close_dir
from tailagent.statedir.lock import StateDirBusy, StateLock
from tailagent.store.database import StoreUnavailable, open_database, redacted
from tailagent.store.opening import STOP_MESSAGE, Storage, open_storage, server_id
from tailagent.store.sdk_stores import SdkStores
from tailagent.store.signals import CANCEL, PUSH
from tailagent.tailnet.localapi import LocalAPIUnavailable, self_dns_name
from tailagent.tailnet.presence import BoxTailscaled, Presence, PresenceError, ServeEntryPresence
from tailagent.web.sessions import load_secret
from tailagent.web.views.live import Desk
from tailagent.web.views.siblings import follow_siblings
from tailagent.webhooks.delivery import PushDispatcher, PushSigner
from tailagent.webhooks.targets import PushTargets
from tailagent.webpush.service import WebPush
from tailagent.workspace.git import GitError, git

log = logging.getLogger("tailagent")


@dataclass
class Service:
    """Everything one running server owns, so it can all be closed in order."""

    app: AccessLog
    executor: BridgeExecutor
    handler: GuardedRequestHandler
    storage: Storage
    pool: SessionPool
    backend: AgentBackend
    push: PushDispatcher
    signal_watch: asyncio.Task[None] | None
    conversations: Conversations
    webpush: WebPush
    desk: Desk
    sandbox: Sandbox
    tool_sockets: ToolSockets | None  # an ACP agent's doors to tailagent's own tools

    async def drain(self, seconds: float) -> None:
        """A box with siblings, stopping: new conversations go to them from now, and the
        working turns get `seconds` to end and be written (those waiting for an answer
        wait on, as at any stop)."""
        placement = self.handler.placement
        if placement is None:
            return
        await placement.drain()
        log.info("draining: no new conversations here; working turns may end within %g s",
                 seconds)  # fmt: skip
        deadline = asyncio.get_running_loop().time() + seconds
        await self.executor.drained(seconds)
        while len(self.storage.tasks.held()) > self.executor.waiting:
            if asyncio.get_running_loop().time() >= deadline:
                return
            await asyncio.sleep(0.05)

    async def stop_turns(self) -> int:
        """Ends every running turn and every unfinished task the next start could not
        take back, saying the server stopped; returns how many tasks it ended (a turn
        that did not settle in time is ended by the store: counted once)."""
        streamed = await self.executor.stop_all(STOP_MESSAGE)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2.0):
                await self.storage.tasks.settled(streamed)
        await self.handler.aclose()
        return len({*streamed, *await self.storage.close_unfinished(STOP_MESSAGE)})

    async def aclose(self) -> None:
        if self.handler.placement is not None:
            await self.handler.placement.leave()
        if self.signal_watch is not None:
            self.signal_watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.signal_watch
        await self.handler.aclose()
        await self.storage.flush()
        await self.push.aclose()
        await self.webpush.aclose()
        await self.pool.aclose()
        await self.backend.aclose()
        if self.tool_sockets is not None:
            self.tool_sockets.close()  # the sessions closed theirs: now their folders
        await self.sandbox.aclose()
        await self.conversations.aclose()
        await self.storage.aclose()


def make_presence(settings: Settings) -> Presence:
    """The way onto the tailnet the settings ask for."""
    if settings.tsnet.enabled:
        from tailagent.tailnet.tsnet.node import EmbeddedNode  # Go's runtime, only when asked for

        return EmbeddedNode(settings)
    if settings.tailnet or settings.tailnet_service:
        return ServeEntryPresence(settings)
    return BoxTailscaled(settings)


async def build_service(settings: Settings, presence: Presence) -> Service:
    """Wires the rooms together, in the order each needs the ones before it."""
    workspace = settings.workspace
    conversations = await choose(workspace, settings.cwd, settings.state_dir)
    isolated = conversations if isinstance(conversations, Isolated) else None
    sandbox = make_sandbox(settings, isolated)
    if isolated is not None:
        isolated.before_turn = sandbox.hand_over
    tool_sockets = ToolSockets() if tools_wanted(settings) else None  # made on first use
    backend = make_backend(
        settings, isolated.spare_directory if isolated else None, sandbox, tool_sockets
    )
    database = open_database(settings.store_url)
    await database.check()
    sdk = SdkStores(database)
    publisher = CardPublisher(
        backend, settings.advertised_url, settings.name, settings.state_dir,
        settings.card_lists_0_3, settings.own_url,
    )  # fmt: skip
    # Signed in a child process, on the other core while the rest is set up.
    signing = asyncio.create_task(publisher.refresh(), name="card-signing")
    try:
        push_targets = PushTargets(presence.localapi, settings.push.allowed_hosts)
        signer = PushSigner(settings.state_dir, settings.advertised_url)
        push = PushDispatcher(
            sdk.push_configs, push_targets, signer, settings.push, presence.tailnet_proxy
        )
        desk = Desk(lambda task_id: storage.tasks.with_owner(task_id))
        webpush = open_webpush(settings)
        webpush.start()

        def saved(task: Task, owner: str) -> None:
            desk.saved(task, owner)
            webpush.alerts.saved(task, owner)

        storage = await open_storage(settings, database, sdk, can_wait, push.task_changed, saved)
        usage = Usage(database)  # what each person's work cost, kept beside the tasks
        await usage.initialize()
        for task in storage.closed:
            push.watch(task.id)  # a push config may wait for this last state
            push.task_changed(task)
        pool = _open_pool(settings, backend, storage)
        await _start_agent(settings, conversations, backend, storage, sandbox)
        # What admitted turns hold of budgets (the previous run's holds go, with its turns).
        reserves = Reserves(database, server_id(settings.state_dir))
        await reserves.initialize()
        spending = Spending(usage, settings.budgets, reserves)
        delegators = _make_delegators(settings, presence, storage, usage)
        executor = _make_executor(
            settings, backend, pool, storage, conversations, spending, sandbox.report(),
            delegators,
        )  # fmt: skip
        _restore_waiting(executor, storage, desk, webpush)
        handler = _make_handler(
            settings, backend, executor, storage, pool, push, push_targets, conversations, spending
        )
        delegators.withdraw = handler.withdraw_relayed
        await signing
        app = build_app(
            settings, presence, handler, storage.tasks, desk, webpush, publisher, conversations,
            sandbox.report(), storage.database,
        )  # fmt: skip
        signal_watch = _watch_signals(settings, storage, handler, push)
        return Service(
            app, executor, handler, storage, pool, backend, push, signal_watch, conversations,
            webpush, desk, sandbox, tool_sockets,
        )  # fmt: skip
    except BaseException:
        # A start that fails leaves no signer behind (it would wait on its stdin).
        signing.cancel()
        await asyncio.gather(signing, return_exceptions=True)
        if tool_sockets is not None:
            tool_sockets.close()  # nor a folder in the runtime directory
        raise


def _open_pool(settings: Settings, backend: AgentBackend, storage: Storage) -> SessionPool:
    """The agent processes, held per conversation and counted in /metrics."""
    pool = SessionPool(
        backend,
        storage.session_map,
        idle_timeout=settings.agent_process.idle_timeout,
        per_caller=settings.agent_process.max_processes_per_caller,
    )
    AGENT_PROCESSES.set_function(lambda: pool.live)
    AGENT_SESSIONS_HELD.set_function(lambda: pool.held)
    return pool


def make_sandbox(settings: Settings, isolated: Isolated | None) -> Sandbox:
    """The fence every agent process starts in: around a conversation's own repository
    when each has one (the base checkout then hidden, but for the objects they borrow),
    else around the workspace; hiding the server's and tailscaled's sockets and showing
    the agent's own programs wherever they live."""
    sockets = [settings.listen.path] if settings.listen.path is not None else []
    if settings.tailscale.socket is not None:
        sockets.append(settings.tailscale.socket)
    return Sandbox(
        settings.sandbox,
        agent=agent_kind(settings),
        state_dir=settings.state_dir,
        base=settings.cwd if isolated is not None else None,
        shared_objects=isolated.worktrees.shared_objects if isolated is not None else None,
        sockets=sockets,
        programs=agent_programs(settings),
        runs_processes=agent_kind(settings) != "echo",
    )


async def git_identity(workspace: Path) -> tuple[str, str]:
    """The person's git name and email, as their checkout's git reads them (empty where
    unset, or where git is missing): what a fenced agent's own commits carry."""
    said = []
    for key in ("user.name", "user.email"):
        try:
            said.append((await git(workspace, "config", "--get", key, ok=(0, 1))).out.strip())
        except GitError:
            said.append("")
    return said[0], said[1]


async def _start_agent(
    settings: Settings,
    conversations: Isolated | Shared,
    backend: AgentBackend,
    storage: Storage,
    sandbox: Sandbox,
) -> None:
    """Starts the agent backend once the worktrees of conversations that no longer exist
    are pruned (a spare agent may start in a worktree), and once a fence can be made
    around it; says how conversations are kept apart and fenced."""
    if sandbox.on:
        sandbox.give_identity(*await git_identity(settings.cwd))
    try:
        await sandbox.start()
    except SandboxUnavailable as exc:
        raise AgentStartError(f"cannot fence the agent: {exc}") from None
    SANDBOX_PROXY_REFUSED.set_function(sandbox.proxy_refusals)
    pruned = []
    if isinstance(conversations, Isolated):
        # Whose each conversation is: a branch's name is unique among its owner's only.
        conversations.worktrees.know_owners(storage.owners.owner)
        pruned = await conversations.worktrees.prune(await storage.contexts())
    await backend.start()  # after the pruning: a spare agent may start in a worktree
    if sandbox.on or not sandbox.needed:
        log.info("sandbox: %s", sandbox.describe())
    else:
        log.warning("sandbox: %s", sandbox.describe())
    shared = not isinstance(conversations, Isolated)
    if sandbox.on and sandbox.users.enabled and shared and settings.cwd.stat().st_uid == 0:
        log.warning("sandbox: agents work in %s itself (isolation shared), which root "
                        "owns: they run as root there; with --isolation repository each "
                        "conversation's agent is a uid of its own", settings.cwd)  # fmt: skip
    if isinstance(conversations, Isolated):
        conversations.start()
        log.info(
            "isolation: each conversation in a repository and branch of its own, from %s "
            "(merged back only on request: tailagent merge CONTEXT)%s",
            settings.cwd,
            f"; pruned {len(pruned)} left by conversations that no longer exist" if pruned else "",
        )
    else:
        log.info("isolation: shared, every conversation works in %s (%s)", settings.cwd,
                 conversations.why)  # fmt: skip


def _make_executor(
    settings: Settings,
    backend: AgentBackend,
    pool: SessionPool,
    storage: Storage,
    conversations: Isolated | Shared,
    spending: Spending,
    fence: FenceReport,
    delegators: DelegatorFactory,
) -> BridgeExecutor:
    """The bridge that runs turns; Claude's own denial limit wins over the general one."""
    denials = settings.max_permission_denials
    if settings.agent == "claude" and settings.claude.max_permission_denials:
        denials = settings.claude.max_permission_denials
    return BridgeExecutor(
        backend,
        pool,
        storage.audit,
        conversations=conversations,
        max_permission_denials=denials,
        rules=settings.rules,
        workspace=settings.cwd,
        attachment_settings=settings.attachments,
        spending=spending,
        fence=fence,
        delegators=delegators,
        events=storage.events if settings.events_kept else None,
    )


def _make_delegators(
    settings: Settings, presence: Presence, storage: Storage, usage: Usage
) -> DelegatorFactory:
    """What a person's turns hand work to other tailagents with: the tailnet's peers
    whose cards verify against the keys pinned in known_nodes.json (the same pins the
    chains peers send here are checked against), reached through the configured proxy
    or this node's own."""
    delegation = settings.delegation
    proxy = delegation.proxy or presence.tailnet_proxy
    known = CardPins(KnownNodes(settings.state_dir / KNOWN_NODES_FILE))
    directory = PeerDirectory(presence.localapi, known, delegation.scheme, delegation.port, proxy)
    return DelegatorFactory(
        settings, directory, storage.delegations, usage, presence.localapi, presence.tailnet_proxy
    )


def _restore_waiting(
    executor: BridgeExecutor, storage: Storage, desk: Desk, webpush: WebPush
) -> None:
    """The tasks that waited for an answer across the restart wait on, here and on the
    desk."""
    executor.restore([task for task, _ in storage.waiting])
    for task, owner in storage.waiting:
        desk.saved(task, owner)  # the page's "waiting for you" knows them again
        webpush.alerts.remember(task)  # told before the restart, not again


def _make_handler(
    settings: Settings,
    backend: AgentBackend,
    executor: BridgeExecutor,
    storage: Storage,
    pool: SessionPool,
    push: PushDispatcher,
    push_targets: PushTargets,
    conversations: Isolated | Shared,
    spending: Spending,
) -> GuardedRequestHandler:
    """The A2A request handler, with the cards it serves."""
    card = build_card(backend, settings.advertised_url, settings.name, legacy=False)
    # The extended card lists the 0.3 interfaces too: a 0.3 client's request for it
    # is answered through a conversion that needs one.
    extended = build_card(backend, settings.advertised_url, settings.name, legacy=True)
    return GuardedRequestHandler(
        executor, storage.tasks, card, extended, pool=pool, push_configs=push.configs,
        push_targets=push_targets, signals=storage.signals, rules=settings.rules,
        attachment_limits=settings.attachments,
        max_concurrent_turns=settings.agent_process.max_concurrent_turns,
        conversations=conversations, owners=storage.owners,
        max_worktrees_per_caller=settings.workspace.max_worktrees_per_caller,
        spending=spending, audit=storage.audit,
        events=storage.events if settings.events_kept else None,
        placement=_placement(settings, storage, pool),
    )  # fmt: skip


def _placement(settings: Settings, storage: Storage, pool: SessionPool) -> Placement | None:
    """Where new conversations start, for a box with siblings on a shared store."""
    if settings.store is None or not settings.delegation.siblings:
        return None
    return Placement(
        BoxTable(storage.database), server_id(settings.state_dir), settings.own_url,
        settings.agent_process.max_processes, lambda: pool.held, storage.fail_working_of,
    )  # fmt: skip


def _watch_signals(
    settings: Settings, storage: Storage, handler: GuardedRequestHandler, push: PushDispatcher
) -> asyncio.Task[None] | None:
    """Cancels and push watches asked for by another server sharing the store; alone,
    there is nothing to poll for."""
    if settings.store is None:
        return None

    async def start_pushing(task_id: str, _owner: str) -> None:
        push.watch(task_id)

    return asyncio.create_task(
        storage.signals.watch(
            storage.tasks.held, {CANCEL: handler.cancel_for_peer, PUSH: start_pushing}
        ),
        name="task-signals",
    )


def open_webpush(settings: Settings) -> WebPush:
    """The desk's Web Push, naming this box as its people call it."""
    host = urlsplit(settings.advertised_url).hostname or ""
    local = not host or host == "localhost" or host.replace(".", "").isdigit() or ":" in host
    box = socket.gethostname().split(".")[0] if local else host.split(".")[0]
    https = settings.advertised_url.startswith("https://")
    return WebPush(
        settings.state_dir,
        load_secret(settings.state_dir),
        services=settings.desk.push_services,
        ttl=settings.desk.push_ttl,
        # RFC 8292's contact: the push service's way to reach whoever sends.
        contact=f"https://{host}" if https else "mailto:tailagent@localhost",
        box=box,
        agent=agent_label(settings),
    )


async def next_steps(settings: Settings, presence: Presence, where: str) -> list[str]:
    """What a person who just started the server can do now: call it from this box,
    and whether (and how) callers on the tailnet get in."""
    state = (
        "" if settings.state_dir == default_state_dir() else f" --state-dir {settings.state_dir}"
    )
    lines = [f"on this box: tailagent call hello{state}   (it sends the local token)"]
    if where.startswith("http"):
        lines.append(f"the approval desk: {where}/desk/ (sign in here with `tailagent web{state}`)")
    known = presence.callers_line()
    if known is not None:
        return [*lines, known]
    try:
        status = await presence.localapi.status()
    except LocalAPIUnavailable:
        lines.append(
            f"no tailscaled ({presence.localapi.where}): only local callers with a token get in; "
            "start tailscaled, or join as a node of its own with --tsnet"
        )
        return lines
    name = self_dns_name(status) or "this node"
    if status.get("BackendState") != "Running":
        lines.append(f"tailscaled is {status.get('BackendState')}: log this node in first")
    else:
        lines.append(
            f"on the tailnet ({name}): `tailscale serve --bg {where}`, "
            "or restart with --tailnet to have tailagent set that up"
        )
    return lines


async def _leave(presence: Presence) -> None:
    try:
        await presence.stop()
    except PresenceError as exc:
        log.warning("%s", exc)


class StartError(Exception):
    """The server cannot start; str() is the one line that says why, `exit_code` what
    `tailagent serve` exits with (2, as for a config error, when a setting must change)."""

    def __init__(self, line: str, exit_code: int = 1) -> None:
        super().__init__(line)
        self.exit_code = exit_code


def _count(count: int, noun: str) -> str:
    return f"{count} {noun}" if count == 1 else f"{count} {noun}s"


def stopped_line(ended: int, waiting: int) -> str:
    """What the stop did to the tasks: the unfinished ones ended, the ones waiting for an
    answer kept (a person may still answer them after the next start)."""
    line = f"stopping: {_count(ended, 'unfinished task')} ended"
    if waiting:
        line += f"; {_count(waiting, 'task')} waiting for an answer will wait on for the next start"
    return line


async def _announce_ready(notifier: Notifier, where: str, what: str) -> None:
    """READY=1 once a request really gets an answer, not merely once the socket exists.
    `where` is the bound listener itself (not the advertised URL, which may be the
    tailnet's)."""
    while True:
        if await healthy(where):
            notifier.ready(what)
            return
        await asyncio.sleep(0.05)


async def run(settings: Settings) -> None:
    notifier = Notifier()
    notifier.status("starting")
    say_refused(log)
    raise_open_files_limit()
    lock = StateLock(settings.state_dir)
    try:
        closed = close_dir(settings.state_dir)
        lock.acquire()
    except NotPrivate as exc:
        raise StartError(str(exc), exit_code=2) from None
    except StateDirBusy as exc:
        raise StartError(str(exc)) from None
    except OSError as exc:
        raise StartError(
            f"cannot use the state dir {settings.state_dir}: {exc.strerror} (give tailagent "
            "a directory its user can write: --state-dir)"
        ) from None
    if closed:
        log.warning(
            "the state dir %s was open to other users; closed: %s",
            settings.state_dir, ", ".join(closed),
        )  # fmt: skip
    try:
        await _run_locked(settings, notifier, lock)
    finally:
        lock.release()


async def _run_locked(settings: Settings, notifier: Notifier, lock: StateLock) -> None:
    try:
        sock = open_listener(settings.listen)
    except OSError as exc:
        raise StartError(f"cannot listen on {settings.listen.bind()}: {exc.strerror}") from None
    where = listener_url(sock, settings.listen)
    lock.describe(where, settings.agent_command or settings.agent, settings.tsnet.enabled)
    presence = make_presence(settings)
    settings, service = await _join_and_build(settings, presence, sock, where)
    config = hypercorn_config(sock)
    stop = asyncio.Event()
    _stop_on_signals(service, notifier, stop, settings.drain_seconds)
    say_refused(log)  # those decided while the agent's side was built (ACP's)
    log.info(
        "serving on %s (agent %s, workspace %s, state %s, store %s)",
        where,
        agent_named(settings),
        settings.cwd,
        settings.state_dir,
        redacted(settings.store_url),
    )
    for line in await next_steps(settings, presence, where):
        log.info("%s", line)
    # tailscaled as the service user: any process of it could forge X-Forwarded-For.
    shared = shared_forwarder(presence.localapi.socket_path)
    if shared is not None and presence.trusts_forwarding:
        log.warning("%s", shared.line())
    background = _background(settings, notifier, service, where)
    try:
        # The guard is ASGI over plain dicts; Hypercorn's types name their own scopes.
        await serve(cast("Any", service.app), config, shutdown_trigger=stop.wait)
    finally:
        for task in background:
            task.cancel()
        await service.aclose()
        await _leave(presence)
        sock.close()
        if settings.listen.path is not None:
            with contextlib.suppress(FileNotFoundError):
                settings.listen.path.unlink()
        notifier.close()
        log.info("stopped")


async def _join_and_build(
    settings: Settings, presence: Presence, sock: socket.socket, where: str
) -> tuple[Settings, Service]:
    """Joins the tailnet and builds the service, with the URL it is reached at; a start
    that fails leaves neither the listener nor the tailnet behind."""
    try:
        public_url = await presence.start(where)
        if public_url is not None:
            settings = replace(settings, public_url=public_url)
        if settings.box_url is None and presence.own_url is not None:
            settings = replace(settings, box_url=presence.own_url)
        elif settings.public_url is None and not settings.listen.is_unix:
            # Port 0 picks a free port: advertise the one we actually got.
            settings = replace(settings, public_url=where)
        return settings, await build_service(settings, presence)
    except (
        AgentStartError,
        PresenceError,
        LocalAPIUnavailable,
        StoreUnavailable,
        CardSigningFailed,
    ) as exc:
        sock.close()
        await _leave(presence)
        raise StartError(str(exc)) from None


def _stop_on_signals(
    service: Service, notifier: Notifier, stop: asyncio.Event, drain_seconds: float
) -> None:
    """SIGTERM and SIGINT end the turns and then the serving; a second one exits at once.
    A box with siblings drains first: it takes no new conversation, and its working
    turns get `drain_seconds` to end."""
    stopping: list[asyncio.Task[None]] = []

    async def shutdown() -> None:
        await service.drain(drain_seconds)
        notifier.stopping(f"stopping: ending {service.executor.running} running turn(s)")
        # Before Hypercorn's graceful wait: an open desk page's stream ends its response
        # now, instead of holding the stop for GRACEFUL_TIMEOUT and being cut.
        service.desk.stop()
        try:
            waiting = service.executor.waiting
            ended = await service.stop_turns()
            log.info("%s", stopped_line(ended, waiting))
        finally:
            stop.set()

    def on_signal() -> None:
        if stopping:
            log.warning("a second signal: exiting at once")
            os._exit(1)
        stopping.append(asyncio.ensure_future(shutdown()))

    loop = asyncio.get_running_loop()
    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal)


def _background(
    settings: Settings, notifier: Notifier, service: Service, where: str
) -> list[asyncio.Task[None]]:
    """What runs beside the serving: systemd's watchdog and READY=1, and the memory
    trimmed while the server is quiet."""
    background = [
        asyncio.ensure_future(notifier.watchdog()),
        asyncio.ensure_future(
            trim_when_quiet(lambda: (service.app.requests, service.app.in_flight))
        ),
    ]
    if service.handler.placement is not None:
        background.append(asyncio.ensure_future(service.handler.placement.keep_fresh()))
    if service.storage.tasks.shared:  # the desk follows the other boxes' tasks too
        background.append(asyncio.ensure_future(follow_siblings(service.storage.tasks,
                                                                service.desk)))  # fmt: skip
    if notifier.enabled:
        what = f"serving on {where} (agent {agent_named(settings)})"
        background.append(asyncio.ensure_future(_announce_ready(notifier, where, what)))
    return background
