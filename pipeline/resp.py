"""A small blocking RESP2 client: a sans-I/O codec (``encode`` and ``Parser``) and ``RespClient``.

Spark executors import this module in their own Python workers, so it needs nothing beyond the standard
library and attrs (redis-py is only a development dependency of this project, and the ``spark``
extra stays PySpark and pyarrow). The pipeline needs a handful of commands (AUTH, SELECT, TYPE, XRANGE,
XREVRANGE, XADD, DEL, SCAN), all with plain RESP2 replies, and pipelining for bulk XADD.
"""

from __future__ import annotations

import enum
import socket
from collections.abc import Iterable, Sequence

import attrs

Reply = bytes | int | list["Reply"] | None
"""A decoded reply: bulk and simple strings as bytes, integers, arrays, null as None (errors raise)."""

Arg = bytes | str | int


class ServerError(Exception):
    """An error reply (``-ERR ...``), its text as the server sent it."""


class ProtocolError(Exception):
    """Bytes that are not RESP2."""


def _as_bytes(arg: Arg) -> bytes:
    if isinstance(arg, bytes):
        return arg
    return str(arg).encode()


def encode(args: Sequence[Arg]) -> bytes:
    """One command as a RESP array of bulk strings."""
    parts = [b"*%d\r\n" % len(args)]
    for arg in args:
        data = _as_bytes(arg)
        parts.append(b"$%d\r\n%s\r\n" % (len(data), data))
    return b"".join(parts)


class Incomplete(enum.Enum):
    """``Parser.next_reply``'s answer when the buffer holds no whole reply yet."""

    INCOMPLETE = enum.auto()


@attrs.define
class Parser:
    """Incremental RESP2 decoder: ``feed`` bytes, then ``next_reply`` until it returns ``INCOMPLETE``.

    An error reply is returned as a ``ServerError`` instance (not raised), so a pipelined caller can
    match each reply to its command.
    """

    _buffer: bytearray = attrs.field(factory=bytearray)
    _pos: int = 0

    def feed(self, data: bytes) -> None:
        if self._pos:
            del self._buffer[: self._pos]
            self._pos = 0
        self._buffer += data

    def next_reply(self) -> Reply | ServerError | Incomplete:
        try:
            reply, pos = self._parse(self._pos)
        except IndexError:
            return Incomplete.INCOMPLETE
        except ValueError as error:
            raise ProtocolError(f"a malformed length or integer: {error}") from None
        self._pos = pos
        return reply

    def _line(self, pos: int) -> tuple[bytes, int]:
        end = self._buffer.find(b"\r\n", pos)
        if end < 0:
            raise IndexError
        return bytes(self._buffer[pos:end]), end + 2

    def _parse(self, pos: int) -> tuple[Reply | ServerError, int]:
        kind = self._buffer[pos]
        line, pos = self._line(pos + 1)
        if kind == 0x2B:  # +
            return line, pos
        if kind == 0x2D:  # -
            return ServerError(line.decode(errors="replace")), pos
        if kind == 0x3A:  # :
            return int(line), pos
        if kind == 0x24:  # $
            size = int(line)
            if size < 0:
                return None, pos
            if len(self._buffer) < pos + size + 2:
                raise IndexError
            return bytes(self._buffer[pos : pos + size]), pos + size + 2
        if kind == 0x2A:  # *
            count = int(line)
            if count < 0:
                return None, pos
            items: list[Reply] = []
            for _ in range(count):
                item, pos = self._parse(pos)
                if isinstance(item, ServerError):
                    raise ProtocolError(f"error inside an array: {item}")
                items.append(item)
            return items, pos
        raise ProtocolError(f"unexpected reply type byte {kind!r}")


@attrs.define
class RespClient:
    """One blocking connection. ``call`` sends one command; ``pipeline`` sends many and reads all the
    replies, raising the first error only after every reply is read (the connection stays in step)."""

    _sock: socket.socket
    _parser: Parser = attrs.field(factory=Parser)

    @classmethod
    def connect(cls, host: str, port: int, timeout: float) -> RespClient:
        return cls(socket.create_connection((host, port), timeout=timeout))

    def close(self) -> None:
        self._sock.close()

    def __enter__(self) -> RespClient:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def call(self, *args: Arg) -> Reply:
        return self.pipeline([args])[0]

    def pipeline(self, commands: Iterable[Sequence[Arg]]) -> list[Reply]:
        encoded = [encode(args) for args in commands]
        self._sock.sendall(b"".join(encoded))
        replies: list[Reply] = []
        failure: ServerError | None = None
        while len(replies) < len(encoded):
            reply = self._parser.next_reply()
            if reply is Incomplete.INCOMPLETE:
                data = self._sock.recv(1 << 16)
                if not data:
                    raise ConnectionError("the server closed the connection")
                self._parser.feed(data)
                continue
            if isinstance(reply, ServerError):
                failure = failure or reply
                replies.append(None)
            else:
                replies.append(reply)
        if failure is not None:
            raise failure
        return replies
