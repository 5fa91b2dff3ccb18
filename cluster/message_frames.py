"""The MSG frame, the one a busy link carries nearly all the time: its record, and its bytes written
straight into an outbox.

A MSG frame is the msgpack array ``["MSG", account, subject, reply, headers, payload, [queue,
...]]`` (``cluster.frames`` describes every frame). ``write_message`` appends exactly the bytes
msgpack's own packer makes of that array (``use_bin_type``: texts as str, the rest as bin, each in
its shortest form), without building the array or an intermediate ``bytes``: on a node forwarding
a million messages a second, the list, the packer's type dispatch and the copy were an eighth of
its time.
"""

from __future__ import annotations

from typing import Final, final

from routing.message import Message

__all__ = ["MessageFrame", "write_message"]


@final
class MessageFrame:
    """A message from another node: its account, the message, and the queue groups the receiver
    must serve.

    A plain class, as ``routing.Message`` is, not an attrs record: compiled, it is a native object,
    where attrs' generated ``__init__`` would run as interpreted Python for every message.
    """

    __slots__ = ("account", "msg", "queues")

    def __init__(self, account: str, msg: Message, queues: tuple[str, ...]) -> None:
        self.account = account
        self.msg = msg
        self.queues = queues

    def __eq__(self, other: object) -> bool:
        return isinstance(other, MessageFrame) and (
            self.account == other.account and self.msg == other.msg and self.queues == other.queues
        )

    __hash__ = None  # type: ignore[assignment]

    def __repr__(self) -> str:
        return f"MessageFrame({self.account!r}, {self.msg!r}, {self.queues!r})"


_HEAD: Final = b"\x97\xa3MSG"
"""A seven-element array, then the text ``MSG``."""
_NIL: Final = b"\xc0"
_FIXSTR: Final = tuple([bytes([0xA0 | n]) for n in range(32)])
_BIN8: Final = tuple([bytes([0xC4, n]) for n in range(256)])
_FIXARRAY: Final = tuple([bytes([0x90 | n]) for n in range(16)])


def write_message(out: bytearray, account: str, msg: Message, queues: tuple[str, ...]) -> None:
    """Append the MSG frame of ``msg`` in ``account`` (for the receiver to serve ``queues``)."""
    out += _HEAD
    _text(out, account)
    _blob(out, msg.subject)
    reply = msg.reply
    if reply is None:
        out += _NIL
    else:
        _blob(out, reply)
    headers = msg.headers
    if headers is None:
        out += _NIL
    else:
        _blob(out, headers)
    _blob(out, msg.payload)
    n = len(queues)
    if n < 16:
        out += _FIXARRAY[n]
    else:
        out += _head(0xDC, 0xDD, n)
    for queue in queues:
        _text(out, queue)


def _text(out: bytearray, text: str) -> None:
    data = text.encode()
    n = len(data)
    if n < 32:
        out += _FIXSTR[n]
    elif n < 256:
        out += bytes([0xD9, n])
    else:
        out += _head(0xDA, 0xDB, n)
    out += data


def _blob(out: bytearray, data: bytes) -> None:
    n = len(data)
    if n < 256:
        out += _BIN8[n]
    else:
        out += _head(0xC5, 0xC6, n)
    out += data


def _head(marker16: int, marker32: int, n: int) -> bytes:
    """A length past one byte: two bytes of it after ``marker16`` where they hold it, else four
    after ``marker32`` (big-endian, as msgpack writes every length)."""
    if n < 0x10000:
        return bytes([marker16]) + n.to_bytes(2, "big")
    return bytes([marker32]) + n.to_bytes(4, "big")
