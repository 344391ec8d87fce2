"""The box that is handed work: the actor-chain checker its access layer asks.

The access layer decides who a request is for, but checks no signature itself and
knows nothing of this room (it sits floors below): it is handed this checker, which
reads the `A2A-Actor-Chain` header, verifies it (chain.py) against the keys pinned for
the nodes that signed it (node_keys.py), and says why in access's own words when not.
Nonces are kept in the store (store/hop_nonces.py): a nonce seen on any request is a
replay on every other, after a restart too, and on every server sharing the store.
"""

from __future__ import annotations

from pathlib import Path

from tailagent.access.delegated import ChainNotAccepted
from tailagent.config import DelegationSettings
from tailagent.delegation.chain import (
    ChainRefused,
    KeyLookup,
    Verified,
    parse_header,
    verify_chain,
)
from tailagent.delegation.node_keys import NodeKeys
from tailagent.store.database import Database
from tailagent.store.hop_nonces import HopNonces, NoncesFull


class ChainCheck:
    """access.delegated.ChainChecker: `(header, calling node, this node) -> Verified`."""

    def __init__(self, keys: KeyLookup, settings: DelegationSettings, database: Database) -> None:
        self._keys = keys
        self._settings = settings
        self._nonces = HopNonces(database, settings.window_seconds)

    @classmethod
    def of_state_dir(
        cls, state_dir: Path, settings: DelegationSettings, database: Database
    ) -> ChainCheck:
        """Checks against the nodes' keys pinned in the state dir (fetched through
        delegation.proxy from each node's tailagent, at delegation.scheme and .port, the
        first time a node is met), nonces kept in `database`."""
        keys = NodeKeys.of_state_dir(
            state_dir, scheme=settings.scheme, port=settings.port, proxy=settings.proxy
        )
        return cls(keys, settings, database)

    async def __call__(self, header: str, caller_node: str, this_node: str) -> Verified:
        try:
            return await verify_chain(
                parse_header(header),
                caller_node=caller_node,
                this_node=this_node,
                keys=self._keys,
                nonces=self._nonces,
                max_depth=self._settings.max_depth,
                window=self._settings.window_seconds,
            )
        except (ChainRefused, NoncesFull) as exc:
            raise ChainNotAccepted(str(exc)) from None
