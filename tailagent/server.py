"""Builds the ASGI app and serves it with Hypercorn.

The Quart app serves tailagent's own routes (the card, health); a2a-sdk's
Starlette routes serve A2A. A small path switch composes them, and the access
guard stands in front of both, so no route is reachable around it.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import signal
import socket
from dataclasses import dataclass, replace
from typing import Any, cast
from urllib.parse import urlsplit

from a2a.server.routes import create_rest_routes
from a2a.server.tasks import DatabaseTaskStore
from hypercorn.asyncio import serve
from hypercorn.typing import LifespanScope
from prometheus_client import CONTENT_TYPE_LATEST
from quart import Quart, Response, request
from sqlalchemy.ext.asyncio import AsyncEngine
from starlette.routing import Mount, Router
from starlette.types import ASGIApp

from tailagent.access.browser import BrowserSessions, load_secret
from tailagent.access.guard import AccessGuard
from tailagent.access.identity import SCOPE_KEY, Caller, CallerContextBuilder
from tailagent.access.localapi import LocalAPIUnavailable, self_dns_name
from tailagent.access.policy import Policy
from tailagent.access.resolve import Resolver
from tailagent.access.tokens import TokenStore
from tailagent.agents.events import AgentBackend, AgentStartError
from tailagent.agents.registry import make_backend
from tailagent.bridge.audit import AuditLog
from tailagent.bridge.conversations import Conversations, Isolated, choose
from tailagent.bridge.executor import BridgeExecutor
from tailagent.bridge.handler import GuardedRequestHandler
from tailagent.bridge.jsonrpc import jsonrpc_routes
from tailagent.bridge.parked import waiting_of
from tailagent.bridge.remote import CANCEL, PUSH, TaskSignals
from tailagent.bridge.sessions import SessionPool
from tailagent.bridge.sqlite_writer import SqliteWriter, direct_writer
from tailagent.bridge.state import (
    STOP_MESSAGE,
    SessionMap,
    StoreUnavailable,
    check_store,
    close_unfinished_tasks,
    context_ids,
    index_contexts,
    open_engine,
    redacted,
    server_id,
)
from tailagent.bridge.store import CoalescingTaskStore
from tailagent.card.builder import build_card
from tailagent.card.keys import KeyStore
from tailagent.card.publish import JWKS_PATH, CardPublisher
from tailagent.config import Listen, Settings, default_state_dir
from tailagent.memory import trim_when_quiet
from tailagent.metrics import AGENT_PROCESSES, exposition
from tailagent.notify import Notifier
from tailagent.presence import BoxTailscaled, Presence, PresenceError, ServeEntryPresence
from tailagent.probe import healthy
from tailagent.push.delivery import PushDispatcher, PushSigner
from tailagent.push.targets import PushTargets
from tailagent.serving import LISTEN_BACKLOG, hypercorn_config
from tailagent.statelock import StateDirBusy, StateLock
from tailagent.web import DeskParts, mount
from tailagent.web.live import Desk

log = logging.getLogger("tailagent")

CARD_PATH = "/.well-known/agent-card.json"
CARD_MAX_AGE = 300


@dataclass
class Service:
    """Everything one running server owns, so it can all be closed in order."""

    app: AccessGuard
    executor: BridgeExecutor
    handler: GuardedRequestHandler
    store: CoalescingTaskStore
    session_map: SessionMap
    pool: SessionPool
    backend: AgentBackend
    engine: AsyncEngine
    push: PushDispatcher
    signal_watch: asyncio.Task[None] | None
    direct: SqliteWriter | None
    conversations: Conversations

    async def stop_turns(self) -> int:
        """Ends every running or waiting turn, saying the server stopped; returns how many."""
        streamed = await self.executor.stop_all(STOP_MESSAGE)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(2.0):
                await self.store.settled(streamed)
        await self.handler.aclose()
        return len(streamed) + await self.store.close_held(STOP_MESSAGE)

    async def aclose(self) -> None:
        if self.signal_watch is not None:
            self.signal_watch.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self.signal_watch
        await self.handler.aclose()
        await self.store.flush(final=True)
        await self.push.aclose()
        await self.session_map.flush()
        if self.direct is not None:
            self.direct.close()
        await self.pool.aclose()
        await self.backend.aclose()
        await self.conversations.aclose()
        await self.engine.dispose()


def _card_app(publisher: CardPublisher) -> Quart:
    app = Quart("tailagent")

    async def agent_card() -> Response:
        publisher.refresh()
        wants_strict = request.headers.get("A2A-Version", "").strip().startswith("1.")
        variant = publisher.strict if wants_strict else publisher.legacy
        headers = {
            "Cache-Control": f"public, max-age={CARD_MAX_AGE}",
            "Last-Modified": publisher.last_modified,
            "ETag": variant.etag,
            "Vary": "A2A-Version",
        }
        if variant.etag in request.headers.get("If-None-Match", ""):
            return Response("", status=304, headers=headers)
        return Response(variant.body, content_type="application/json", headers=headers)

    # The 1.0 path, and the two older ones clients still ask for.
    for path in (CARD_PATH, "/.well-known/agent-card", "/.well-known/agent.json"):
        app.add_url_rule(path, view_func=agent_card, endpoint=path, methods=["GET"])

    @app.get(JWKS_PATH)
    async def jwks() -> Response:
        publisher.refresh()
        headers = {"Cache-Control": f"public, max-age={CARD_MAX_AGE}"}
        return Response(publisher.jwks, content_type="application/jwk-set+json", headers=headers)

    @app.get("/metrics")
    async def metrics() -> Response:
        caller = request.scope.get(SCOPE_KEY)
        if not isinstance(caller, Caller) or not caller.may("admin"):
            body = {"error": "forbidden", "reason": "/metrics is for admins and the local token"}
            return Response(json.dumps(body), status=403, content_type="application/json")
        return Response(exposition(), content_type=CONTENT_TYPE_LATEST)

    @app.get("/healthz")
    async def healthz() -> dict[str, str]:
        return {"status": "ok"}

    return app


def make_presence(settings: Settings) -> Presence:
    """The way onto the tailnet the settings ask for."""
    if settings.tsnet.enabled:
        from tailagent.tsnet.node import EmbeddedNode  # Go's runtime, only when asked for

        return EmbeddedNode(settings)
    if settings.tailnet:
        return ServeEntryPresence(settings)
    return BoxTailscaled(settings)


async def build_service(settings: Settings, presence: Presence) -> Service:
    conversations = await choose(
        settings.workspace.isolation, settings.cwd, settings.state_dir, settings.workspace.base
    )
    isolated = conversations if isinstance(conversations, Isolated) else None
    backend = make_backend(settings, isolated.spare_directory if isolated else None)
    engine = open_engine(settings.store_url)
    await check_store(engine, settings.store_url)
    server = (server_id(settings.state_dir), settings.advertised_url)
    localapi = presence.localapi
    keys = KeyStore(settings.state_dir)
    keys.ensure()
    push_targets = PushTargets(localapi, settings.push.allowed_hosts)
    signer = PushSigner(keys, settings.advertised_url)
    push = PushDispatcher(engine, push_targets, signer, settings.push, presence.tailnet_proxy)
    await push.configs.initialize()
    database_store = DatabaseTaskStore(engine)
    if settings.store is not None:
        await index_contexts(database_store)
    closed, waiting = await close_unfinished_tasks(
        database_store, server[0], keep=lambda task: waiting_of(task) is not None
    )
    for task in closed:
        push.watch(task.id)  # a push config may wait for this last state
        push.task_changed(task)
    direct = direct_writer(engine, database_store.task_model)
    desk = Desk(lambda task_id: store.with_owner(task_id))
    store = CoalescingTaskStore(
        database_store, server, on_change=push.task_changed, shared=settings.store is not None,
        direct=direct, on_save=desk.saved,
    )  # fmt: skip
    signals = TaskSignals(engine)
    await signals.initialize()
    session_map = SessionMap(engine, direct)
    await session_map.initialize()
    pool = SessionPool(backend, session_map, idle_timeout=settings.agent_process.idle_timeout)
    AGENT_PROCESSES.set_function(lambda: pool.live)
    audit = AuditLog(engine)
    await audit.initialize()
    denials = settings.max_permission_denials
    if settings.agent == "claude" and settings.claude.max_permission_denials:
        denials = settings.claude.max_permission_denials
    pruned = []
    if isinstance(conversations, Isolated):
        pruned = await conversations.worktrees.prune(await context_ids(database_store))
    await backend.start()  # after the pruning: a spare agent may start in a worktree
    if isinstance(conversations, Isolated):
        conversations.start()
        log.info(
            "isolation: each conversation in a git worktree and branch of its own, from %s "
            "(merged back only on request: tailagent merge CONTEXT)%s",
            settings.cwd,
            f"; pruned {len(pruned)} left by conversations that no longer exist" if pruned else "",
        )
    else:
        log.info("isolation: shared, every conversation works in %s (%s)", settings.cwd,
                 conversations.why)  # fmt: skip
    executor = BridgeExecutor(
        backend,
        pool,
        audit,
        conversations=conversations,
        max_permission_denials=denials,
        rules=settings.rules,
        workspace=settings.cwd,
        attachment_settings=settings.attachments,
    )
    executor.restore([task for task, _ in waiting])
    for task, owner in waiting:
        desk.saved(task, owner)  # the page's "waiting for you" knows them again
    card = build_card(backend, settings.advertised_url, settings.name, legacy=False)
    # The extended card lists the 0.3 interfaces too: a 0.3 client's request for it
    # is answered through a conversion that needs one.
    extended = build_card(backend, settings.advertised_url, settings.name, legacy=True)
    handler = GuardedRequestHandler(
        executor, store, card, extended, pool=pool, push_configs=push.configs,
        push_targets=push_targets, signals=signals, rules=settings.rules,
        attachment_limits=settings.attachments,
        max_concurrent_turns=settings.agent_process.max_concurrent_turns,
        conversations=conversations,
    )  # fmt: skip
    context_builder = CallerContextBuilder()
    routes = [
        *jsonrpc_routes(handler, "/", context_builder),
        # Tenants are not used here: leave out the SDK's catch-all `/{tenant}` mount,
        # which would otherwise swallow every other path.
        *(
            r
            for r in create_rest_routes(handler, context_builder, enable_v0_3_compat=True)
            if not isinstance(r, Mount)
        ),
    ]
    publisher = CardPublisher(
        backend,
        settings.advertised_url,
        settings.name,
        keys,
        settings.card_lists_0_3,
    )
    quart_app = _card_app(publisher)
    router = Router(routes=routes, default=cast("ASGIApp", quart_app))
    tokens = TokenStore(settings.state_dir)
    tokens.ensure_local()
    secret = load_secret(settings.state_dir)
    sessions = BrowserSessions(secret, tokens)
    desk_parts = DeskParts(store, handler, desk, sessions, secret, str(settings.cwd))
    served = mount(quart_app, desk_parts, router)

    async def dispatch(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] == "lifespan":
            await quart_app(cast("LifespanScope", scope), receive, send)
        else:
            await served(scope, receive, send)

    app = AccessGuard(
        dispatch,
        policy=Policy(settings.access),
        resolver=Resolver(
            localapi,
            unix_listener=settings.listen.is_unix,
            trusts_forwarding=presence.trusts_forwarding,
        ),
        tokens=tokens,
        max_body_bytes=settings.max_body_bytes,
        hosts=served_hosts(settings),
        allowed_origins=settings.access.allowed_origins,
        sessions=sessions,
    )

    async def start_pushing(task_id: str, _owner: str) -> None:
        push.watch(task_id)

    # Only another server sharing the store sends signals: alone, nothing to poll for.
    signal_watch = None
    if settings.store is not None:
        signal_watch = asyncio.create_task(
            signals.watch(store.held, {CANCEL: handler.cancel_for_peer, PUSH: start_pushing}),
            name="task-signals",
        )
    return Service(
        app, executor, handler, store, session_map, pool, backend, engine, push, signal_watch,
        direct, conversations,
    )  # fmt: skip


def served_hosts(settings: Settings) -> set[str]:
    """The names a request's Host may use; tailscaled adds the node's own at run time."""
    hosts = {"localhost", "127.0.0.1", "::1"}
    if not settings.listen.is_unix:
        hosts.add(settings.listen.host)
    public_host = urlsplit(settings.advertised_url).hostname
    if public_host:
        hosts.add(public_host)
    return hosts


def open_listener(listen: Listen) -> socket.socket:
    """Binds the listening socket ourselves, so the real port is known before serving
    and a unix socket is created owner-only, with no window where others can connect."""
    if listen.path is not None:
        listen.path.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
        with contextlib.suppress(FileNotFoundError):
            if listen.path.is_socket():
                listen.path.unlink()
        sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        old_umask = os.umask(0o177)
        try:
            sock.bind(str(listen.path))
        finally:
            os.umask(old_umask)
    else:
        family = socket.AF_INET6 if ":" in listen.host else socket.AF_INET
        sock = socket.socket(family, socket.SOCK_STREAM)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((listen.host, listen.port))
    sock.listen(LISTEN_BACKLOG)
    sock.set_inheritable(True)
    return sock


def listener_url(sock: socket.socket, listen: Listen) -> str:
    if listen.path is not None:
        return f"unix:{listen.path}"
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


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
    """The server cannot start; str() is the one line that says why."""


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
    lock = StateLock(settings.state_dir)
    try:
        lock.acquire()
    except StateDirBusy as exc:
        raise StartError(str(exc)) from None
    except OSError as exc:
        raise StartError(
            f"cannot use the state dir {settings.state_dir}: {exc.strerror} (give tailagent "
            "a directory its user can write: --state-dir)"
        ) from None
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
    try:
        public_url = await presence.start(where)
        if public_url is not None:
            settings = replace(settings, public_url=public_url)
        elif settings.public_url is None and not settings.listen.is_unix:
            # Port 0 picks a free port: advertise the one we actually got.
            settings = replace(settings, public_url=where)
        service = await build_service(settings, presence)
    except (AgentStartError, PresenceError, LocalAPIUnavailable, StoreUnavailable) as exc:
        sock.close()
        await _leave(presence)
        raise StartError(str(exc)) from None
    config = hypercorn_config(sock)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    stopping: list[asyncio.Task[None]] = []

    async def shutdown() -> None:
        notifier.stopping(f"stopping: ending {service.executor.running} running turn(s)")
        try:
            waiting = service.executor.waiting
            ended = await service.stop_turns()
            kept = f"; {waiting} waiting for an answer wait on for the next start"
            log.info("stopping: %d unfinished task(s) ended%s", ended, kept if waiting else "")
        finally:
            stop.set()

    def on_signal() -> None:
        if stopping:
            log.warning("a second signal: exiting at once")
            os._exit(1)
        stopping.append(asyncio.ensure_future(shutdown()))

    for signum in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(signum, on_signal)
    log.info(
        "serving on %s (agent %s, workspace %s, state %s, store %s)",
        where,
        settings.agent,
        settings.cwd,
        settings.state_dir,
        redacted(settings.store_url),
    )
    for line in await next_steps(settings, presence, where):
        log.info("%s", line)
    background = [
        asyncio.ensure_future(notifier.watchdog()),
        asyncio.ensure_future(
            trim_when_quiet(lambda: (service.app.requests, service.app.in_flight))
        ),
    ]
    if notifier.enabled:
        what = f"serving on {where} (agent {settings.agent})"
        background.append(asyncio.ensure_future(_announce_ready(notifier, where, what)))
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
