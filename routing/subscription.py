"""The record every trie stores: one subscription, local or remote."""

from __future__ import annotations

from typing import Any

__all__ = ["Subscription"]


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
        owner: what takes deliveries for it: a connection, a link, an internal consumer.
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
        owner: Any = None,
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
