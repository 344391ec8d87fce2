"""The access guard: who is calling, and may they. In front of every route but the
public ones, before any A2A code or page runs.

It names the caller from the connection and the headers alone (whois through
tailscaled, a bearer token, an actor chain another box signed) and asks the policy;
a caller it does not let in is refused here, from the head alone, however large or
slow the body. The card, its JWKS and the health probe are public. Everything else a
request must pass is a layer of its own (app.py stacks them): the head's hygiene
(hygiene.py), the API's rules (api_rules.py), the body's limits (bodies.py), the
streams a caller holds (streams.py), and on the desk's mount the browser's rules
(web/browser_rules.py), which bring the one other way in: a sign-in on this box.
"""

from __future__ import annotations

import logging
from typing import Any, Protocol

from tailagent.access.asgi import ASGI, headers_of, outcome_of
from tailagent.access.delegated import CHAIN_HEADER, ChainChecker, delegated_caller
from tailagent.access.identity import SCOPE_KEY, VIEWER_KEY, Caller
from tailagent.access.policy import Policy, Refusal, Seen
from tailagent.access.refusals import STYLESHEET, refuse
from tailagent.access.resolve import BadForwarding, Resolver
from tailagent.access.tokens import TokenInfo, TokenStore
from tailagent.tailnet.localapi import LocalAPIUnavailable

log = logging.getLogger("tailagent.access")

PUBLIC_PATHS = frozenset(
    {
        "/.well-known/agent-card.json",
        "/.well-known/agent-card",
        "/.well-known/agent.json",
        "/.well-known/jwks.json",
        "/healthz",
        "/favicon.ico",  # the desk's icon, nothing else (plain_routes.py)
        "/desk/signin",  # the link's one-use ticket is the credential (web/sessions.py)
        STYLESHEET,  # the desk's look, for the page that says how to sign in
    }
)
# Answered to anyone, listing what the viewer may use: the guard names the viewer there
# (VIEWER_KEY) but refuses no one (card/catalog.py).
CATALOG_PATH = "/.well-known/ai-catalog.json"
# The scope key: a bearer token verified for this request. Only a program can send
# one; a page cannot make a browser send it.
BEARER_KEY = "tailagent.bearer"


def is_public(path: str) -> bool:
    """A route anyone may call: no caller is asked for, and none is in its scope."""
    return path in PUBLIC_PATHS or path == CATALOG_PATH


class SignedIn(Protocol):
    """Another way in for a caller whom neither the tailnet nor a token names (a 401):
    a sign-in the guarded mount honours (the desk's, on this box). It returns the
    caller it names, else the refusal to answer with."""

    def __call__(
        self, scope: dict[str, Any], headers: dict[bytes, str], refusal: Refusal
    ) -> Caller | Refusal: ...


def _node_viewer(seen: Seen) -> Caller | None:
    """A tailnet node the policy does not let in, as a viewer with no roles: the
    catalog lists the agent to it only if delegation.allowed_nodes names it."""
    peer = seen.peer
    if peer is None:
        return None
    return Caller(
        kind="tagged" if peer.tagged else "user",
        login="" if peer.tagged else peer.user.login,
        node=peer.node.name,
        tags=peer.node.tags,
        established_by=seen.established_by,
    )


class AccessGuard:
    """Puts the caller the policy lets in into the scope (identity.py's SCOPE_KEY), or
    refuses; a public route passes with none."""

    def __init__(
        self,
        app: ASGI,
        *,
        policy: Policy,
        resolver: Resolver,
        tokens: TokenStore,
        chains: ChainChecker | None = None,
        signed_in: SignedIn | None = None,
    ) -> None:
        self._app = app
        self._policy = policy
        self._resolver = resolver
        self._tokens = tokens
        self._chains = chains  # checks an actor chain (delegation/chain.py); None: none taken
        self._signed_in = signed_in

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self._app(scope, receive, send)
            return
        outcome, headers = outcome_of(scope), headers_of(scope)
        me = await self._resolver.current_self()
        self._policy.owner_login = me.owner_login
        if is_public(scope["path"]):
            if scope["path"] == CATALOG_PATH:
                viewer = scope[VIEWER_KEY] = await self._viewer(scope, headers)
                outcome.caller = viewer.describe() if viewer else outcome.caller
            outcome.decision = "public"
            await self._app(scope, receive, send)
            return
        identified, token_verified = await self._named(scope, headers)
        if isinstance(identified, Refusal) and identified.status == 401 and self._signed_in:
            identified = self._signed_in(scope, headers, identified)
        if isinstance(identified, Refusal):
            error, reason = identified.error.upper(), identified.reason
            await refuse(scope, receive, send, identified.status, error, 0, reason)
            return
        outcome.caller = identified.describe()
        scope[SCOPE_KEY] = identified
        scope[BEARER_KEY] = token_verified
        await self._app(scope, receive, send)

    def _bearer(self, headers: dict[bytes, str]) -> TokenInfo | Refusal | None:
        authorization = headers.get(b"authorization", "")
        if not authorization:
            return None
        scheme, _, value = authorization.partition(" ")
        if scheme.lower() != "bearer" or not value.strip():
            return Refusal(401, "the Authorization header must be `Bearer <token>`")
        token = self._tokens.verify(value.strip())
        if token is None:
            return Refusal(401, "the bearer token is not valid (unknown or revoked)")
        return token

    async def _identify(
        self, scope: dict[str, Any], headers: dict[bytes, str], token: TokenInfo | None
    ) -> Caller | Refusal:
        try:
            seen = await self._resolver.seen(scope, headers.get(b"x-forwarded-for", ""))
        except BadForwarding as exc:
            return Refusal(401, str(exc))
        except LocalAPIUnavailable as exc:
            # While tailscaled is gone no tailnet peer can reach us: every caller is
            # local, and gets in only as a local caller can. Only a request that claims
            # a tailnet identity (tailscale serve's X-Forwarded-For) waits for tailscaled.
            claims = b"x-forwarded-for" in headers
            if claims and token is None and not self._policy.settings.local_without_token:
                log.warning("identity unavailable: %s", exc)
                return Refusal(
                    503, f"tailscaled cannot confirm the tailnet identity claimed now: {exc}"
                )
            # Said once in the log as it changes, not in every access line.
            where = self._resolver.localapi.where
            # Who the caller is (a local connection) is all the identity keeps; why no
            # tailnet identity could be asked is the refusal's advice, not its name.
            advice = f", LocalAPI unreachable: start {where} for tailnet callers"
            seen = Seen(None, "local connection", advice)
        chain = headers.get(CHAIN_HEADER)
        if chain is not None:  # work another box hands here for a person (access/delegated.py)
            this_node = (await self._resolver.current_self()).dns_name or ""
            return await delegated_caller(self._policy, self._chains, seen, chain, this_node)
        return self._policy.decide(seen, token)

    async def _named(
        self, scope: dict[str, Any], headers: dict[bytes, str]
    ) -> tuple[Caller | Refusal, bool]:
        """The caller, from the connection and the headers alone (no body is read for
        one that is not let in), and whether a bearer token verified."""
        token = self._bearer(headers)
        if isinstance(token, Refusal):
            return token, False
        return await self._identify(scope, headers, token), isinstance(token, TokenInfo)

    async def _viewer(self, scope: dict[str, Any], headers: dict[bytes, str]) -> Caller | None:
        """The catalog's viewer, never a refusal: the caller the policy lets in, else the
        tailnet node whois names (no roles), else None."""
        identified, _ = await self._named(scope, headers)
        if isinstance(identified, Caller):
            return identified
        try:
            seen = await self._resolver.seen(scope, headers.get(b"x-forwarded-for", ""))
        except (BadForwarding, LocalAPIUnavailable):
            return None
        return _node_viewer(seen)
