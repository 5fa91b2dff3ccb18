"""The link protocol between nodes, sans I/O: msgpack frames in, typed frames out, and back.

Every frame is one msgpack array whose first element names the operation. Frames are checked field
by field on the way in: a peer that sends a malformed frame (wrong types, unknown operation, bad
msgpack) or an oversized one gets a ``LinkError`` and the link is closed; nothing it sends can
reach the node in a shape the node does not expect.

Operations:

* ``HELLO {info}``: the first frame each side sends (server id and name, cluster, link kind,
  version, credential, pool slot, route URL, known peers).
* ``PING`` / ``PONG``: heartbeats; any frame counts as a sign of life.
* ``RS+ account subject queue weight`` / ``RS- account subject queue``: interest changes.
* ``SNAP account [[subject, queue, weight], ...]``: a batch of interest, sent when a link opens.
* ``MSG account subject reply headers payload [queue, ...]``: a message and the queue groups the
  receiver must serve.
* ``GOSSIP [{id, name, url}, ...]``: peers the sender knows, so the full mesh can form.
* ``GATEWAYS {cluster: [url, ...]}``: the gateway URLs of other clusters the sender knows, so
  every node of a cluster dials every cluster any of them has heard of.
* ``ERR text``: why the sender is about to close.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import attrs
import msgpack

__all__ = [
    "Err",
    "Frame",
    "FrameDecoder",
    "Gateways",
    "Gossip",
    "Hello",
    "LinkError",
    "MessageFrame",
    "Ping",
    "Pong",
    "Snapshot",
    "SubAdd",
    "SubRemove",
    "encode",
]


class LinkError(Exception):
    """A peer broke the link protocol; the link must close, with this as the logged reason."""


@attrs.define(slots=True)
class Hello:
    info: dict[str, Any]


@attrs.define(slots=True)
class Ping:
    pass


@attrs.define(slots=True)
class Pong:
    pass


@attrs.define(slots=True)
class SubAdd:
    account: str
    subject: str
    queue: str | None
    weight: int


@attrs.define(slots=True)
class SubRemove:
    account: str
    subject: str
    queue: str | None


@attrs.define(slots=True)
class Snapshot:
    account: str
    entries: list[tuple[str, str | None, int]]


@attrs.define(slots=True)
class MessageFrame:
    account: str
    subject: bytes
    reply: bytes | None
    headers: bytes | None
    payload: bytes
    queues: tuple[str, ...]


@attrs.define(slots=True)
class Gossip:
    peers: list[dict[str, str]]


@attrs.define(slots=True)
class Gateways:
    known: dict[str, list[str]]


@attrs.define(slots=True)
class Err:
    text: str


Frame = Hello | Ping | Pong | SubAdd | SubRemove | Snapshot | MessageFrame | Gossip | Gateways | Err

_PING: bytes = msgpack.packb(["PING"])
_PONG: bytes = msgpack.packb(["PONG"])


def encode(frame: Frame) -> bytes:
    """The bytes of one frame."""
    if isinstance(frame, MessageFrame):
        return _pack(
            ["MSG", frame.account, frame.subject, frame.reply, frame.headers, frame.payload,
             list(frame.queues)]
        )  # fmt: skip
    if isinstance(frame, SubAdd):
        return _pack(["RS+", frame.account, frame.subject, frame.queue, frame.weight])
    if isinstance(frame, SubRemove):
        return _pack(["RS-", frame.account, frame.subject, frame.queue])
    if isinstance(frame, Ping):
        return _PING
    if isinstance(frame, Pong):
        return _PONG
    if isinstance(frame, Snapshot):
        return _pack(["SNAP", frame.account, [list(e) for e in frame.entries]])
    if isinstance(frame, Hello):
        return _pack(["HELLO", frame.info])
    if isinstance(frame, Gossip):
        return _pack(["GOSSIP", frame.peers])
    if isinstance(frame, Gateways):
        return _pack(["GATEWAYS", frame.known])
    return _pack(["ERR", frame.text])


_packer = msgpack.Packer(use_bin_type=True)


def _pack(obj: list[Any]) -> bytes:
    data: bytes = _packer.pack(obj)
    return data


def _str(value: Any) -> str:
    if type(value) is not str:
        raise LinkError(f"expected a string, got {type(value).__name__}")
    return value


def _opt_str(value: Any) -> str | None:
    return None if value is None else _str(value)


def _bytes(value: Any) -> bytes:
    if type(value) is not bytes:
        raise LinkError(f"expected bytes, got {type(value).__name__}")
    return value


def _opt_bytes(value: Any) -> bytes | None:
    return None if value is None else _bytes(value)


def _weight(value: Any) -> int:
    if type(value) is not int or value < 1:
        raise LinkError(f"bad queue weight {value!r}")
    return value


def _entry(value: Any) -> tuple[str, str | None, int]:
    if type(value) is not list or len(value) != 3:
        raise LinkError("bad snapshot entry")
    return _str(value[0]), _opt_str(value[1]), _weight(value[2])


def _gateways(value: Any) -> dict[str, list[str]]:
    if type(value) is not dict:
        raise LinkError("bad gateway list")
    return {_str(name): [_str(url) for url in _list(urls)] for name, urls in value.items()}


def _list(value: Any) -> list[Any]:
    if type(value) is not list:
        raise LinkError(f"expected an array, got {type(value).__name__}")
    return value


def _decode(obj: Any) -> Frame:
    if type(obj) is not list or not obj:
        raise LinkError("a frame must be a non-empty array")
    op, n = obj[0], len(obj)
    if op == "MSG" and n == 7:
        queues = obj[6]
        if type(queues) is not list:
            raise LinkError("bad queue list")
        return MessageFrame(
            _str(obj[1]), _bytes(obj[2]), _opt_bytes(obj[3]), _opt_bytes(obj[4]), _bytes(obj[5]),
            tuple([_str(q) for q in queues]) if queues else (),
        )  # fmt: skip
    if op == "RS+" and n == 5:
        return SubAdd(_str(obj[1]), _str(obj[2]), _opt_str(obj[3]), _weight(obj[4]))
    if op == "RS-" and n == 4:
        return SubRemove(_str(obj[1]), _str(obj[2]), _opt_str(obj[3]))
    if op == "PING" and n == 1:
        return Ping()
    if op == "PONG" and n == 1:
        return Pong()
    if op == "SNAP" and n == 3 and type(obj[2]) is list:
        return Snapshot(_str(obj[1]), [_entry(e) for e in obj[2]])
    if op == "HELLO" and n == 2 and type(obj[1]) is dict:
        return Hello(obj[1])
    if op == "GOSSIP" and n == 2 and type(obj[1]) is list:
        peers = obj[1]
        if not all(type(p) is dict and all(type(v) is str for v in p.values()) for p in peers):
            raise LinkError("bad gossip")
        return Gossip(peers)
    if op == "GATEWAYS" and n == 2:
        return Gateways(_gateways(obj[1]))
    if op == "ERR" and n == 2:
        return Err(_str(obj[1]))
    raise LinkError(f"unknown or malformed frame {str(op)[:16]!r}/{n}")


class FrameDecoder:
    """Bytes in, checked frames out.

    Args:
        max_frame: the largest frame (in bytes) a peer may send; a larger one is a ``LinkError``
            as soon as that much of it is buffered, so a peer cannot make the node buffer without
            bound.
    """

    __slots__ = ("_unpacker",)

    def __init__(self, max_frame: int) -> None:
        self._unpacker = msgpack.Unpacker(
            raw=False, max_buffer_size=max_frame, strict_map_key=True, use_list=True
        )

    def receive_data(self, data: bytes) -> None:
        try:
            self._unpacker.feed(data)
        except msgpack.BufferFull as exc:
            raise LinkError("frame larger than the largest allowed") from exc

    def frames(self) -> Iterator[Frame]:
        """Every complete frame buffered so far, in order."""
        try:
            for obj in self._unpacker:
                yield _decode(obj)
        except (msgpack.UnpackException, ValueError, RecursionError) as exc:
            raise LinkError(f"undecodable frame: {exc}") from exc
