"""An incremental parser for Redis requests: bytes in, ``Command``s out, no I/O.

A request is either a multibulk (``*<count>\\r\\n`` then ``$<length>\\r\\n<bytes>\\r\\n`` per
argument) or, when its first byte is not ``*``, an inline line split like a shell command line
(``node.resp.inline``). It reads them the way redis-server 7.0 to 7.2 does (``processInputBuffer``
in networking.c), quirks included, because clients and test suites see the difference:

- the lines of a multibulk end at a CR, and the byte after the CR is skipped unseen, as are the two
  bytes after a bulk's data; an inline line ends at an LF, with one CR before it dropped;
- a line with a NUL byte before its end never ends (redis-server looks for the end with
  ``strchr``), so it runs into the line limit below;
- ``*0`` and negative counts, and blank inline lines, are requests of no arguments: skipped;
- a count or length is a canonical decimal integer (no sign but ``-``, no leading zero, at most 20
  characters), else ``invalid multibulk length`` or ``invalid bulk length``.

Limits, each a constructor argument: an inline line (counted up to its LF, so a CR before it
counts) or a count or length line (up to its CR) longer than ``max_inline`` (64 KiB) is ``too big
inline request``, ``too big mbulk count string`` or ``too big bulk count string``. redis-server
checks this per read, so a longer line that arrives in one read can pass there; here the check is
on the line itself, which is what a slow sender meets there, so the
outcome never depends on how the bytes were cut. A bulk longer than ``max_bulk_len``
(redis-server's ``proto-max-bulk-len``) is ``invalid bulk length``. Before a client has
authenticated (``authenticated`` False, flipped by the connection), counts above 10 and bulks above
16 KiB are refused as redis-server refuses them. A multibulk whose bytes on the wire would exceed
``max_request`` closes the connection without a reply, as redis-server's query buffer limit does;
unlike redis-server it counts the arguments already read, so memory held per connection stays
within ``max_request`` (plus the Python object overhead of the arguments, about 40 bytes each).

How it stays fast and linear: bytes are joined only when they can complete something (the bytes a
pending bulk needs, or a chunk holding the line end being waited for), and everything after that is
index arithmetic on one ``bytes`` object with a moving offset, never re-slicing what is left. Counts
and lengths in their everyday shape (a few digits and a CR) are read digit by digit in place; only
what is unusual (a sign, a leading zero, a long or unfinished line) goes through the general checks.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import TYPE_CHECKING, Final

from node.integers import string2ll
from node.resp.errors import RespProtocolError
from node.resp.inline import split_inline

if TYPE_CHECKING:
    from mypy_extensions import i64  # (a machine integer once compiled; an int otherwise)

__all__ = [
    "INVALID_BULK_LENGTH",
    "INVALID_MULTIBULK_LENGTH",
    "MAX_BULK_LEN",
    "MAX_INLINE",
    "MAX_REQUEST",
    "TOO_BIG_BULK_COUNT",
    "TOO_BIG_INLINE",
    "TOO_BIG_MBULK_COUNT",
    "UNAUTHENTICATED_BULK_LENGTH",
    "UNAUTHENTICATED_MULTIBULK_LENGTH",
    "Command",
    "RequestParser",
    "expected_dollar",
]

MAX_INLINE: Final = 64 * 1024
"""redis-server's ``PROTO_INLINE_MAX_SIZE``."""
MAX_BULK_LEN: Final = 512 * 1024 * 1024
"""redis-server's default ``proto-max-bulk-len``."""
MAX_REQUEST: Final = 1024 * 1024 * 1024
"""redis-server's default ``client-query-buffer-limit``."""
INT_MAX: Final = 2**31 - 1
"""The largest count redis-server takes."""
UNAUTHENTICATED_MAX_COUNT: Final = 10
UNAUTHENTICATED_MAX_BULK: Final = 16384

INVALID_MULTIBULK_LENGTH: Final = "invalid multibulk length"
INVALID_BULK_LENGTH: Final = "invalid bulk length"
UNAUTHENTICATED_MULTIBULK_LENGTH: Final = "unauthenticated multibulk length"
UNAUTHENTICATED_BULK_LENGTH: Final = "unauthenticated bulk length"
TOO_BIG_INLINE: Final = "too big inline request"
TOO_BIG_MBULK_COUNT: Final = "too big mbulk count string"
TOO_BIG_BULK_COUNT: Final = "too big bulk count string"

_STAR: Final = 42
_DOLLAR: Final = 36
_CR_BYTE: Final = 13
_NUL: Final = b"\0"
_CR: Final = b"\r"
_LF: Final = b"\n"


def expected_dollar(byte: int) -> str:
    """``expected '$', got 'x'`` for an argument line not starting with ``$``; redis-server
    writes the byte as it is, except CR and LF, which become a blank (an error line holds none).
    A byte that is not UTF-8 is kept as ``surrogateescape`` decodes it, so it goes back as sent."""
    got = " " if byte in b"\r\n" else bytes([byte]).decode("utf-8", "surrogateescape")
    return f"expected '$', got '{got}'"


class Command:
    """One request: its arguments as sent (the command name first, in the case it was sent), and
    whether it came as an inline line (redis-server refuses those from a replication source).

    A plain class rather than an attrs one: one is made per request, and compiled it costs an
    allocation instead of a call into interpreted ``__init__``."""

    __slots__ = ("args", "inline")

    def __init__(self, args: list[bytes], inline: bool = False) -> None:
        self.args = args
        self.inline = inline

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Command) and (self.args, self.inline) == (other.args, other.inline)

    __hash__ = None  # type: ignore[assignment]  # (mutable, like the list it holds)

    def __repr__(self) -> str:
        return f"Command({self.args!r}, {self.inline!r})"


_NO_ARGS: Final[list[bytes]] = []
"""The arguments held between requests (``_args`` with nothing ``_remaining``): shared, as nothing
is added to them until a count starts a request with a list of its own."""


def _short_decimal(buf: bytes, start: int, size: int) -> tuple[int, int]:
    """The count or length at ``start`` in its everyday shape, 1 to 18 digits with no leading zero
    ended by a CR that has a byte after it, and where that CR is; (-1, _) for anything else (a
    sign, a longer or unfinished line, an error), which the general path then reads. Digits are
    read in place: no slice, no ``find``, no ``int()``."""
    value: i64 = 0
    i: i64 = start
    end: i64 = start + 18 if start + 18 < size else size
    while i < end:
        c: i64 = buf[i]
        if c < 48 or c > 57:
            break
        value = value * 10 + c - 48
        i += 1
    if i == start or i + 1 >= size or buf[i] != _CR_BYTE or (buf[start] == 48 and i - start > 1):
        return -1, i
    return value, i


class RequestParser:
    """Parses what a Redis client sends; see the module docstring for the rules.

    ``receive_data`` buffers bytes, ``commands`` yields every complete request buffered so far and
    raises ``RespProtocolError`` at the first bad one (after yielding those before it, which
    redis-server executes before it answers the error). The iteration is lazy, so a connection that
    flips ``authenticated`` after an ``AUTH`` has it apply from the next request on.
    """

    def __init__(
        self,
        *,
        max_inline: int = MAX_INLINE,
        max_bulk_len: int = MAX_BULK_LEN,
        max_request: int = MAX_REQUEST,
        authenticated: bool = True,
    ) -> None:
        self.max_inline = max_inline
        self.max_bulk_len = max_bulk_len
        self.max_request = max_request
        self.authenticated = authenticated
        self._buf = b""
        self._pos = 0  # bytes of _buf already consumed
        self._chunks: list[bytes] = []
        self._size = 0  # bytes buffered beyond _pos, chunks included
        self._need = 1  # buffered bytes at which parsing can progress
        self._line_end: bytes | None = None  # the line end being waited for, if any
        self._nul = False  # whether _buf holds a NUL byte
        # The multibulk being read: arguments so far, how many are to come, the length of the one
        # whose data is awaited (-1 while its length line is), and its wire bytes consumed so far.
        self._args: list[bytes] = []
        self._remaining = 0
        self._bulk = -1
        self._request = 0

    def receive_data(self, data: bytes) -> None:
        """Buffer bytes read from the client."""
        self._chunks.append(data)
        self._size += len(data)
        if self._line_end is not None and self._line_end in data:
            self._need = 0

    @property
    def buffered(self) -> int:
        """Bytes received and not yet part of a yielded command (a partial request included)."""
        pending = self._bulk + 2 if self._bulk >= 0 else 0
        return self._size + self._request - pending

    def clear(self) -> None:
        """Forget everything buffered: the connection is closing, and nothing more will be read."""
        self._buf, self._pos, self._chunks, self._size = b"", 0, [], 0
        self._need, self._line_end = 1, None
        self._args, self._remaining, self._bulk, self._request = [], 0, -1, 0

    def _line(self, buf: bytes, pos: int, found: int, end: bytes, too_big: str) -> int:
        """Where the line at ``pos`` ends, given where ``end`` was ``found`` (-1: nowhere): -1 if
        it has not ended (a NUL before the end means never, see the module docstring). Raise
        ``too_big`` for a line longer than ``max_inline``; on -1, set what to wait for."""
        nul = buf.find(_NUL, pos, found if found >= 0 else len(buf))
        if nul >= 0:
            found = -1
        length = (found if found >= 0 else len(buf)) - pos
        if length > self.max_inline:
            raise RespProtocolError(too_big)
        if found < 0:
            self._need = self.max_inline + 1
            self._line_end = None if nul >= 0 else end
        return found

    def commands(self) -> Iterator[Command]:
        """Yield every complete request buffered so far; raise at the first invalid one.

        State is saved before every yield, so an iteration abandoned half-way loses nothing but
        the commands not yet taken; the next call resumes after the last one yielded.
        """
        if self._size < self._need:
            return
        buf = self._buf[self._pos :] if self._pos else self._buf
        if self._chunks:
            buf = b"".join([buf, *self._chunks])
            self._chunks = []
        self._buf, self._pos = buf, 0
        self._line_end = None
        # A line is checked for a NUL byte only when the buffer holds one (binary data may).
        # (``find``, not ``in``: CPython's ``in`` on bytes first tries the needle as an integer,
        # and formats and clears a TypeError for one that is bytes)
        self._nul = buf.find(_NUL) >= 0
        while True:
            command = self._next()
            if command is None:
                return
            yield command

    def _next(self) -> Command | None:
        """The next complete request in the buffer, or None (``_need`` says what to wait for).

        A plain method rather than the generator's body: compiled, a generator keeps its locals
        in an object, which would make every step of this loop a memory round trip."""
        buf, pos = self._buf, self._pos
        size = len(buf)
        nul = self._nul
        max_line, max_bulk = self.max_inline, self.max_bulk_len
        args, remaining, bulk, request = self._args, self._remaining, self._bulk, self._request
        try:
            while True:
                if not remaining:
                    if pos >= size:
                        self._need = 1
                        break
                    if buf[pos] != _STAR:
                        lf = buf.find(_LF, pos)
                        if nul or lf < 0 or lf - pos > max_line:
                            lf = self._line(buf, pos, lf, _LF, TOO_BIG_INLINE)
                            if lf < 0:
                                break
                        end = lf - 1 if lf > pos and buf[lf - 1] == _CR_BYTE else lf
                        line_args = split_inline(buf[pos:end])
                        pos = lf + 1
                        if line_args:
                            self._sync(pos, _NO_ARGS, 0, -1, 0)
                            return Command(line_args, True)
                        continue
                    count, cr = _short_decimal(buf, pos + 1, size)
                    if count < 0 or cr - pos > max_line:
                        cr = buf.find(_CR, pos)
                        if nul or cr < 0 or cr - pos > max_line:
                            cr = self._line(buf, pos, cr, _CR, TOO_BIG_MBULK_COUNT)
                            if cr < 0:
                                break
                        if cr + 1 >= size:
                            self._need = size - pos + 1
                            break
                        parsed = string2ll(buf[pos + 1 : cr])
                        if parsed is None or parsed > INT_MAX:
                            raise RespProtocolError(INVALID_MULTIBULK_LENGTH)
                        count = parsed
                    elif count > INT_MAX:
                        raise RespProtocolError(INVALID_MULTIBULK_LENGTH)
                    if count > UNAUTHENTICATED_MAX_COUNT and not self.authenticated:
                        raise RespProtocolError(UNAUTHENTICATED_MULTIBULK_LENGTH)
                    if count > 0:
                        args, remaining, request = [], count, cr + 2 - pos
                    pos = cr + 2
                    continue
                if bulk < 0:
                    length, cr = -1, pos
                    if pos < size and buf[pos] == _DOLLAR:
                        length, cr = _short_decimal(buf, pos + 1, size)
                    if length < 0 or cr - pos > max_line:
                        cr = buf.find(_CR, pos)
                        if nul or cr < 0 or cr - pos > max_line:
                            cr = self._line(buf, pos, cr, _CR, TOO_BIG_BULK_COUNT)
                            if cr < 0:
                                break
                        if cr + 1 >= size:
                            self._need = size - pos + 1
                            break
                        if buf[pos] != _DOLLAR:
                            raise RespProtocolError(expected_dollar(buf[pos]))
                        parsed = string2ll(buf[pos + 1 : cr])
                        if parsed is None or parsed < 0:
                            raise RespProtocolError(INVALID_BULK_LENGTH)
                        length = parsed
                    if length > max_bulk:
                        raise RespProtocolError(INVALID_BULK_LENGTH)
                    if length > UNAUTHENTICATED_MAX_BULK and not self.authenticated:
                        raise RespProtocolError(UNAUTHENTICATED_BULK_LENGTH)
                    request += cr + 2 - pos + length + 2
                    if request > self.max_request:
                        raise RespProtocolError(None, reason="request larger than max_request")
                    pos, bulk = cr + 2, length
                if size - pos < bulk + 2:
                    self._need = bulk + 2
                    break
                args.append(buf[pos : pos + bulk])
                pos += bulk + 2
                bulk = -1
                remaining -= 1
                if not remaining:
                    self._sync(pos, _NO_ARGS, 0, -1, 0)
                    return Command(args, False)
        except RespProtocolError:
            self._sync(pos, args, remaining, bulk, request)
            raise
        self._sync(pos, args, remaining, bulk, request)
        return None

    def _sync(self, pos: int, args: list[bytes], remaining: int, bulk: int, request: int) -> None:
        """Save where parsing stands."""
        self._size -= pos - self._pos
        self._pos = pos
        self._args, self._remaining, self._bulk, self._request = args, remaining, bulk, request
