"""The record every trie stores (one subscription), and what takes the deliveries it brings.

A subscription's ``owner`` is a ``Subscriber``: what the node hands each message that matched it
locally. Routing itself never calls it; it reads only ``subject``, ``queue`` and ``weight``, and
compares owners by identity (a publisher with echo off excludes its own subscriptions). The
receivers of a node's Redis pattern subscriptions, kept in a ``PatternIndex`` rather than a trie,
are ``PatternSubscriber``s. Both are declared here, below every package that has receivers, so
that the node and its tests type their side against one declaration.

The record is deliberately not generic in its owner's type: compiled, a generic class costs every
instance more memory, and a node holds one of these per subscription. Interest learned from other
nodes is kept in the same tries as subscriptions held for the link that announced it
(``routing.remote``), which has no deliveries to take: ``NOBODY`` owns those, and the patterns of a
permission list.
"""

from __future__ import annotations

from collections.abc import Hashable
from typing import Final, Protocol

from routing.message import Message

__all__ = ["NOBODY", "PatternSubscriber", "Subscriber", "Subscription"]


class Subscriber(Protocol):
    """What takes a local delivery for one of its subscriptions: a client connection, one of the
    node's own services."""

    def deliver(self, sub: Subscription, msg: Message) -> bool:
        """Take one message; False if it was not delivered (closed, filtered, over its max)."""
        ...


class PatternSubscriber(Hashable, Protocol):
    """What takes a delivery for a Redis pattern subscription (a ``PatternIndex`` owner, hence
    hashable)."""

    def deliver_pattern(self, pattern: bytes, channel: bytes, msg: Message) -> bool:
        """Take one message published on ``channel``, which ``pattern`` matched."""
        ...


class _Nobody:
    """The owner of subscriptions nothing takes deliveries for."""

    __slots__ = ()

    def deliver(self, sub: Subscription, msg: Message) -> bool:
        return False

    def __repr__(self) -> str:
        return "NOBODY"


NOBODY: Final[Subscriber] = _Nobody()
"""The owner of a subscription that only stands for interest: a pattern of a permission list,
interest a link announced. It takes no deliveries."""


class Subscription:
    """One interest in a subject, optionally as a member of a queue group.

    Identity-hashed: two subscriptions on the same subject are two subscriptions, and a trie can hold
    both. The routing core reads only ``subject``, ``queue`` and ``weight``; the other fields belong to
    whoever owns the subscription (a client connection keeps its ``sid`` and auto-unsubscribe counters
    here so the publish path needs no second lookup).

    Attributes:
        subject: the subject or wildcard pattern.
        queue: the queue group name, or None for a plain subscription.
        sid: the owner's identifier for it (a NATS client's subscription id).
        owner: what takes deliveries for it: a connection, an internal consumer (``NOBODY`` where
            nothing does).
        weight: how many members this entry stands for; remote queue interest carries the far
            side's member count here. Local subscriptions are always 1.
        max_msgs: deliveries after which the owner drops it (0: no limit).
        delivered: deliveries so far, for ``max_msgs``.

    A plain class (not attrs): compiled, its fields are read as C struct members, and every
    delivery reads several of them.
    """

    __slots__ = ("delivered", "max_msgs", "owner", "queue", "sid", "subject", "weight")

    def __init__(
        self,
        subject: str,
        queue: str | None = None,
        sid: bytes = b"",
        owner: Subscriber = NOBODY,
        weight: int = 1,
        max_msgs: int = 0,
        delivered: int = 0,
    ) -> None:
        self.subject = subject
        self.queue = queue
        self.sid = sid
        self.owner = owner
        self.weight = weight
        self.max_msgs = max_msgs
        self.delivered = delivered

    def __repr__(self) -> str:
        return (
            f"Subscription(subject={self.subject!r}, queue={self.queue!r}, sid={self.sid!r}, "
            f"owner={self.owner!r}, weight={self.weight!r}, max_msgs={self.max_msgs!r}, "
            f"delivered={self.delivered!r})"
        )
