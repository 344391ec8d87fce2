"""The ASGI app one server serves: the access line and the head's hygiene in front of
everything; then the desk behind the browser's rules (web/browser_rules.py), and
a2a-sdk's JSON-RPC and REST routes and the plain routes (the card, its keys,
/metrics, /healthz) behind the API's. Both have the access guard (who is calling, may
they) in front of every route but the public ones: no route is reachable around it."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from functools import partial

from a2a.server.routes import create_rest_routes
from starlette.routing import BaseRoute, Mount, Router

from tailagent.access.api_rules import A2ABodies, A2AJsonType, JsonOnly, ProgramOrigins
from tailagent.access.asgi import layered
from tailagent.access.bodies import BodyLimit, BodyLimits
from tailagent.access.guard import AccessGuard
from tailagent.access.hygiene import NoFunnel, ServedHost
from tailagent.access.identity import RPC_KEY
from tailagent.access.logline import AccessLog
from tailagent.access.policy import Policy
from tailagent.access.resolve import Resolver
from tailagent.access.streams import StreamCaps, StreamCounts
from tailagent.access.tokens import TokenStore
from tailagent.bridge.conversations.workplace import Conversations
from tailagent.bridge.requests.call_context import CallerContextBuilder
from tailagent.bridge.requests.handler import GuardedRequestHandler
from tailagent.card.publish import JWKS_PATH, CardPublisher
from tailagent.cluster.carry import Carrier, CarryToHome
from tailagent.config import Settings
from tailagent.delegation.inbound import ChainCheck
from tailagent.delegation.outbound import HopSigner
from tailagent.listening.listener import served_hosts
from tailagent.mends import required_fields, sse_ids  # noqa: F401  (each applies its mend)
from tailagent.mends.jsonrpc import jsonrpc_routes
from tailagent.plain_routes import plain_routes
from tailagent.sandbox.fences import FenceReport
from tailagent.store.database import Database
from tailagent.store.keeping import show as show_size
from tailagent.store.spent_tokens import SpentAnswers
from tailagent.store.tasks import ANSWER_KEY, CoalescingTaskStore
from tailagent.tailnet.presence import Presence
from tailagent.web import LazyDesk, mount
from tailagent.web.browser_rules import BrowserRules, is_page_request
from tailagent.web.notifications.policy import PolicyNow
from tailagent.web.parts import DeskParts
from tailagent.web.sessions import BrowserSessions, load_secret
from tailagent.web.views.live import Desk
from tailagent.webpush.service import WebPush


def build_app(
    settings: Settings,
    presence: Presence,
    handler: GuardedRequestHandler,
    store: CoalescingTaskStore,
    desk: Desk,
    webpush: WebPush,
    publisher: CardPublisher,
    conversations: Conversations,
    fence: FenceReport,
    database: Database,
) -> AccessLog:
    """`fence` is how agents are sandboxed (Sandbox.report), for /healthz and the desk;
    `database` is the store's, where notification answers already used are kept."""
    routes = _a2a_routes(handler)
    tokens = TokenStore(settings.state_dir)
    tokens.ensure_local()
    secret = load_secret(settings.state_dir)
    sessions = BrowserSessions(secret, tokens)
    workspace = str(settings.cwd)
    carrier = _carrier(settings, presence)
    parts = DeskParts(
        store, handler, desk, sessions, secret, workspace, webpush, conversations, fence, carrier
    )
    page = LazyDesk(parts)
    policy = Policy(settings.access, settings.delegation)
    resolver = Resolver(
        presence.localapi,
        unix_listener=settings.listen.is_unix,
        trusts_forwarding=presence.trusts_forwarding,
    )
    spent = SpentAnswers(database)
    # Whom a notification reaches is the guard's own policy's word at each sending.
    webpush.connect(PolicyNow(policy, resolver, tokens), spent)

    @contextlib.asynccontextmanager
    async def lifespan(_app: object) -> AsyncIterator[None]:
        yield
        await page.aclose()
        if carrier is not None:
            await carrier.aclose()

    plain = plain_routes(
        publisher, fence, settings.delegation.allowed_nodes, partial(show_size, database)
    )
    router = Router(routes=[*routes, *plain], lifespan=lifespan)
    guard = partial(
        AccessGuard,
        policy=policy,
        resolver=resolver,
        tokens=tokens,
        chains=ChainCheck.of_state_dir(settings.state_dir, settings.delegation, database),
    )
    limits = _body_limits(settings)
    streams = StreamCounts(settings.max_streams_per_caller)
    # The API's rules, in the order a request meets them: the head's, who is calling,
    # the body's, the streams a caller holds, and the answer's type.
    api = layered(
        router,
        partial(ProgramOrigins, allowed=settings.access.allowed_origins),
        JsonOnly,
        guard,
        partial(BodyLimit, limits=limits),
        partial(A2ABodies, limits=limits),
        partial(StreamCaps, counts=streams),
        A2AJsonType,
        partial(CarryToHome, carrier=carrier),
    )
    browser = BrowserRules(guard, resolver, sessions, settings.advertised_url, limits, streams)
    served = mount(page, api, browser)
    hygiene = layered(
        served, NoFunnel, partial(ServedHost, hosts=served_hosts(settings), resolver=resolver)
    )
    return AccessLog(hygiene, is_page=is_page_request)


def _a2a_routes(handler: GuardedRequestHandler) -> list[BaseRoute]:
    """A2A's JSON-RPC and HTTP+JSON routes, with the verified caller in their context."""
    context_builder = CallerContextBuilder()
    return [
        *jsonrpc_routes(handler, "/", context_builder, ANSWER_KEY, RPC_KEY),
        # Tenants are not used here: leave out the SDK's catch-all `/{tenant}` mount,
        # which would otherwise swallow every other path.
        *(
            r
            for r in create_rest_routes(handler, context_builder, enable_v0_3_compat=True)
            if not isinstance(r, Mount)
        ),
    ]


def _carrier(settings: Settings, presence: Presence) -> Carrier | None:
    """How requests for a sibling's work get there: only for boxes that share a store
    and name their siblings (delegation.siblings), who take what this one carries."""
    if settings.store is None or not settings.delegation.siblings:
        return None
    signer = HopSigner(settings.state_dir, settings.own_url + JWKS_PATH, presence.localapi)
    return Carrier(signer, settings.delegation.proxy or presence.tailnet_proxy)


def _body_limits(settings: Settings) -> BodyLimits:
    return BodyLimits(
        max_bytes=settings.max_body_bytes,
        timeout=settings.body_timeout,
        max_depth=settings.max_json_depth,
        max_parts=settings.max_parts,
        max_values=settings.max_json_values,
    )
