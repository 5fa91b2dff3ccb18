"""What the cluster needs from the node it links: the small interface a node implements.

The cluster package never imports the node's server. A node hands its links this much: who it is,
the table where remote interest goes, its local interest (and a way to hear about changes), and the
one entry point for a message that arrived over a link.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Iterator, Sequence
from typing import Any, Protocol

from routing import InterestChange, Origin, RemoteInterest

__all__ = ["Forwarder", "NodeHost"]


class Forwarder(Protocol):
    """A link the node's publish path can hand a message to (a route peer, a gateway)."""

    def forward(
        self,
        account: str,
        subject: bytes,
        reply: bytes | None,
        headers: bytes | None,
        payload: bytes,
        queues: tuple[str, ...],
    ) -> None: ...


class NodeHost(Protocol):
    server_id: str
    server_name: str
    route_interest: RemoteInterest[Any]
    """Interest learned over routes; the node's publish path reads it, links write it."""
    gateway_interest: RemoteInterest[Any]
    """Interest other clusters announced over gateways; written by the gateway links."""
    gateway_order: Sequence[Any]
    """Gateways by preference (lowest round trip first), kept by the gateway links."""
    replies: Any
    """The node's reply mapping across gateways (set by the gateway links)."""
    interest_listeners: list[Callable[[InterestChange], None]]
    """Called with every change of local interest, in order, as it happens."""

    def local_interest(self, accounts: Iterable[str] | None = None) -> Iterator[InterestChange]:
        """Local interest as announcements: the snapshot a peer gets when a link opens."""
        ...

    def publish(
        self,
        account: Any,
        subject: bytes,
        reply: bytes | None,
        headers: bytes | None,
        payload: bytes,
        exclude: object = None,
        origin: Origin = Origin.CLIENT,
        queues: Collection[str] = (),
    ) -> bool: ...

    def account(self, name: str) -> Any:
        """The account called ``name`` (what ``publish`` takes)."""
        ...
