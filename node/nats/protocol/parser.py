"""Incremental parsers for the NATS client protocol: bytes in, events out, no I/O.

The protocol is a sequence of control lines, some followed by a payload of a size the line states.
Data arrives in arbitrary pieces (one byte at a time in the tests); ``receive_data`` buffers them and
``events`` yields every complete operation, raising ``ProtocolError`` at the first bad one (events
before it are still yielded, so a connection can act on them first, as nats-server does).

How it reads fast: a client's read is nearly always a run of PUBs, and ``_read_pubs`` reads that run
straight out of the buffer (``_scan_pub`` finds each line's blanks, size and CR in one pass; only
the subject, reply and payload are copied out). Whatever follows the run (another verb, anything
odd, an incomplete PUB) is read the general way: the rest of the buffer is split on CRLF in one
call, every control line then is one piece, and so is every payload that holds no CRLF (nearly all
of them); a payload that does is re-joined from the pieces its size says it spans. A PUB line
written as clients write it is read in place there too; any other line is split into its
arguments. That is what lets a single-threaded node keep up with fast publishers. A control line
ended by a bare LF (which nats-server accepts) is read out of its piece from where the line before
it ended, so a run of such lines costs as little as CRLF lines do.

A payload that spans many reads is not re-joined with every read: ``receive_data`` collects chunks
until as many bytes as the pending operation needs have arrived.

Both directions share the framing: ``ClientOpParser`` reads what clients send (the server side),
``ServerOpParser`` reads what servers send (used by tests and the benchmark client).
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any, ClassVar, Generic, TypeVar

from node.config.options import MAX_CONTROL_LINE, MAX_PAYLOAD
from node.nats.protocol.connect import decode_connect
from node.nats.protocol.errors import ProtocolError
from node.nats.protocol.events import (
    ClientEvent,
    Connect,
    Err,
    Info,
    Msg,
    Ok,
    Ping,
    Pong,
    PubBatch,
    ServerEvent,
    Sub,
    Unsub,
)
from routing import Message

if TYPE_CHECKING:
    from mypy_extensions import i64  # (a machine integer once compiled; an int otherwise)

__all__ = ["ClientOpParser", "ServerOpParser"]

UNKNOWN_OP = "Unknown Protocol Operation"
MAX_CONTROL_LINE_EXCEEDED = "maximum control line exceeded"
MAX_PAYLOAD_VIOLATION = "Maximum Payload Violation"

E = TypeVar("E")
P = TypeVar("P")

# How a verb is read: LINE verbs are built from the control line alone; PAYLOAD verbs end in a size,
# HEADERS verbs in a header size and a total size, and are built once the payload is in.
LINE, PAYLOAD, HEADERS = 0, 1, 2
Verb = tuple[int, Callable[..., Any]]
# Verbs nats-server reads with nothing between them and what follows: CONNECT and INFO take their
# argument from the next byte on, and PING, PONG and +OK ignore everything up to the line end.
_GLUED = (b"CONNECT", b"INFO", b"PING", b"PONG", b"+OK")
_LONGEST_VERB = len(b"CONNECT")


def _spellings(verb: str) -> list[bytes]:
    """Every upper/lower-case spelling of a verb: verbs are case-insensitive on the wire."""
    pairs = [(c.lower(), c.upper()) if c.isalpha() else (c,) for c in verb]
    return ["".join(p).encode() for p in itertools.product(*pairs)]


def _table(*groups: tuple[int, dict[str, Callable[..., Any]]]) -> dict[bytes, Verb]:
    table: dict[bytes, Verb] = {}
    for kind, verbs in groups:
        for verb, build in verbs.items():
            table.update(dict.fromkeys(_spellings(verb), (kind, build)))
    return table


def _json_arg(args: list[bytes], line: bytes, what: str) -> dict[str, Any]:
    try:
        value = json.loads(line.lstrip()[len(args[0]) :])
    except (ValueError, RecursionError):  # (deep nesting such as [[[[... fits in a control line)
        value = None
    if not isinstance(value, dict):
        raise ProtocolError(None, reason=f"malformed {what} arguments")
    return value


def _size(field: bytes) -> int:
    """A size as nats-server reads one: one to nine ASCII digits."""
    size = _digits(field)
    if size < 0:
        raise ProtocolError(None, reason=f"bad size {field[:16]!r}")
    return size


def _digits(field: bytes) -> int:
    """The value of one to nine ASCII digits; -1 for anything else (read digit by digit: on the
    publish path, cheaper than ``isdigit`` and ``int`` of bytes)."""
    if not field or len(field) > 9:
        return -1
    value = 0
    for digit in field:
        if digit < 48 or digit > 57:
            return -1
        value = value * 10 + digit - 48
    return value


def _scan_pub(data: bytes, start: i64, end: i64) -> tuple[int, int, int, int]:
    """A client's PUB line at ``start`` as nearly every one is written (``PUB subject size`` or
    ``PUB subject reply size``, single blanks, a size of 1-9 digits), read in place up to its CR or
    ``end``: the blank after the subject, the blank after the reply (-1 without one), the size, and
    where the line stopped (its CR, or ``end``). Any other line, odd or wrong, is ``_NOT_SCANNED``
    (size -1) and goes the general way, which splits it and finds what is wrong.

    Returning positions (a tuple of machine integers once compiled) rather than the split line
    spares the list and the bytes objects of the verb and the size on the publish path."""
    if (
        end - start < 7
        or data[start] != 80
        or data[start + 1] != 85
        or data[start + 2] != 66
        or data[start + 3] != 32
    ):  # b"PUB "
        return _NOT_SCANNED
    first: i64 = -1
    second: i64 = -1
    size: i64 = 0  # the value of the field being read, -1 once it is not a number of 1-9 digits
    k: i64 = start + 4
    while k < end:
        c: i64 = data[k]
        if c <= 32:
            if c == 13:
                break
            # A blank that is not the first after a field, or whitespace other than a blank.
            if c != 32 or data[k - 1] == 32 or second >= 0:
                return _NOT_SCANNED
            if first < 0:
                first = k
            else:
                second = k
            size = 0
        elif 48 <= c <= 57 and 0 <= size < 100_000_000:
            size = size * 10 + c - 48
        else:
            size = -1
        k += 1
    last: i64 = second if second >= 0 else first
    if last < 0 or not 0 < k - 1 - last <= 9 or size < 0:
        return _NOT_SCANNED
    return first, second, size, k


_NOT_SCANNED = (-1, -1, -1, -1)


def _read_pubs(buf: bytes, out: list[Any], max_line: int, max_payload: int) -> int:
    """Read the run of PUBs ``buf`` starts with, each line as ``_scan_pub`` reads one and its
    payload whole and followed by CRLF, into ``out`` as Messages; return where the first thing
    that is not such a PUB starts (an incomplete one, another verb, anything odd or wrong: the
    general way reads it). Neither the buffer nor its lines are split: only the subject, the reply
    and the payload are copied out of the buffer."""
    size: i64 = len(buf)
    pos: i64 = 0
    while True:
        first, second, total, cr = _scan_pub(buf, pos, size)
        if total < 0 or total > max_payload or cr - pos - 4 > max_line:
            return pos
        start: i64 = cr + 2
        end: i64 = start + total
        if end + 2 > size or buf[cr + 1] != 10 or buf[end] != 13 or buf[end + 1] != 10:
            return pos
        reply = buf[first + 1 : second] if second >= 0 else None
        out.append(Message(buf[pos + 4 : first], reply, None, buf[start:end]))
        pos = end + 2


def _bad_arguments(args: list[bytes], line: bytes) -> ProtocolError:
    """Wrong arguments close the connection without an ``-ERR``; but a verb alone on its line never
    gets that far in nats-server, which wants a blank after PUB, HPUB, SUB, UNSUB and -ERR."""
    if len(line.lstrip()) == len(args[0]):
        return ProtocolError(UNKNOWN_OP, reason=f"{args[0]!r} without arguments")
    return ProtocolError(None, reason=f"bad arguments to {args[0]!r}")


def _arguments_length(line: bytes, verb: bytes, build: Callable[..., Any]) -> int:
    """What nats-server holds against max_control_line: the line after the verb and the blanks
    after it. PING, PONG and +OK lines are not checked (nats-server does not even keep them)."""
    if build is _ping or build is _pong or build is _ok:
        return 0
    return len(line.lstrip()[len(verb) :].lstrip(b" \t"))


class _OpParser(Generic[E, P]):
    """The framing both directions share; subclasses say what each verb means.

    Payload verbs build a ``P``; when ``_batch`` is set, consecutive ones are yielded as one event
    made by it, otherwise each ``P`` is itself the event.
    """

    _verbs: ClassVar[dict[bytes, Verb]]
    _common: ClassVar[bytes]
    """The verb nearly every operation has, in capitals (PUB, MSG): compared before the table."""
    _batch: ClassVar[type[Any] | None] = None
    _reads_pub: ClassVar[bool] = False
    """Whether PUB lines are this side's to read (and ``_scan_pub`` may read them in place)."""

    def __init__(self, *, max_control_line: int, max_payload: int) -> None:
        self.max_control_line = max_control_line
        self.max_payload = max_payload
        self._buf = b""
        self._pos = 0  # bytes of _buf already consumed
        self._chunks: list[bytes] = []
        self._size = 0  # bytes buffered beyond _pos, chunks included
        self._need = 1  # bytes that must be buffered before parsing can progress

    def receive_data(self, data: bytes) -> None:
        """Buffer bytes read from the peer."""
        self._chunks.append(data)
        self._size += len(data)

    @property
    def buffered(self) -> int:
        """Bytes received and not yet made into events."""
        return self._size

    def clear(self) -> None:
        """Forget everything buffered: the connection is closing, and nothing more will be read."""
        self._buf, self._pos, self._chunks, self._size, self._need = b"", 0, [], 0, 1

    def events(self) -> Iterator[E]:
        """Yield every complete operation buffered so far; raise at the first invalid one.

        The position is saved before every event, so an iteration abandoned half-way loses nothing
        but the events not yet taken; the next call resumes after the last one yielded.
        """
        if self._size < self._need:
            return
        buf = self._buf[self._pos :] if self._pos else self._buf
        if self._chunks:
            buf = b"".join([buf, *self._chunks])
            self._chunks = []
        self._buf, self._pos = buf, 0
        batch: list[Any] = []
        if self._reads_pub:
            # The run of PUBs a publisher's read nearly always is, read without a split; what
            # follows it, if anything, is split and read the general way.
            taken = _read_pubs(buf, batch, self.max_control_line, self.max_payload)
            if taken:
                buf = buf[taken:]
                self._buf = buf
        parts = buf.split(b"\r\n")
        last = len(parts) - 1  # parts[last] is not terminated by CRLF (yet)
        verbs = self._verbs
        common = self._common
        common_verb = verbs[common]
        reads_pub = self._reads_pub
        batch_of = self._batch
        max_line, max_payload = self.max_control_line, self.max_payload
        error: ProtocolError | None = None
        # Bare LFs are rare: when every LF belongs to a CRLF, no line needs searching for one.
        bare_lf = buf.count(b"\n") != last
        # parts[i][off:] starts at buf[pos]: a piece holding bare-LF lines is read from an offset,
        # never re-sliced, so a long run of them costs no more than CRLF lines.
        event: Any
        pos = i = off = 0
        while i < last or (bare_lf and i == last and parts[i].find(b"\n", off) >= 0):
            piece = parts[i]
            lf = piece.find(b"\n", off) if bare_lf else -1
            if lf >= 0:
                # A bare LF ended this control line; what follows it in the piece comes next.
                line = piece[off:lf]
                next_i, next_off = i, lf + 1
            else:
                line = piece[off:] if off else piece
                next_i, next_off = i + 1, 0
            line_end = pos + len(line) + (1 if lf >= 0 else 2)
            try:
                scan = _scan_pub(line, 0, len(line)) if reads_pub else _NOT_SCANNED
                if scan[3] != len(line):  # (a CR inside the line: the general way reads it)
                    scan = _NOT_SCANNED
                first, second, total, _ = scan
                if total >= 0:  # (a PUB read in place: no ``args``)
                    kind, build = common_verb
                    if len(line) - 4 > max_line:
                        raise ProtocolError(MAX_CONTROL_LINE_EXCEEDED)
                else:
                    args = line.split()
                    if args and args[0] == common:  # (cheaper than hashing the verb to look it up)
                        kind, build = common_verb
                    else:
                        verb = verbs.get(args[0]) if args else None
                        if verb is None:
                            args, verb = self._glued(line)
                        kind, build = verb
                    if len(line) > max_line and _arguments_length(line, args[0], build) > max_line:
                        raise ProtocolError(MAX_CONTROL_LINE_EXCEEDED)
                    if kind != LINE:
                        total = _digits(args[-1]) if len(args) >= 3 else -1
                        if total < 0:
                            raise _bad_arguments(args, line)
                if kind == LINE:
                    event = build(args, line)
                else:
                    if total > max_payload:
                        raise ProtocolError(MAX_PAYLOAD_VIOLATION)
                    # The payload is the next piece if it holds no CRLF, else pieces re-joined.
                    # When it runs into the last piece, which holds no CRLF, it is not complete
                    # yet; or it is, and what follows it is not a CRLF.
                    j = next_i
                    if j >= last:
                        self._await_payload(len(buf) - line_end, total)
                        self._need = line_end - pos + total + 2
                        break
                    payload = parts[j][next_off:] if next_off else parts[j]
                    if len(payload) != total:
                        while len(payload) < total and j + 1 < last:
                            j += 1
                            payload = payload + b"\r\n" + parts[j]
                        if len(payload) < total:
                            self._await_payload(len(buf) - line_end, total)
                            self._need = line_end - pos + total + 2
                            break
                        if len(payload) > total:
                            raise ProtocolError(UNKNOWN_OP, reason="payload not followed by CRLF")
                    if first >= 0:
                        reply = line[first + 1 : second] if second >= 0 else None
                        event = Message(line[4:first], reply, None, payload)
                    elif build is _pub:  # (a client's PUB: called directly, not through ``verbs``)
                        event = _pub(args, None, payload)
                    elif kind == PAYLOAD:
                        event = build(args, None, payload)
                    else:
                        header_size = _size(args[-2])
                        if header_size > total:
                            raise ProtocolError(None, reason="header size larger than total")
                        event = build(args, payload[:header_size], payload[header_size:])
                    line_end += total + 2
                    next_i, next_off = j + 1, 0
            except ProtocolError as exc:
                error = exc
                break
            if kind != LINE and batch_of is not None:
                batch.append(event)
            else:
                if batch:
                    assert batch_of is not None
                    self._pos = pos
                    yield batch_of(batch)
                    batch = []
                self._pos = line_end
                yield event
            pos, i, off = line_end, next_i, next_off
        else:
            tail = parts[last][off:] if off else parts[last]
            if len(tail) > max_line:
                try:
                    kept = self._unfinished(tail)
                except ProtocolError as exc:
                    error = exc
                else:
                    if len(kept) < len(tail):
                        self._buf = buf = kept
                        pos = 0
            self._need = len(buf) - pos + 1
        self._pos = pos
        self._size = len(buf) - pos
        if batch:
            assert batch_of is not None
            yield batch_of(batch)
        if error is not None:
            raise error

    @staticmethod
    def _await_payload(available: int, size: int) -> None:
        """Raise if a payload that seems incomplete has all its bytes and the two after it in: its
        CRLF is missing. nats-server fails there and then, so neither waits for a line end."""
        if available >= size + 2:
            raise ProtocolError(UNKNOWN_OP, reason="payload not followed by CRLF")

    def _glued(self, line: bytes) -> tuple[list[bytes], Verb]:
        """The arguments and verb of a line whose first word is not a verb, if nats-server reads
        one there (``CONNECT{...}``, ``PINGjunk``); otherwise ``Unknown Protocol Operation``."""
        line = line.lstrip()
        start = line[:_LONGEST_VERB].upper()
        for name in _GLUED:
            verb = self._verbs.get(name)
            if verb is not None and start.startswith(name):
                return [line[: len(name)], *line[len(name) :].split()], verb
        raise ProtocolError(UNKNOWN_OP, reason=f"unknown operation {line[:32]!r}")

    def _unfinished(self, tail: bytes) -> bytes:
        """Check a long control line still waiting for its end, as nats-server checks one at the
        end of every read, and return what of it must be kept.

        Bytes nats-server would skip are dropped, so a peer cannot fill memory with them: the rest
        of a PING, PONG or +OK line, and blanks around a verb.
        """
        tail = tail.lstrip()
        if len(tail) <= _LONGEST_VERB:
            return tail  # (it may yet become a verb)
        args = tail.split()
        verb = self._verbs.get(args[0]) if args else None
        if verb is None:
            args, verb = self._glued(tail)
        name, build = args[0], verb[1]
        cr = b"\r" if tail.endswith(b"\r") else b""  # the first half of the line end
        if build is _ping or build is _pong or build is _ok:
            return name + cr
        rest = tail[len(name) :].lstrip(b" \t")
        if len(rest) - len(cr) > self.max_control_line:
            raise ProtocolError(MAX_CONTROL_LINE_EXCEEDED)
        return name + b" " + rest


def _pub(args: list[bytes], headers: bytes | None, payload: bytes) -> Message:
    """``PUB subject [reply] size``."""
    if len(args) == 3:
        return Message(args[1], None, None, payload)
    if len(args) == 4:
        return Message(args[1], args[2], None, payload)
    raise ProtocolError(None, reason="wrong number of arguments to PUB")


def _hpub(args: list[bytes], headers: bytes | None, payload: bytes) -> Message:
    """``HPUB subject [reply] header-size total-size``."""
    if len(args) == 4:
        return Message(args[1], None, headers, payload)
    if len(args) == 5:
        return Message(args[1], args[2], headers, payload)
    raise ProtocolError(None, reason="wrong number of arguments to HPUB")


def _sub(args: list[bytes], line: bytes) -> Sub:
    if len(args) == 3:
        return Sub(args[1], None, args[2])
    if len(args) == 4:
        return Sub(args[1], args[2], args[3])
    raise _bad_arguments(args, line)


def _unsub(args: list[bytes], line: bytes) -> Unsub:
    if len(args) == 2:
        return Unsub(args[1])
    if len(args) == 3:
        # A max that is not a number unsubscribes at once, as nats-server's parseSize(-1) does.
        return Unsub(args[1], int(args[2]) if args[2].isdigit() and len(args[2]) <= 9 else 0)
    raise _bad_arguments(args, line)


def _msg(args: list[bytes], headers: bytes | None, payload: bytes) -> Msg:
    """``MSG subject sid [reply] size``."""
    if len(args) == 4:
        return Msg(args[1], args[2], None, payload)
    if len(args) == 5:
        return Msg(args[1], args[2], args[3], payload)
    raise ProtocolError(None, reason="wrong number of arguments to MSG")


def _hmsg(args: list[bytes], headers: bytes | None, payload: bytes) -> Msg:
    """``HMSG subject sid [reply] header-size total-size``."""
    if len(args) == 5:
        return Msg(args[1], args[2], None, payload, headers)
    if len(args) == 6:
        return Msg(args[1], args[2], args[3], payload, headers)
    raise ProtocolError(None, reason="wrong number of arguments to HMSG")


def _err(args: list[bytes], line: bytes) -> Err:
    text = line.lstrip()[len(args[0]) :]
    if not text:
        raise _bad_arguments(args, line)  # (but any text after a blank, even none, will do)
    text = text.strip()
    return Err(text.strip(b"'").decode(errors="replace"))


def _connect(args: list[bytes], line: bytes) -> Connect:
    return Connect(decode_connect(line.lstrip()[len(args[0]) :]))


def _info(args: list[bytes], line: bytes) -> Info:
    return Info(_json_arg(args, line, "INFO"))


def _ping(args: list[bytes], line: bytes) -> Ping:
    return Ping()


def _pong(args: list[bytes], line: bytes) -> Pong:
    return Pong()


def _ok(args: list[bytes], line: bytes) -> Ok:
    return Ok()


class ClientOpParser(_OpParser[ClientEvent, Message]):
    """Parses what a client sends: CONNECT, PUB, HPUB, SUB, UNSUB, PING, PONG (and INFO, +OK and
    -ERR, which a client may send too; a server ignores the first two and closes on the last).

    Consecutive PUBs and HPUBs come out as one ``PubBatch``. Argument errors (a PUB without a size,
    a size that is not 1-9 digits) raise a ``ProtocolError`` without a message: nats-server closes
    such connections without an ``-ERR``. An unknown verb, an empty line, a verb that needs
    arguments alone on its line, or a payload not ended by CRLF is ``Unknown Protocol Operation``;
    an oversized PUB is ``Maximum Payload Violation`` (raised on its control line, before the
    payload is read); arguments past the limit, ``maximum control line exceeded``. An HPUB's header
    block is passed on as sent, empty when its header size is 0: whether headers may be sent at all
    is the connection's decision.
    """

    _verbs = _table(
        (LINE, {"SUB": _sub, "UNSUB": _unsub, "PING": _ping, "PONG": _pong, "CONNECT": _connect,
                "INFO": _info, "+OK": _ok, "-ERR": _err}),
        (PAYLOAD, {"PUB": _pub}),
        (HEADERS, {"HPUB": _hpub}),
    )  # fmt: skip
    _common = b"PUB"
    _batch = PubBatch
    _reads_pub = True

    def __init__(
        self, *, max_control_line: int = MAX_CONTROL_LINE, max_payload: int = MAX_PAYLOAD
    ) -> None:
        super().__init__(max_control_line=max_control_line, max_payload=max_payload)


class ServerOpParser(_OpParser[ServerEvent, Msg]):
    """Parses what a server sends: INFO, MSG, HMSG, PING, PONG, +OK, -ERR (the client's side)."""

    _verbs = _table(
        (LINE, {"PING": _ping, "PONG": _pong, "+OK": _ok, "INFO": _info, "-ERR": _err}),
        (PAYLOAD, {"MSG": _msg}),
        (HEADERS, {"HMSG": _hmsg}),
    )  # fmt: skip
    _common = b"MSG"

    def __init__(
        self, *, max_control_line: int = MAX_CONTROL_LINE, max_payload: int = 64 * MAX_PAYLOAD
    ) -> None:
        super().__init__(max_control_line=max_control_line, max_payload=max_payload)
