"""The NATS client protocol as values: one class per operation, in each direction.

Subjects, reply subjects, sids and payloads stay ``bytes`` here, as they are on the wire: the publish
path forwards them without decoding. Events are plain slotted records built once per operation; treat
them as immutable.
"""

from __future__ import annotations

from typing import Any

import attrs

from routing import Message

__all__ = [
    "ClientEvent",
    "Connect",
    "Err",
    "Info",
    "Msg",
    "Ok",
    "Ping",
    "Pong",
    "PubBatch",
    "ServerEvent",
    "Sub",
    "Unsub",
]


@attrs.define(slots=True)
class Connect:
    """``CONNECT {json}``: the options it sets, each of its type (read as nats-server reads them,
    see ``node.nats.protocol.connect``)."""

    options: dict[str, Any]


@attrs.define(slots=True)
class PubBatch:
    """A run of consecutive PUB and HPUB operations, in the order they were sent.

    Publishing is the hot path, so a run of a thousand PUBs read at once is one event, and each
    PUB is parsed straight into the ``Message`` the publish path passes on. An HPUB's ``headers``
    is the raw block (``NATS/1.0`` ... blank line; empty when its header size is 0).
    """

    messages: list[Message]


@attrs.define(slots=True)
class Sub:
    """``SUB <subject> [queue] <sid>``."""

    subject: bytes
    queue: bytes | None
    sid: bytes


@attrs.define(slots=True)
class Unsub:
    """``UNSUB <sid> [max]``; ``max_msgs`` None unsubscribes at once."""

    sid: bytes
    max_msgs: int | None = None


@attrs.define(slots=True)
class Ping:
    """``PING``: a liveness probe, and a barrier (the answer comes after everything sent before it)."""


@attrs.define(slots=True)
class Pong:
    """``PONG``."""


@attrs.define(slots=True)
class Info:
    """``INFO {json}``: the server describing itself to a client."""

    fields: dict[str, Any]


@attrs.define(slots=True)
class Msg:
    """``MSG`` or, with ``headers``, ``HMSG``: one delivery to one subscription."""

    subject: bytes
    sid: bytes
    reply: bytes | None
    payload: bytes
    headers: bytes | None = None


@attrs.define(slots=True)
class Ok:
    """``+OK``: the acknowledgement a verbose client asked for."""


@attrs.define(slots=True)
class Err:
    """``-ERR '<message>'``."""

    message: str


ClientEvent = Connect | PubBatch | Sub | Unsub | Ping | Pong | Info | Ok | Err
"""What a client sends (a client may send INFO, +OK or -ERR too, which servers tolerate or close on)."""
ServerEvent = Info | Msg | Ok | Err | Ping | Pong
"""What a server sends."""
