"""What the cluster needs from the node it links: the small interface a node implements.

The cluster package never imports the node. A node hands its links this much: who it is,
the table where remote interest goes, its local interest (and a way to hear about changes), and the
one entry point for a message that arrived over a link.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Mapping, Sequence
from typing import TYPE_CHECKING, Any, Protocol

from routing import InterestChange, Message, Origin, RemoteInterest

if TYPE_CHECKING:
    from cluster.peer import Gateway
    from cluster.replies import ReplyRouter

__all__ = ["NodeHost"]


class NodeHost(Protocol):
    server_id: str
    server_name: str
    route_interest: RemoteInterest[Any]
    """Interest learned over routes; the node's publish path reads it, links write it."""
    gateway_interest: RemoteInterest[Any]
    """Interest other clusters announced over gateways; written by the gateway links."""
    interest_listeners: list[Callable[[InterestChange], None]]
    """Called with every change of local interest, in order, as it happens."""
    congested: set[Any]
    """Connections past their stall threshold: a link backing up adds itself, and the node's
    client publishers pause for it as for a slow client."""

    def count_slow_link(self, kind: str) -> None:
        """A link of ``kind`` ("Route", "Gateway") was cut as a slow consumer."""
        ...

    def set_gateway_order(self, order: Sequence[Gateway]) -> None:
        """Gateways by preference (lowest round trip first), for queue groups served remotely."""
        ...

    def map_replies(self, router: ReplyRouter) -> None:
        """Send messages whose replies crossed (or will cross) a gateway through ``router``."""
        ...

    def local_interest(self, accounts: Iterable[str] | None = None) -> Iterator[InterestChange]:
        """Local interest as announcements: the snapshot a peer gets when a link opens."""
        ...

    def publish(
        self,
        account: Any,
        msg: Message,
        exclude: object = None,
        origin: Origin = Origin.CLIENT,
        queues: Collection[str] = (),
    ) -> bool: ...

    @property
    def accounts(self) -> Mapping[str, Any]:
        """The accounts the node has, by name (read only: ``account`` makes them)."""
        ...

    def account(self, name: str) -> Any:
        """The account called ``name`` (what ``publish`` takes; opaque to the cluster)."""
        ...
