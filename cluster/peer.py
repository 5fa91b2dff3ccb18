"""Where forwarded messages go: a peer node of this cluster, or another cluster.

Every message a node forwards goes through ``Peer.forward`` or ``Gateway.forward``, so these are
compiled, and the account-to-slot mapping is remembered per account rather than hashed per message.
"""

from __future__ import annotations

from typing import Generic

import trio

from cluster.host import AccountT
from cluster.link import Link
from routing import REPLY_PREFIX, Message

__all__ = ["Gateway", "Peer", "Slot", "fnv1a32", "gateway_of", "peer_of"]

Slot = int | str
"""A pooled connection: an index, or the name of an account pinned to its own connection."""


def fnv1a32(text: str) -> int:
    """The FNV-1a hash nats-server uses to spread accounts over pooled routes."""
    h = 0x811C9DC5
    for byte in text.encode():
        h = ((h ^ byte) * 0x01000193) & 0xFFFFFFFF
    return h


class Peer(Generic[AccountT]):
    """Another node of the cluster: its pooled links, and the way messages for it leave.

    Peers are the "links" of the node's route-interest table: remote interest is recorded per peer
    and account, whichever of the peer's connections it came over.
    """

    def __init__(
        self, server_id: str, name: str, url: str, pool_size: int, pinned: frozenset[str]
    ) -> None:
        self.server_id = server_id
        self.name = name
        self.url = url
        self.pool_size = pool_size
        self.pinned = pinned
        self.slots: dict[Slot, Link[AccountT]] = {}
        self.gateway_url = ""
        """Where this peer accepts gateway links, if it does: how other clusters learn of it."""
        self.redis_url = ""
        """Where this peer takes Redis clients (``host:port``), if it does."""
        self.disconnected = trio.Event()
        """Set when the peer's last link drops (replaced when one comes up again)."""
        self.met = False
        """Whether a link to it ever came up (a peer only heard of in gossip is dialed a few times,
        then forgotten; one met is redialed as long as it is away)."""
        self._slot_of: dict[str, Slot] = {}

    def update(self, name: str, url: str, pool_size: int, pinned: frozenset[str]) -> None:
        """What the peer's latest HELLO says of it (the slot mapping follows pool and pins)."""
        if (pool_size, pinned) != (self.pool_size, self.pinned):
            self._slot_of.clear()
        self.name, self.url, self.pool_size, self.pinned = name, url, pool_size, pinned

    def slot_of(self, account: str) -> Slot:
        slot = self._slot_of.get(account)
        if slot is None:
            slot = account if account in self.pinned else fnv1a32(account) % self.pool_size
            self._slot_of[account] = slot
        return slot

    def all_slots(self) -> list[Slot]:
        return [*range(self.pool_size), *sorted(self.pinned)]

    def forward(self, account: str, msg: Message, queues: tuple[str, ...]) -> None:
        """Send a message on the account's slot (dropped if that slot is down: at most once)."""
        link = self.slots.get(self.slot_of(account))
        if link is not None:
            link.send_message(account, msg, queues)

    def __repr__(self) -> str:
        return f"Peer({self.name!r})"


class Gateway(Generic[AccountT]):
    """Another cluster, as this node's gateways see it: its messages leave on one outbound link.

    A reply subject leaving this way is rewritten to name this cluster and node, so that the answer
    can come straight back even before this cluster's interest in it has reached the other side.

    Args:
        name: the remote cluster's gateway name.
        reply_prefix: ``_GR_.<this cluster's hash>.<this node's hash>.``.
    """

    def __init__(self, name: str, reply_prefix: bytes) -> None:
        self.name = name
        self.reply_prefix = reply_prefix
        self.urls: list[str] = []
        """Gateway URLs of the remote cluster's nodes, configured or learned."""
        self.configured = False
        """Whether the configuration names it (then it is dialed as long as the node runs)."""
        self.connections = 0
        """Outbound links made so far."""
        self.outbound: Link[AccountT] | None = None
        self.inbound: dict[str, Link[AccountT]] = {}
        """Links the remote cluster's nodes dialed to this node, by their server id."""

    def forward(self, account: str, msg: Message, queues: tuple[str, ...]) -> None:
        link = self.outbound
        if link is not None:
            reply = msg.reply
            if reply is not None and not reply.startswith(REPLY_PREFIX):
                msg = msg.with_reply(self.reply_prefix + reply)
            link.send_message(account, msg, queues)

    @property
    def rtt(self) -> float:
        return self.outbound.rtt if self.outbound is not None else float("inf")

    def __repr__(self) -> str:
        return f"Gateway({self.name!r})"


def peer_of(link: Link[AccountT]) -> Peer[AccountT]:
    """The peer a registered route link belongs to."""
    peer = link.peer
    assert isinstance(peer, Peer)
    return peer


def gateway_of(link: Link[AccountT]) -> Gateway[AccountT]:
    """The remote cluster a registered (or dialed) gateway link belongs to."""
    gateway = link.peer
    assert isinstance(gateway, Gateway)
    return gateway
