"""Events to bytes, in both directions; the inverse of ``node.nats.protocol.parser``.

The server's delivery path formats ``MSG`` lines inline for speed; these functions are the reference
forms it must agree with (the tests check that it does) and what clients and tests use.
"""

from __future__ import annotations

import json
from typing import Any

__all__ = [
    "OK",
    "PING",
    "PONG",
    "connect",
    "err",
    "hpub",
    "info",
    "msg",
    "pub",
    "sub",
    "unsub",
]

PING = b"PING\r\n"
PONG = b"PONG\r\n"
OK = b"+OK\r\n"


def _json(fields: dict[str, Any]) -> bytes:
    return json.dumps(fields, separators=(",", ":")).encode()


def info(fields: dict[str, Any]) -> bytes:
    """``INFO {json} \\r\\n``, with nats-server's space before the line end."""
    return b"INFO " + _json(fields) + b" \r\n"


def err(message: str) -> bytes:
    """``-ERR`` with the text in single quotes, which is how clients recognise it. Bytes a client
    sent that are not UTF-8, quoted in ``message`` as ``surrogateescape`` made them, go back as sent."""
    return b"-ERR '" + message.encode("utf-8", "surrogateescape") + b"'\r\n"


def msg(
    subject: bytes, sid: bytes, reply: bytes | None, payload: bytes, headers: bytes | None = None
) -> bytes:
    """``MSG``, or ``HMSG`` when there are headers."""
    if headers is None:
        if reply:
            return b"MSG %b %b %b %d\r\n%b\r\n" % (subject, sid, reply, len(payload), payload)
        return b"MSG %b %b %d\r\n%b\r\n" % (subject, sid, len(payload), payload)
    total = len(headers) + len(payload)
    if reply:
        return b"HMSG %b %b %b %d %d\r\n%b%b\r\n" % (
            subject, sid, reply, len(headers), total, headers, payload,
        )  # fmt: skip
    return b"HMSG %b %b %d %d\r\n%b%b\r\n" % (subject, sid, len(headers), total, headers, payload)


def connect(options: dict[str, Any]) -> bytes:
    return b"CONNECT " + _json(options) + b"\r\n"


def pub(subject: bytes, payload: bytes, reply: bytes | None = None) -> bytes:
    if reply:
        return b"PUB %b %b %d\r\n%b\r\n" % (subject, reply, len(payload), payload)
    return b"PUB %b %d\r\n%b\r\n" % (subject, len(payload), payload)


def hpub(subject: bytes, headers: bytes, payload: bytes, reply: bytes | None = None) -> bytes:
    total = len(headers) + len(payload)
    if reply:
        return b"HPUB %b %b %d %d\r\n%b%b\r\n" % (
            subject, reply, len(headers), total, headers, payload,
        )  # fmt: skip
    return b"HPUB %b %d %d\r\n%b%b\r\n" % (subject, len(headers), total, headers, payload)


def sub(subject: bytes, sid: bytes, queue: bytes | None = None) -> bytes:
    if queue:
        return b"SUB %b %b %b\r\n" % (subject, queue, sid)
    return b"SUB %b %b\r\n" % (subject, sid)


def unsub(sid: bytes, max_msgs: int | None = None) -> bytes:
    if max_msgs is None:
        return b"UNSUB %b\r\n" % sid
    return b"UNSUB %b %d\r\n" % (sid, max_msgs)
