"""Replies that cross gateways find their way home without waiting for interest to propagate.

A requester subscribes to its inbox and publishes the request at once. The request may reach the
responder's cluster before the inbox's interest does (they travel different links, maybe through
different nodes), and across gateways nothing is sent without interest, so the reply would be lost.
So a reply subject leaving through a gateway is rewritten to name where it came from:
``_GR_.<cluster hash>.<node hash>.<reply>`` (nats-server's form, so the hashes are six characters of
each name's SHA-256 in URL-safe base64).

On the responder's side each node that delivers such a message hands its subscribers the original
reply and remembers the mapping for a while (``ttl``). A reply published to a remembered subject goes
straight back to the requester's cluster, under the mapped subject, whatever the interest tables say;
there the node named in it delivers it (after the route hop, if the gateway link landed on another
node) as if its own cluster's gateway had brought it in. Clients never see the mapped form, and may
not publish to it.
"""

from __future__ import annotations

import base64
import collections
import hashlib
from collections.abc import Callable
from typing import Final, Generic

from cluster.host import AccountT
from cluster.peer import Gateway, Peer
from routing import REPLY_PREFIX, Origin, Publication

__all__ = ["ReplyRouter", "short_hash"]

HASH_LEN: Final = 6
_MAPPED_LEN: Final = len(REPLY_PREFIX) + 2 * (HASH_LEN + 1)
"""Length of ``_GR_.<cluster>.<node>.``: where the original reply starts."""


def short_hash(name: str) -> bytes:
    """Six characters naming a cluster or a node in mapped replies (URL-safe base64, no dots)."""
    return base64.urlsafe_b64encode(hashlib.sha256(name.encode()).digest())[:HASH_LEN]


class ReplyRouter(Generic[AccountT]):
    """One node's mapped replies: those it remembers, and where homecoming ones go.

    Args:
        cluster: this cluster's gateway name.
        server_id: this node's id.
        peers: this node's route peers by server id (a reply may have to hop to one of them).
        ttl: how long a mapping is remembered.
        clock: the time source (the event loop's, so a test clock works).
    """

    def __init__(
        self,
        cluster: str,
        server_id: str,
        peers: dict[str, Peer[AccountT]],
        ttl: float,
        clock: Callable[[], float],
    ) -> None:
        self.cluster_hash = short_hash(cluster)
        self.node_hash = short_hash(server_id)
        self.prefix = REPLY_PREFIX + self.cluster_hash + b"." + self.node_hash + b"."
        """What this node puts in front of reply subjects leaving through its gateways."""
        self.gateways: dict[bytes, Gateway[AccountT]] = {}
        """Remote clusters by the hash of their name (kept by the gateway manager)."""
        self._peers = peers
        self._peer_by_hash: dict[bytes, str] = {}
        self._ttl = ttl
        self._clock = clock
        self._recent: dict[str, dict[bytes, tuple[bytes, float]]] = {}
        """Per account: original reply -> (mapped reply, when to forget it)."""
        self._expiry: collections.deque[tuple[float, str, bytes]] = collections.deque()

    def claims(self, account: str, subject: bytes, reply: bytes | None) -> bool:
        """Whether a message needs this router (the publish path asks for every message)."""
        if subject.startswith(REPLY_PREFIX) or (reply is not None and reply.startswith(REPLY_PREFIX)):
            return True
        if self._recent:
            mapped = self._recent.get(account)
            return mapped is not None and subject in mapped
        return False

    def route(self, publication: Publication) -> Publication | bool:
        """Where a message ``claims`` accepted goes: the publication the node is to deliver (its
        reply or subject rewritten, or a gateway to skip), or, where the router sent it on itself
        or dropped it, whether anyone took it.

        A publication with ``skip`` set already went back through that gateway: it counts as taken
        whatever the node's delivery finds.
        """
        p = publication
        msg = p.msg
        if msg.subject.startswith(REPLY_PREFIX):
            return self._homecoming(p)
        reply = msg.reply
        if reply is not None and reply.startswith(REPLY_PREFIX):
            if p.origin is Origin.CLIENT:
                return p
            return p.detour(local=msg.with_reply(self._remember(p.account, reply)))
        gateway = self._way_back(p.account, msg.subject)
        if gateway is None:
            return p
        mapped = self._recent[p.account][msg.subject][0]
        gateway.forward(p.account, msg.with_subject(mapped), ())
        return p.detour(skip=gateway)

    def _homecoming(self, p: Publication) -> Publication | bool:
        """A mapped reply arrived (from a gateway, or from the node that took it off one)."""
        subject = p.msg.subject
        if p.origin is Origin.CLIENT or len(subject) <= _MAPPED_LEN:
            return False
        if subject[5:11] != self.cluster_hash or subject[11:12] != b"." or subject[18:19] != b".":
            return False  # not this cluster's, or not a mapped subject at all
        target = subject[12:18]
        if target == self.node_hash:
            msg = p.msg.with_subject(subject[_MAPPED_LEN:])
            local = msg.with_reply(self._remember(p.account, msg.reply))
            # As if this cluster's gateway had brought the reply itself: local subscribers and the
            # rest of the cluster, never another gateway (the responder's side served those).
            return Publication(p.account, msg, origin=Origin.GATEWAY, local=local)
        peer = self._peer(target)
        if peer is None:
            return False
        peer.forward(p.account, p.msg, ())
        return True

    def _remember(self, account: str, reply: bytes | None) -> bytes | None:
        """Note a mapped reply and return the original, for the local subscribers."""
        if reply is None or not _mapped(reply):
            return reply
        original = reply[_MAPPED_LEN:]
        now = self._clock()
        self._purge(now)
        deadline = now + self._ttl
        self._recent.setdefault(account, {})[original] = (reply, deadline)
        self._expiry.append((deadline, account, original))
        return original

    def _way_back(self, account: str, subject: bytes) -> Gateway[AccountT] | None:
        """The gateway a reply published to ``subject`` goes straight back through, if any."""
        entry = self._recent[account][subject]
        if entry[1] <= self._clock():
            return None
        gateway = self.gateways.get(entry[0][5:11])
        return gateway if gateway is not None and gateway.outbound is not None else None

    def purge(self) -> None:
        """Forget mappings past their time (called periodically, and on every new one)."""
        self._purge(self._clock())

    def _purge(self, now: float) -> None:
        expiry, recent = self._expiry, self._recent
        while expiry and expiry[0][0] <= now:
            _, account, original = expiry.popleft()
            mapped = recent.get(account)
            if mapped is not None:
                entry = mapped.get(original)
                if entry is not None and entry[1] <= now:
                    del mapped[original]
                    if not mapped:
                        del recent[account]

    def __len__(self) -> int:
        """How many mappings are remembered (for monitoring)."""
        return sum(len(mapped) for mapped in self._recent.values())

    def _peer(self, node_hash: bytes) -> Peer[AccountT] | None:
        server_id = self._peer_by_hash.get(node_hash)
        if server_id is None or server_id not in self._peers:
            self._peer_by_hash = {short_hash(sid): sid for sid in self._peers}
            server_id = self._peer_by_hash.get(node_hash)
        return self._peers.get(server_id) if server_id is not None else None


def _mapped(reply: bytes | None) -> bool:
    return (
        reply is not None
        and len(reply) > _MAPPED_LEN
        and reply.startswith(REPLY_PREFIX)
        and reply[11:12] == b"."
        and reply[18:19] == b"."
    )
