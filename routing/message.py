"""One message, as every step of the publish path hands it on, and where it entered the node.

Whatever brought it in (a client of any protocol, a route, a gateway, an internal publisher), a
message is these four fields from then on: the broker matches on ``subject``, subscribers format
all four, links forward them. The account it belongs to and where it came from (``Origin``) travel
beside it, since they describe the journey rather than the message.

This module imports nothing else of the routing package, so every other module may import it.
"""

from __future__ import annotations

import enum
from collections.abc import Collection
from typing import final

__all__ = ["Message", "Origin", "Publication"]


class Origin(enum.Enum):
    """Where a message entered this node."""

    CLIENT = "client"
    """A local publisher: a client connection of any protocol, or an internal one."""
    ROUTE = "route"
    """A node of this cluster."""
    GATEWAY = "gateway"
    """Another cluster."""


@final
class Message:
    """A subject, an optional reply subject and header block, and the payload; never changed once
    made (reply mapping makes a new one with ``with_reply``)."""

    __slots__ = ("headers", "payload", "reply", "subject")

    def __init__(
        self, subject: bytes, reply: bytes | None, headers: bytes | None, payload: bytes
    ) -> None:
        self.subject = subject
        self.reply = reply
        self.headers = headers
        """A NATS header block (``NATS/1.0\\r\\n...``), or None for a plain message."""
        self.payload = payload

    def with_reply(self, reply: bytes | None) -> Message:
        return Message(self.subject, reply, self.headers, self.payload)

    def with_subject(self, subject: bytes) -> Message:
        return Message(subject, self.reply, self.headers, self.payload)

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Message) and (
            self.subject == other.subject
            and self.reply == other.reply
            and self.headers == other.headers
            and self.payload == other.payload
        )

    __hash__ = None  # type: ignore[assignment]  # (equal messages need not be the same message)

    def __repr__(self) -> str:
        return f"Message({self.subject!r}, {self.reply!r}, {self.headers!r}, {self.payload!r})"


@final
class Publication:
    """A message on its way through a node's publish path, with what describes its journey.

    The everyday path passes these fields as they are; this record carries them where a message
    takes a detour (reply mapping across gateways returns it rewritten, for the node to deliver).

    Attributes:
        account: the name of the account it belongs to (the node delivers it in that account
            whatever the detour: a detour never changes the account).
        msg: the message as links forward it.
        exclude: an owner whose subscriptions must not receive it (a publisher with echo off).
        origin: where it entered this node.
        queues: for a message from another node, the queue groups this node must serve.
        local: the message as local subscribers get it (default: ``msg``).
        skip: a link that must not get a copy (the gateway a reply already went back through).
    """

    __slots__ = ("account", "exclude", "local", "msg", "origin", "queues", "skip")

    def __init__(
        self,
        account: str,
        msg: Message,
        exclude: object = None,
        origin: Origin = Origin.CLIENT,
        queues: Collection[str] = (),
        *,
        local: Message | None = None,
        skip: object = None,
    ) -> None:
        self.account = account
        self.msg = msg
        self.exclude = exclude
        self.origin = origin
        self.queues = queues
        self.local = local
        self.skip = skip

    def detour(self, *, local: Message | None = None, skip: object = None) -> Publication:
        """The same publication with local subscribers' message or a link to skip set."""
        return Publication(
            self.account,
            self.msg,
            self.exclude,
            self.origin,
            self.queues,
            local=local if local is not None else self.local,
            skip=skip if skip is not None else self.skip,
        )
