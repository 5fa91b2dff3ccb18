"""The MSG frame, the one a busy link carries nearly all the time: its record, its bytes written
in one piece, and read straight out of the decoder's buffer.

A MSG frame is the msgpack array ``["MSG", account, subject, reply, headers, payload, [queue,
...]]`` (``cluster.frames`` describes every frame). ``pack_message`` makes exactly the bytes
msgpack's own packer makes of that array (``use_bin_type``: texts as str, the rest as bin, each in
its shortest form), without building the array; ``read_message``
reads such a frame in place, copying out only its fields, and leaves anything else to the general
way (msgpack, then the checks). On a node forwarding a million messages a second, the list, the
packer's type dispatch, the unpacker's objects and the copies were a fifth of its time.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Final, final

from routing.message import Message

if TYPE_CHECKING:
    from mypy_extensions import i64  # (a machine integer once compiled; an int otherwise)

__all__ = ["MessageFrame", "pack_message", "read_message"]


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


_NIL: Final = b"\xc0"
_FIXSTR: Final = tuple([bytes([0xA0 | n]) for n in range(32)])
_BIN8: Final = tuple([bytes([0xC4, n]) for n in range(256)])
_FIXARRAY: Final = tuple([bytes([0x90 | n]) for n in range(16)])


def pack_message(account: str, msg: Message, queues: tuple[str, ...]) -> bytes:
    """The MSG frame of ``msg`` in ``account`` (for the receiver to serve ``queues``), formatted in
    one piece: one allocation once compiled, where appending field by field to the outbox asked
    each field for its buffer, which cost more than the copy for fields this short."""
    name = account.encode()
    subject = msg.subject
    reply = msg.reply
    headers = msg.headers
    payload = msg.payload
    return b"\x97\xa3MSG%b%b%b%b%b%b%b%b%b%b%b" % (
        _text_head(len(name)), name, _blob_head(len(subject)), subject,
        _NIL if reply is None else _blob_head(len(reply)), b"" if reply is None else reply,
        _NIL if headers is None else _blob_head(len(headers)), b"" if headers is None else headers,
        _blob_head(len(payload)), payload,
        _FIXARRAY[0] if not queues else _queues(queues),
    )  # fmt: skip


def _queues(queues: tuple[str, ...]) -> bytes:
    n = len(queues)
    head = _FIXARRAY[n] if n < 16 else _head(0xDC, 0xDD, n)
    return head + b"".join([_text_head(len(name)) + name for name in [q.encode() for q in queues]])


def _text_head(n: int) -> bytes:
    if n < 32:
        return _FIXSTR[n]
    if n < 256:
        return bytes([0xD9, n])
    return _head(0xDA, 0xDB, n)


def _blob_head(n: int) -> bytes:
    return _BIN8[n] if n < 256 else _head(0xC5, 0xC6, n)


def _head(marker16: int, marker32: int, n: int) -> bytes:
    """A length past one byte: two bytes of it after ``marker16`` where they hold it, else four
    after ``marker32`` (big-endian, as msgpack writes every length)."""
    if n < 0x10000:
        return bytes([marker16]) + n.to_bytes(2, "big")
    return bytes([marker32]) + n.to_bytes(4, "big")


def read_message(buf: bytes, at: i64, max_frame: i64) -> tuple[MessageFrame | None, i64]:
    """The MSG frame at ``buf[at:]`` and where it ends, if it is whole, at most ``max_frame``
    bytes and written in the forms ``pack_message`` uses for short fields (texts of at most 255
    bytes, at most 15 queues); ``(None, -1)`` for anything else, odd or wrong, which the general
    way reads or refuses: this reads nothing that its checks would not read the same. Only the
    fields are copied out of the buffer."""
    end: i64 = len(buf)
    if (
        end - at < 12  # (the head, and five one-byte fields at least)
        or buf[at] != 0x97
        or buf[at + 1] != 0xA3
        or buf[at + 2] != 0x4D  # M
        or buf[at + 3] != 0x53  # S
        or buf[at + 4] != 0x47  # G
    ):
        return None, -1
    account_end = _text_end(buf, at + 5, end)
    subject_end = _blob_end(buf, account_end, end)
    reply_end = _nil_or_blob_end(buf, subject_end, end)
    headers_end = _nil_or_blob_end(buf, reply_end, end)
    payload_end = _blob_end(buf, headers_end, end)
    if payload_end < 0 or payload_end >= end or not 0x90 <= buf[payload_end] <= 0x9F:
        return None, -1
    count: i64 = buf[payload_end] - 0x90
    k: i64 = payload_end + 1
    queues: tuple[str, ...] = ()
    try:
        if count:  # (a message for a queue group: rarer, and no list made for the others)
            names: list[str] = []
            while count > 0:
                queue_end = _text_end(buf, k, end)
                if queue_end < 0:
                    return None, -1
                names.append(buf[_text_start(buf, k) : queue_end].decode())
                k = queue_end
                count -= 1
            queues = tuple(names)
        if k - at > max_frame:
            return None, -1
        account = buf[_text_start(buf, at + 5) : account_end].decode()
    except UnicodeDecodeError:
        return None, -1
    msg = Message(
        buf[_blob_start(buf, account_end) : subject_end],
        _nil_or_blob(buf, subject_end, reply_end),
        _nil_or_blob(buf, reply_end, headers_end),
        buf[_blob_start(buf, headers_end) : payload_end],
    )
    return MessageFrame(account, msg, queues), k


# Where a field starting at ``k`` ends (-1: not whole before ``end``, not in the form read here,
# or ``k`` itself -1), and where its bytes start.


def _text_end(buf: bytes, k: i64, end: i64) -> i64:
    if k < 0 or k >= end:
        return -1
    marker: i64 = buf[k]
    if 0xA0 <= marker <= 0xBF:
        last: i64 = k + 1 + (marker & 0x1F)
    elif marker == 0xD9 and k + 1 < end:
        last = k + 2 + buf[k + 1]
    else:
        return -1
    return last if last <= end else -1


def _text_start(buf: bytes, k: i64) -> i64:
    return k + 1 if buf[k] != 0xD9 else k + 2


def _blob_end(buf: bytes, k: i64, end: i64) -> i64:
    if k < 0 or k + 2 > end:
        return -1
    marker: i64 = buf[k]
    if marker == 0xC4:
        last: i64 = k + 2 + buf[k + 1]
    elif marker == 0xC5 and k + 3 <= end:
        last = k + 3 + (buf[k + 1] << 8 | buf[k + 2])
    elif marker == 0xC6 and k + 5 <= end:
        last = k + 5 + (buf[k + 1] << 24 | buf[k + 2] << 16 | buf[k + 3] << 8 | buf[k + 4])
    else:
        return -1
    return last if last <= end else -1


def _blob_start(buf: bytes, k: i64) -> i64:
    marker: i64 = buf[k]
    return k + 2 if marker == 0xC4 else k + 3 if marker == 0xC5 else k + 5


def _nil_or_blob_end(buf: bytes, k: i64, end: i64) -> i64:
    if 0 <= k < end and buf[k] == 0xC0:
        return k + 1
    return _blob_end(buf, k, end)


def _nil_or_blob(buf: bytes, k: i64, last: i64) -> bytes | None:
    return None if buf[k] == 0xC0 else buf[_blob_start(buf, k) : last]
