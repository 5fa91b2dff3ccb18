"""The seam between a node and the cluster it belongs to, declared once: protocols only.

The cluster package never imports the node, and the node reaches into the cluster only through
what is declared here:

* ``NodeHost`` is what a node hands its links: who it is, the tables where remote interest goes,
  its local interest (and a way to hear about changes), and the one entry point for a message that
  arrived over a link;
* ``Forwarder`` is where the node's publish path hands a message bound for another node or cluster
  (a route peer, a gateway), and what a link was registered for;
* ``ReplyMapping`` is what the publish path asks of reply mapping across gateways (it names
  accounts by name, as frames do);
* ``Consumer`` is a connection whose output can back up (a client, a link), which publishers pause
  for.

``NodeHost`` is generic in the node's account type (``AccountT``): the cluster gets accounts from
the host and hands them back to ``publish`` without looking inside, so the links, their managers and
the peers that hold links carry the same parameter (``RouteManager[Account]`` on the node's side).
What takes a local delivery (``Subscriber``) is declared lower down, in ``routing.subscription``,
because the routing core's records name it; the cluster never delivers locally.

This module imports nothing concrete from the cluster package, so any module of it may import this
one, and the node may type its side of the seam against it.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Iterator, Mapping, Sequence
from typing import Protocol, TypeVar

from routing import InterestChange, Message, Origin, Publication, RemoteInterest

__all__ = ["AccountT", "Consumer", "Forwarder", "NodeHost", "ReplyMapping"]

AccountT = TypeVar("AccountT")
"""The node's account type, opaque to the cluster."""


class Consumer(Protocol):
    """A connection whose output can back up: a client, a route, a gateway. Past ``stall_at``
    pending bytes it is congested, and publishers feeding it pause for it."""

    closing: str | None
    stall_at: int

    @property
    def pending_bytes(self) -> int: ...


class Forwarder(Hashable, Protocol):
    """A link the publish path hands a message to: a route peer, a gateway (hashable: remote
    interest is kept by link)."""

    def forward(self, account: str, msg: Message, queues: tuple[str, ...]) -> None:
        """Send a message on (dropped if the link is down: at most once)."""
        ...


class ReplyMapping(Protocol):
    """What the publish path asks of reply mapping across gateways (``cluster.replies``)."""

    def claims(self, account: str, subject: bytes, reply: bytes | None) -> bool:
        """Whether a message needs the mapping (asked for every message while gateways are up)."""
        ...

    def route(self, publication: Publication) -> Publication | bool:
        """A message ``claims`` accepted, as the node is to deliver it; or, where the mapping
        settled it itself, whether anyone took it."""
        ...


class NodeHost(Protocol[AccountT]):
    """What a node hands its links."""

    server_id: str
    server_name: str
    route_interest: RemoteInterest[Forwarder]
    """Interest learned over routes; the node's publish path reads it, links write it."""
    gateway_interest: RemoteInterest[Forwarder]
    """Interest other clusters announced over gateways; written by the gateway links."""
    interest_listeners: list[Callable[[InterestChange], None]]
    """Called with every change of local interest, in order, as it happens."""
    congested: set[Consumer]
    """Connections past their stall threshold: a link backing up adds itself, and the node's
    client publishers pause for it as for a slow client."""

    def count_slow_link(self, kind: str) -> None:
        """A link of ``kind`` ("Route", "Gateway") was cut as a slow consumer."""
        ...

    def set_gateway_order(self, order: Sequence[Forwarder]) -> None:
        """Gateways by preference (lowest round trip first), for queue groups served remotely."""
        ...

    def map_replies(self, router: ReplyMapping) -> None:
        """Send messages whose replies crossed (or will cross) a gateway through ``router``."""
        ...

    def local_interest(self, where: Callable[[str], bool] | None = None) -> Iterator[InterestChange]:
        """Local interest as announcements: the snapshot a peer gets when a link opens (of the
        accounts ``where`` keeps; all by default)."""
        ...

    def publish(
        self,
        account: AccountT,
        msg: Message,
        exclude: object = None,
        origin: Origin = Origin.CLIENT,
        queues: Collection[str] = (),
    ) -> bool: ...

    @property
    def accounts(self) -> Mapping[str, AccountT]:
        """The accounts the node has, by name (read only: ``account`` makes them)."""
        ...

    def account(self, name: str) -> AccountT:
        """The account called ``name`` (what ``publish`` takes; opaque to the cluster)."""
        ...
