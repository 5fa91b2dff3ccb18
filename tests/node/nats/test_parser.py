"""The NATS codec: every operation in both directions, the framing under any split of the stream, the
limits and the errors, as nats-server reads them.

A parser must yield the same operations whatever pieces the bytes arrive in (one byte at a time, or
all at once), and must fail with ``ProtocolError`` and nothing else, whatever it is fed. Runs of
PUBs are batched, and how a run is cut into batches depends on what has arrived, so streams are
compared as flat sequences of operations.
"""

from __future__ import annotations

import itertools
import json
from collections.abc import Callable, Iterable, Sequence

import pytest
from hypothesis import example, given
from hypothesis import strategies as st

from node.config.options import MAX_CONTROL_LINE, MAX_PAYLOAD
from node.nats.protocol import (
    ClientOpParser,
    Connect,
    Err,
    Info,
    Msg,
    Ok,
    Ping,
    Pong,
    ProtocolError,
    PubBatch,
    ServerOpParser,
    Sub,
    Unsub,
)
from node.nats.protocol import writer as w
from node.nats.protocol.parser import _read_pubs, _scan_pub
from routing import Message

UNKNOWN = "Unknown Protocol Operation"
MAX_LINE = "maximum control line exceeded"
MAX_PAY = "Maximum Payload Violation"
FAILED = object()
"""Stands for "no -ERR text" in expectations: a ProtocolError whose message is None."""

Parser = ClientOpParser | ServerOpParser
Outcome = tuple[list[object], object]
"""The operations yielded, flattened, and then None if all went well, or the error's message
(``FAILED`` for an error without one)."""


def flatten(events: Iterable[object]) -> list[object]:
    flat: list[object] = []
    for event in events:
        if isinstance(event, PubBatch):
            flat.extend(event.messages)
        else:
            flat.append(event)
    return flat


def run(parser: Parser, chunks: Iterable[bytes]) -> Outcome:
    """Feed ``chunks`` one by one, taking the events after each, up to the first error."""
    ops: list[object] = []
    try:
        for chunk in chunks:
            parser.receive_data(chunk)
            for event in parser.events():
                ops.extend(flatten([event]))
    except ProtocolError as exc:
        return ops, FAILED if exc.message is None else exc.message
    return ops, None


def client(data: bytes, **limits: int) -> Outcome:
    return run(ClientOpParser(**limits), [data])


def server(data: bytes) -> Outcome:
    return run(ServerOpParser(), [data])


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


def cut(data: bytes, points: Iterable[int]) -> list[bytes]:
    edges = [0, *sorted(points), len(data)]
    return [data[a:b] for a, b in itertools.pairwise(edges)]


def hello_headers(status: bytes = b"") -> bytes:
    return b"NATS/1.0" + status + b"\r\n\r\n"


# -- every operation -------------------------------------------------------------------------------

CLIENT_OPS: list[tuple[bytes, list[object]]] = [
    (b'CONNECT {"verbose":false,"name":"x"}\r\n', [Connect({"verbose": False, "name": "x"})]),
    (b'connect\t{"echo":false}\r\n', [Connect({"echo": False})]),
    (b'CONNECT{"pedantic":true}\r\n', [Connect({"pedantic": True})]),  # no blank needed
    (b"PUB foo 5\r\nhello\r\n", [Message(b"foo", None, None, b"hello")]),
    (b"PUB foo bar.1 5\r\nhello\r\n", [Message(b"foo", b"bar.1", None, b"hello")]),
    (b"PUB subj  5\r\nhello\r\n", [Message(b"subj", None, None, b"hello")]),  # nats-py, no reply
    (b"PUB foo 0\r\n\r\n", [Message(b"foo", None, None, b"")]),
    (b"pUb\tfoo\t\tr  2\r\nhi\r\n", [Message(b"foo", b"r", None, b"hi")]),
    (b"PUB foo 000000002\r\nhi\r\n", [Message(b"foo", None, None, b"hi")]),  # leading zeros, 9 digits
    (b"PUB foo 6\r\n\r\nab\r\n\r\n", [Message(b"foo", None, None, b"\r\nab\r\n")]),
    (b"PUB foo 4\r\n\r\n\r\n\r\n", [Message(b"foo", None, None, b"\r\n\r\n")]),
    (b"PUB foo 3\r\na\nb\r\n", [Message(b"foo", None, None, b"a\nb")]),
    (b"PUB foo 2\nhi\r\n", [Message(b"foo", None, None, b"hi")]),  # a bare LF ends the control line
    (
        b"HPUB foo 12 17\r\nNATS/1.0\r\n\r\nhello\r\n",
        [Message(b"foo", None, hello_headers(), b"hello")],
    ),
    (
        b"hpub foo _INBOX.1 24 24\r\nNATS/1.0\r\nA: b\r\nC: d\r\n\r\n\r\n",
        [Message(b"foo", b"_INBOX.1", b"NATS/1.0\r\nA: b\r\nC: d\r\n\r\n", b"")],
    ),
    (b"HPUB foo 0 5\r\nhello\r\n", [Message(b"foo", None, b"", b"hello")]),  # an empty header block
    (b"SUB foo 1\r\n", [Sub(b"foo", None, b"1")]),
    (b"SUB foo.* workers 22\r\n", [Sub(b"foo.*", b"workers", b"22")]),
    (b"SUB foo  1\r\n", [Sub(b"foo", None, b"1")]),  # nats-py, no queue
    (b"sub\tfoo\t\tq\t1 \r\n", [Sub(b"foo", b"q", b"1")]),
    (b"SUB foo 1\n", [Sub(b"foo", None, b"1")]),
    (b"UNSUB 1\r\n", [Unsub(b"1")]),
    (b"UNSUB 1 \r\n", [Unsub(b"1")]),  # nats-py, no max
    (b"unsub 7 10\r\n", [Unsub(b"7", 10)]),
    (b"UNSUB 7 0\r\n", [Unsub(b"7", 0)]),
    (b"UNSUB 7 many\r\n", [Unsub(b"7", 0)]),  # nats-server reads a bad max as "now"
    (b"UNSUB 7 0000000010\r\n", [Unsub(b"7", 0)]),
    (b"PING\r\n", [Ping()]),
    (b"ping\n", [Ping()]),
    (b"PING foo junk\r\n", [Ping()]),  # the rest of a PING line is ignored
    (b"PINGPONG\r\n", [Ping()]),
    (b"PONG\r\n", [Pong()]),
    (b"pong \r\n", [Pong()]),
    (b"+OK\r\n", [Ok()]),
    (b"+ok junk\r\n", [Ok()]),
    (b'INFO {"server_id":"x","headers":true} \r\n', [Info({"server_id": "x", "headers": True})]),
    (b"-ERR 'Unknown Protocol Operation'\r\n", [Err("Unknown Protocol Operation")]),
    (b"-ERR \r\n", [Err("")]),
]


@pytest.mark.parametrize(("data", "ops"), CLIENT_OPS)
def test_client_operations(data: bytes, ops: list[object]) -> None:
    assert client(data) == (ops, None)
    assert run(ClientOpParser(), bytewise(data)) == (ops, None)


SERVER_OPS: list[tuple[bytes, list[object]]] = [
    (
        b'INFO {"server_id":"N1","max_payload":1048576} \r\n',
        [Info({"server_id": "N1", "max_payload": 1048576})],
    ),
    (b"MSG foo 1 5\r\nhello\r\n", [Msg(b"foo", b"1", None, b"hello")]),
    (b"MSG foo 1 _INBOX.a 2\r\n\r\n\r\n", [Msg(b"foo", b"1", b"_INBOX.a", b"\r\n")]),
    (b"msg foo\t1  0\r\n\r\n", [Msg(b"foo", b"1", None, b"")]),
    (
        b"HMSG foo 2 12 14\r\nNATS/1.0\r\n\r\nhi\r\n",
        [Msg(b"foo", b"2", None, b"hi", hello_headers())],
    ),
    (
        b"HMSG _INBOX.x 7 16 16\r\nNATS/1.0 503\r\n\r\n\r\n",
        [Msg(b"_INBOX.x", b"7", None, b"", hello_headers(b" 503"))],
    ),
    (
        b"HMSG foo 3 reply 0 2\r\nhi\r\n",
        [Msg(b"foo", b"3", b"reply", b"hi", b"")],
    ),
    (b"+OK\r\n", [Ok()]),
    (b"-ERR 'Authorization Violation'\r\n", [Err("Authorization Violation")]),
    (b"PING\r\n", [Ping()]),
    (b"PONG\r\n", [Pong()]),
]


@pytest.mark.parametrize(("data", "ops"), SERVER_OPS)
def test_server_operations(data: bytes, ops: list[object]) -> None:
    assert server(data) == (ops, None)
    assert run(ServerOpParser(), bytewise(data)) == (ops, None)


@pytest.mark.parametrize(
    "data",
    [b"MSG foo 1 2\r\nhi\r\n", b"HMSG foo 1 0 2\r\nhi\r\n", b"RS+ $G foo\r\n", b"LS+ foo\r\n"],
)
def test_client_may_not_send_server_operations(data: bytes) -> None:
    assert client(data) == ([], UNKNOWN)


@pytest.mark.parametrize(
    "data", [b"PUB foo 2\r\nhi\r\n", b"SUB foo 1\r\n", b"CONNECT {}\r\n", b"UNSUB 1\r\n"]
)
def test_server_may_not_send_client_operations(data: bytes) -> None:
    assert server(data) == ([], UNKNOWN)


def test_consecutive_pubs_are_one_batch() -> None:
    parser = ClientOpParser()
    parser.receive_data(
        b"PUB a 1\r\nx\r\nHPUB b 12 13\r\nNATS/1.0\r\n\r\ny\r\nPING\r\nPUB c 1\r\nz\r\nSUB d 1\r\n"
    )
    assert list(parser.events()) == [
        PubBatch([Message(b"a", None, None, b"x"), Message(b"b", None, hello_headers(), b"y")]),
        Ping(),
        PubBatch([Message(b"c", None, None, b"z")]),
        Sub(b"d", None, b"1"),
    ]


def test_an_abandoned_iteration_resumes_after_the_last_event_taken() -> None:
    parser = ClientOpParser()
    parser.receive_data(b"PING\r\nPUB a 1\r\nx\r\nPONG\r\nPUB b 1\r\ny\r\n")
    events = parser.events()
    assert next(events) == Ping()
    assert next(events) == PubBatch([Message(b"a", None, None, b"x")])
    del events  # abandoned, as a connection that closes half-way through a read does
    assert list(parser.events()) == [Pong(), PubBatch([Message(b"b", None, None, b"y")])]
    assert list(parser.events()) == []


# -- any split of the stream -----------------------------------------------------------------------

CLIENT_STREAM = b"".join(data for data, _ in CLIENT_OPS)
CLIENT_STREAM_OPS = [op for _, ops in CLIENT_OPS for op in ops]
SERVER_STREAM = b"".join(data for data, _ in SERVER_OPS)
SERVER_STREAM_OPS = [op for _, ops in SERVER_OPS for op in ops]


@pytest.mark.parametrize(
    ("make", "data", "ops"),
    [
        (ClientOpParser, CLIENT_STREAM, CLIENT_STREAM_OPS),
        (ServerOpParser, SERVER_STREAM, SERVER_STREAM_OPS),
    ],
)
def test_every_split_point_gives_the_same_operations(
    make: Callable[[], Parser], data: bytes, ops: list[object]
) -> None:
    assert run(make(), [data]) == (ops, None)
    assert run(make(), bytewise(data)) == (ops, None)
    for point in range(len(data) + 1):
        assert run(make(), cut(data, [point])) == (ops, None), point


PUB_HI = Message(b"foo", None, None, b"hi")


@pytest.mark.parametrize(
    ("data", "outcome"),
    [
        (b"SUB foo 1\r\nPUB foo 2\r\nhi\r\nZZZ\r\n", ([Sub(b"foo", None, b"1"), PUB_HI], UNKNOWN)),
        (b"PUB foo 2\r\nhi\r\nPUB foo 2\r\nokX\r\n", ([PUB_HI], UNKNOWN)),
        (b"PUB foo 2\r\nhi\r\nPUB foo 11\r\n", ([PUB_HI], MAX_PAY)),
        (b"PUB foo 2\r\nhi\r\nPUB foo\r\n", ([PUB_HI], FAILED)),
        (b"PING\r\nSUB " + b"x" * 17 + b" 1\r\n", ([Ping()], MAX_LINE)),
        (b"PING\r\n" + b"Z" * 40, ([Ping()], UNKNOWN)),
    ],
)
def test_every_split_point_gives_the_same_error(data: bytes, outcome: Outcome) -> None:
    def parse(chunks: list[bytes]) -> Outcome:
        return run(ClientOpParser(max_control_line=16, max_payload=10), chunks)

    assert parse([data]) == outcome
    assert parse(bytewise(data)) == outcome
    for point in range(len(data) + 1):
        assert parse(cut(data, [point])) == outcome, point


# -- round trips through the writer ----------------------------------------------------------------

_BLANKS = b" \t\n\r\x0b\x0c"
words = st.lists(
    st.sampled_from([bytes([b]) for b in range(256) if b not in _BLANKS]), min_size=1, max_size=8
).map(b"".join)
"""Subjects, replies, sids, queue names: the parser takes any bytes but blanks."""
payloads = st.one_of(
    st.binary(max_size=24),
    st.lists(st.sampled_from([b"\r\n", b"\r", b"\n", b"PING\r\n", b"x", b" "]), max_size=6).map(
        b"".join
    ),
)
json_values = st.one_of(st.none(), st.booleans(), st.integers(-(10**6), 10**6), st.text(max_size=6))
options = st.dictionaries(st.text(max_size=6), json_values, max_size=4)
connect_options = st.fixed_dictionaries(
    {},
    optional={
        "verbose": st.booleans(),
        "echo": st.booleans(),
        "headers": st.booleans(),
        "protocol": st.integers(0, 1),
        "name": st.text(max_size=6),
        "user": st.text(max_size=6),
        "import": st.fixed_dictionaries({"allow": st.lists(st.text(max_size=3), max_size=2)}),
    },
)
"""CONNECT fields with values of their types (what a CONNECT may hold is a typed record)."""


@st.composite
def client_ops(draw: st.DrawFn) -> tuple[bytes, object]:
    """One client operation as the writer encodes it, and what the parser must make of it."""
    kind = draw(st.sampled_from(["pub", "hpub", "sub", "unsub", "ping", "pong", "connect"]))
    if kind == "pub":
        subject, reply, payload = draw(words), draw(st.none() | words), draw(payloads)
        return w.pub(subject, payload, reply), Message(subject, reply, None, payload)
    if kind == "hpub":
        subject, reply, payload = draw(words), draw(st.none() | words), draw(payloads)
        headers = draw(st.just(b"NATS/1.0\r\nK: v\r\n\r\n") | payloads)
        return w.hpub(subject, headers, payload, reply), Message(subject, reply, headers, payload)
    if kind == "sub":
        subject, queue, sid = draw(words), draw(st.none() | words), draw(words)
        return w.sub(subject, sid, queue), Sub(subject, queue, sid)
    if kind == "unsub":
        sid, most = draw(words), draw(st.none() | st.integers(0, 10**9 - 1))
        return w.unsub(sid, most), Unsub(sid, most)
    if kind == "connect":
        fields = draw(connect_options)
        return w.connect(fields), Connect(fields)
    return (w.PING, Ping()) if kind == "ping" else (w.PONG, Pong())


error_texts = st.text(
    st.characters(blacklist_categories=("Cs", "Cc", "Zs", "Zl", "Zp"), blacklist_characters="'"),
    min_size=1,
    max_size=12,
)


@st.composite
def server_ops(draw: st.DrawFn) -> tuple[bytes, object]:
    kind = draw(st.sampled_from(["info", "msg", "ok", "err", "ping", "pong"]))
    if kind == "info":
        fields = draw(options)
        return w.info(fields), Info(fields)
    if kind == "msg":
        subject, sid, reply, payload = draw(words), draw(words), draw(st.none() | words), draw(payloads)
        headers = draw(st.none() | payloads)
        return w.msg(subject, sid, reply, payload, headers), Msg(subject, sid, reply, payload, headers)
    if kind == "err":
        text = " ".join(draw(st.lists(error_texts, min_size=1, max_size=3)))
        return w.err(text), Err(text)
    return {"ok": (w.OK, Ok()), "ping": (w.PING, Ping()), "pong": (w.PONG, Pong())}[kind]


def chunkings(data: bytes) -> st.SearchStrategy[list[bytes]]:
    return st.lists(st.integers(0, len(data)), max_size=12).map(lambda points: cut(data, points))


@pytest.mark.slow
@given(st.lists(client_ops(), max_size=12), st.data())
def test_client_operations_round_trip(ops: list[tuple[bytes, object]], data: st.DataObject) -> None:
    wire = b"".join(encoded for encoded, _ in ops)
    expected = [op for _, op in ops]
    assert run(ClientOpParser(), [wire]) == (expected, None)
    assert run(ClientOpParser(), data.draw(chunkings(wire))) == (expected, None)


@given(st.lists(server_ops(), max_size=12), st.data())
def test_server_operations_round_trip(ops: list[tuple[bytes, object]], data: st.DataObject) -> None:
    wire = b"".join(encoded for encoded, _ in ops)
    expected = [op for _, op in ops]
    assert run(ServerOpParser(), [wire]) == (expected, None)
    assert run(ServerOpParser(), data.draw(chunkings(wire))) == (expected, None)


blanks = st.lists(st.sampled_from([b" ", b"\t"]), min_size=1, max_size=3).map(b"".join)
SPELLINGS: dict[bytes, tuple[list[bytes], bytes, object]] = {
    b"PUB": ([b"foo.bar", b"_INBOX.x", b"2"], b"ab\r\n", Message(b"foo.bar", b"_INBOX.x", None, b"ab")),
    b"SUB": ([b"foo.*", b"q", b"9"], b"", Sub(b"foo.*", b"q", b"9")),
    b"UNSUB": ([b"9", b"3"], b"", Unsub(b"9", 3)),
    b"PING": ([], b"", Ping()),
}
"""Per verb: its arguments, what follows the line, and the operation."""


@given(
    st.sampled_from(sorted(SPELLINGS)),
    st.lists(st.booleans(), min_size=5, max_size=5),
    st.lists(blanks, min_size=4, max_size=4),
    st.sampled_from([b"", b" ", b"\t "]),
    st.sampled_from([b"\r\n", b"\n"]),
    st.data(),
)
def test_any_spelling_clients_use(
    verb: bytes, upper: list[bool], seps: list[bytes], trailing: bytes, end: bytes, data: st.DataObject
) -> None:
    """Verbs in any case, any run of blanks between arguments and after the last, either line end."""
    arguments, after, op = SPELLINGS[verb]
    wire = bytes(c if up else c | 0x20 for c, up in zip(verb, upper, strict=False))
    for word, sep in zip(arguments, seps, strict=False):
        wire += sep + word
    wire += trailing + end + after
    assert run(ClientOpParser(), data.draw(chunkings(wire))) == ([op], None)


# -- whatever it is fed ----------------------------------------------------------------------------

SMALL = {"max_control_line": 24, "max_payload": 16}
"""Limits small enough for random streams to reach them."""

PIECES = [
    b"PUB ", b"HPUB ", b"SUB ", b"UNSUB ", b"PING", b"PONG", b"+OK", b"-ERR ", b"CONNECT ", b"INFO ",
    b"MSG ", b"HMSG ", b"{}", b"\r\n", b"\n", b"\r", b" ", b"\t", b"foo", b"q", b"1", b"2", b"12",
    b"0", b"NATS/1.0\r\n\r\n", b"hi",
]  # fmt: skip
soup = st.lists(st.one_of(st.sampled_from(PIECES), st.binary(max_size=3)), max_size=40).map(b"".join)
"""Bytes that look like the protocol often enough to reach deep into the parser."""


WORDS = [b"PUB", b"pub", b"a", b"a.b", b"_INBOX.x", b"0", b"7", b"12", b"000000007", b"0000000007"]
WORDS += [b"999999999", b"1234567890", b"x1", b"1x", b"\x01", b"\xff", b"a\x0bb", b""]


@given(
    st.lists(st.tuples(st.sampled_from(WORDS), st.sampled_from([b" ", b" ", b"  ", b"\t"])), max_size=6)
)
@example([(b"PUB", b" "), (b"a", b"  "), (b"7", b" ")])
@example([(b"PUB", b"  "), (b"a", b" "), (b"7", b" ")])
@example([(b"PUB", b" "), (b"a", b" "), (b"7", b" "), (b"", b" ")])
@example([(b"PUB", b" "), (b"a", b" "), (b"b", b" "), (b"c", b" "), (b"7", b" ")])
@example([(b"PUB", b" "), (b"a", b" "), (b"0000000007", b" ")])
@example([(b"PUB", b" "), (b"a", b"\t"), (b"7", b" ")])
def test_a_pub_line_read_in_place_reads_as_the_split_line(words: list[tuple[bytes, bytes]]) -> None:
    """The publish path reads ``PUB subject [reply] size`` without splitting the line: what it
    reads is what the split line says, and it reads every such line written with single blanks."""
    line = b"".join(word + blank for word, blank in words)[:-1] if words else b""
    args = line.split()
    split_reading = None
    if len(args) in (3, 4) and args[0] == b"PUB" and args[-1].isdigit() and len(args[-1]) <= 9:
        split_reading = (args[1], args[2] if len(args) == 4 else None, int(args[-1]))
    first, second, size, stop = _scan_pub(line, 0, len(line))
    assert stop == len(line) or size < 0
    if size >= 0:
        reply = line[first + 1 : second] if second >= 0 else None
        assert (line[4:first], reply, size) == split_reading
    else:
        plain = line == b" ".join(args) and all(c > 32 for c in line.replace(b" ", b""))
        assert split_reading is None or not plain


@pytest.mark.parametrize(
    ("wire", "taken", "messages"),
    [
        (b"PUB a 1\r\nx\r\nPUB b r 2\r\nyz\r\nPING\r\nPUB c 1\r\nq\r\n", 27,
         [Message(b"a", None, None, b"x"), Message(b"b", b"r", None, b"yz")]),
        (b"PUB a 4\r\nx\r\ny\r\nPUB b 5\r\nab", 15, [Message(b"a", None, None, b"x\r\ny")]),
        (b"PUB a 1\r\nx\r\nPUB b 9\r\n123456789\r\n", 12, [Message(b"a", None, None, b"x")]),
        (b"PUB a 1\r\nxy\r\n", 0, []),  # (no CRLF after the payload)
        (b"PUB a 1\nx\r\n", 0, []),  # (a bare LF)
        (b"PUB a 1\rx\r\n", 0, []),
        (b"PUB a 1\r", 0, []),
    ],
)  # fmt: skip
def test_a_run_of_pubs_is_read_out_of_the_buffer_up_to_what_is_not_one(
    wire: bytes, taken: int, messages: list[Message]
) -> None:
    """Up to the first thing that is not a complete PUB as clients write it, or one over the
    limits (max_payload 8 here): the general way reads that, and finds what is wrong with it."""
    out: list[Message] = []
    assert _read_pubs(wire, out, MAX_CONTROL_LINE, 8) == taken
    assert out == messages


def check_consistent(make: Callable[[], Parser], wire: bytes, chunks: Sequence[bytes]) -> None:
    """Only ``ProtocolError`` may escape (``run`` lets anything else through), and the outcome
    does not depend on how the bytes arrive."""
    whole = run(make(), [wire])
    assert run(make(), chunks) == whole
    assert run(make(), bytewise(wire)) == whole


@given(st.one_of(st.binary(max_size=200), soup), st.data())
def test_random_bytes_yield_events_or_a_protocol_error(wire: bytes, data: st.DataObject) -> None:
    chunks = data.draw(chunkings(wire))
    check_consistent(lambda: ClientOpParser(**SMALL), wire, chunks)
    check_consistent(lambda: ServerOpParser(**SMALL), wire, chunks)
    check_consistent(ClientOpParser, wire, chunks)


@st.composite
def mutated(draw: st.DrawFn, ops: st.SearchStrategy[tuple[bytes, object]]) -> bytes:
    """A valid stream with a few bytes flipped, inserted or deleted."""
    wire = bytearray(b"".join(encoded for encoded, _ in draw(st.lists(ops, min_size=1, max_size=8))))
    for _ in range(draw(st.integers(1, 4))):
        at = draw(st.integers(0, len(wire)))
        action = draw(st.sampled_from(["flip", "insert", "delete"]))
        byte = draw(st.sampled_from([*b"\r\n \t0123456789", *range(256)]))
        if action == "insert":
            wire.insert(at, byte)
        elif at < len(wire):
            if action == "flip":
                wire[at] = byte
            else:
                del wire[at]
    return bytes(wire)


@given(mutated(client_ops()), st.data())
def test_mutated_client_streams_fail_cleanly(wire: bytes, data: st.DataObject) -> None:
    chunks = data.draw(chunkings(wire))
    check_consistent(ClientOpParser, wire, chunks)
    check_consistent(lambda: ClientOpParser(**SMALL), wire, chunks)


@given(mutated(server_ops()), st.data())
def test_mutated_server_streams_fail_cleanly(wire: bytes, data: st.DataObject) -> None:
    chunks = data.draw(chunkings(wire))
    check_consistent(ServerOpParser, wire, chunks)
    check_consistent(lambda: ServerOpParser(**SMALL), wire, chunks)


# -- limits ----------------------------------------------------------------------------------------


def sub_line(arguments: int, *, before: bytes = b" ", after: bytes = b"") -> tuple[bytes, Sub]:
    """A SUB line whose arguments (what nats-server measures) are ``arguments`` bytes long."""
    subject = b"s" * (arguments - len(b" 1") - len(after))
    return b"SUB" + before + subject + b" 1" + after, Sub(subject, None, b"1")


@pytest.mark.parametrize(
    ("before", "after"),
    [(b" ", b""), (b" " * 50, b""), (b"\t", b" \t "), (b" ", b" " * 100)],
)
def test_control_line_of_exactly_the_limit_is_accepted(before: bytes, after: bytes) -> None:
    """Blanks after the verb do not count; blanks after the last argument do (as there)."""
    line, op = sub_line(MAX_CONTROL_LINE, before=before, after=after)
    assert client(line + b"\r\n") == ([op], None)
    # Still waiting for its line end: checked at the end of every read, and fine.
    assert client(line) == ([], None)
    assert client(line + b"\r") == ([], None)
    assert run(ClientOpParser(), [line, b"\r", b"\n"]) == ([op], None)


@pytest.mark.parametrize("after", [b"", b" " * 100])
def test_control_line_one_byte_over_the_limit_is_refused(after: bytes) -> None:
    line, _ = sub_line(MAX_CONTROL_LINE + 1, after=after)
    assert client(line + b"\r\n") == ([], MAX_LINE)
    assert client(line) == ([], MAX_LINE)  # before its line end arrives
    assert client(line + b"\r") == ([], MAX_LINE)
    assert run(ClientOpParser(), [b"PING\r\n" + line[:100], line[100:]]) == ([Ping()], MAX_LINE)


@pytest.mark.parametrize(
    ("line", "op"),
    [
        (
            b"PUB " + b"p" * (MAX_CONTROL_LINE - 2) + b" 2",
            Message(b"p" * (MAX_CONTROL_LINE - 2), None, None, b"hi"),
        ),
        (
            b"CONNECT "
            + json.dumps({"name": "n" * (MAX_CONTROL_LINE - 11)}, separators=(",", ":")).encode(),
            Connect({"name": "n" * (MAX_CONTROL_LINE - 11)}),
        ),
        (b"UNSUB 1" + b" " * (MAX_CONTROL_LINE - 1), Unsub(b"1")),
        (b"-ERR '" + b"e" * (MAX_CONTROL_LINE - 2) + b"'", Err("e" * (MAX_CONTROL_LINE - 2))),
    ],
)
def test_the_limit_applies_to_every_verb_with_arguments(line: bytes, op: object) -> None:
    payload = b"hi\r\n" if line.startswith(b"PUB") else b""
    assert client(line + b"\r\n" + payload) == ([op], None)
    longer = line[:-1] + b"xx" if not line.endswith(b" ") else line + b" "
    assert client(longer + b"\r\n" + payload) == ([], MAX_LINE)
    assert client(longer) == ([], MAX_LINE)


def test_ping_pong_and_ok_lines_are_not_limited() -> None:
    junk = b" junk" * 2000
    data = b"PING" + junk + b"\r\nPONG" + junk + b"\r\n+OK" + junk + b"\r\nPING\r\n"
    assert client(data) == ([Ping(), Pong(), Ok(), Ping()], None)
    # Fed in pieces, however long the line grows before its end arrives.
    assert run(ClientOpParser(), cut(data, range(0, len(data), 1000))) == (
        [Ping(), Pong(), Ok(), Ping()],
        None,
    )
    assert run(ClientOpParser(), [b"PING", *[b"x" * 4096] * 100, b"\r", b"\nPONG\r\n"]) == (
        [Ping(), Pong()],
        None,
    )


def test_blanks_after_a_verb_are_skipped_however_many() -> None:
    data = b"PUB" + b" " * 10_000 + b"foo 2\r\nhi\r\n"
    assert client(data) == ([PUB_HI], None)
    assert run(ClientOpParser(), cut(data, range(0, len(data), 1000))) == ([PUB_HI], None)


def test_an_endless_unknown_line_is_refused_before_it_ends() -> None:
    assert client(b"X" * (MAX_CONTROL_LINE + 10)) == ([], UNKNOWN)
    assert client(b"  " + b"PUBLISH " * 1000) == ([], UNKNOWN)


def test_payload_of_exactly_max_payload_is_accepted() -> None:
    payload = bytes(range(256)) * (MAX_PAYLOAD // 256)
    data = b"PUB foo %d\r\n%b\r\n" % (MAX_PAYLOAD, payload)
    assert client(data) == ([Message(b"foo", None, None, payload)], None)
    headers = b"NATS/1.0\r\n\r\n"
    data = b"HPUB foo 12 %d\r\n%b%b\r\n" % (MAX_PAYLOAD, headers, payload[12:])
    assert client(data) == ([Message(b"foo", None, headers, payload[12:])], None)


@pytest.mark.parametrize(
    "line", [b"PUB foo %d\r\n" % (MAX_PAYLOAD + 1), b"HPUB foo 12 %d\r\n" % (MAX_PAYLOAD + 1)]
)
def test_payload_over_max_payload_is_refused_before_it_is_read(line: bytes) -> None:
    assert client(line) == ([], MAX_PAY)
    assert client(b"PING\r\n" + line) == ([Ping()], MAX_PAY)


def test_max_payload_is_configurable() -> None:
    assert client(b"PUB foo 10\r\n0123456789\r\n", max_payload=10) == (
        [Message(b"foo", None, None, b"0123456789")],
        None,
    )
    assert client(b"PUB foo 11\r\n", max_payload=10) == ([], MAX_PAY)


# -- errors ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "data",
    [
        b"PUB foo\r\n",
        b"PUB \r\n",
        b"PUB foo -1\r\n",
        b"PUB foo abc\r\n",
        b"PUB foo +2\r\n",
        b"PUB foo 0000000002\r\n",  # ten digits
        b"PUB foo 99999999999999999999\r\n",
        b"PUB a b c 2\r\nhi\r\n",
        b"HPUB foo 5\r\nhello\r\n",
        b"HPUB foo x 5\r\nhello\r\n",
        b"HPUB foo -1 5\r\nhello\r\n",
        b"HPUB foo 0000000001 5\r\nhello\r\n",
        b"HPUB foo 6 5\r\nhello\r\n",  # header size larger than the total
        b"HPUB a b c 0 2\r\nhi\r\n",
        b"SUB foo\r\n",
        b"SUB \r\n",
        b"SUB a b c d\r\n",
        b"UNSUB 1 2 3\r\n",
        b"UNSUB \r\n",
        b"CONNECT\r\n",
        b"CONNECT {bad\r\n",
        b"CONNECT [1]\r\n",
        b"CONNECT " + b"[" * 4000 + b"\r\n",  # nested beyond the JSON decoder's recursion limit
        b"CONNECT {} {}\r\n",
        b"INFO {bad\r\n",
        b'CONNECTED {"verbose":false}\r\n',  # nats-server reads "ED {...}" as the argument
    ],
)
def test_argument_errors_have_no_message(data: bytes) -> None:
    """nats-server closes such connections without sending an -ERR."""
    assert client(data) == ([], FAILED)


@pytest.mark.parametrize(
    ("argument", "options"),
    [
        (b'{"verbose":null,"name":null}', {}),  # null leaves a field as it was
        (b'{"VERBOSE":false,"Echo":false}', {"verbose": False, "echo": False}),
        (b'{"verbose":false,"verbose":null}', {"verbose": False}),
        (b'{"verbose":true,"verbose":false}', {"verbose": False}),
        (b'{"unknown":{"a":[1]},"protocol":-0}', {"protocol": 0}),
        (b'{"name":"a\\ud800b","lang":"\\udfff"}', {"name": "a\ufffdb", "lang": "\ufffd"}),
        (b'{"version":"\xff1"}', {"version": "\ufffd1"}),  # bytes that are not UTF-8
        (b'{"name":"\\ud83d\\ude00"}', {"name": "\U0001f600"}),  # a pair is one character
        (b'{"pass":"\\ud800","auth_token":"x\xff"}', {"pass": "\ud800", "auth_token": "x\udcff"}),
        (
            b'{"import":{"allow":["a",null],"Deny":null}}',
            {"import": {"allow": ["a", None], "deny": None}},
        ),
    ],
)
def test_connect_fields_are_read_as_nats_server_reads_them(argument: bytes, options: object) -> None:
    """Into a typed record: known fields only, names in any case, null as absent; informational
    strings made valid Unicode, credentials left as sent (so that they fail authentication)."""
    assert client(b"CONNECT " + argument + b"\r\n") == ([Connect(options)], None)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "argument",
    [
        b'{"verbose":"yes"}',
        b'{"verbose":1}',
        b'{"pedantic":"no"}',
        b'{"user":5}',
        b'{"pass":true}',
        b'{"auth_token":5}',
        b'{"echo":1}',
        b'{"protocol":"1"}',
        b'{"protocol":1.0}',
        b'{"protocol":1e0}',
        b'{"protocol":99999999999999999999}',
        b'{"headers":[]}',
        b'{"name":{}}',
        b'{"Name":5}',
        b'{"import":{"allow":"a"}}',
        b'{"export":[]}',
        b'{"verbose":"x","verbose":false}',  # every occurrence is checked
        b'{"protocol":NaN}',
        b'{"x":Infinity}',
        b'{"verbose":false}\xff',
    ],
)
def test_connect_fields_of_the_wrong_type_are_a_parse_error(argument: bytes) -> None:
    assert client(b"CONNECT " + argument + b"\r\n") == ([], FAILED)


def bare_lf(encoded: bytes) -> bytes:
    """An operation with its control line ended by a bare LF (control lines hold no CRLF)."""
    return encoded.replace(b"\r\n", b"\n", 1)


@pytest.mark.slow
@given(st.lists(st.tuples(client_ops(), st.booleans()), max_size=16), st.data())
def test_bare_lf_and_crlf_line_ends_give_the_same_operations(
    ops: list[tuple[tuple[bytes, object], bool]], data: st.DataObject
) -> None:
    """Whichever line end each control line has, mixed at random, in any pieces."""
    wire = b"".join(bare_lf(encoded) if lf else encoded for (encoded, _), lf in ops)
    expected = [op for (_, op), _ in ops]
    assert run(ClientOpParser(), [wire]) == (expected, None)
    assert run(ClientOpParser(), data.draw(chunkings(wire))) == (expected, None)


@given(st.lists(client_ops(), max_size=8))
def test_bare_lf_lines_byte_at_a_time_give_the_same_operations(ops: list[tuple[bytes, object]]) -> None:
    crlf = b"".join(encoded for encoded, _ in ops)
    lf = b"".join(bare_lf(encoded) for encoded, _ in ops)
    expected = [op for _, op in ops]
    assert (
        run(ClientOpParser(), bytewise(lf)) == run(ClientOpParser(), bytewise(crlf)) == (expected, None)
    )


def test_a_long_run_of_bare_lf_lines_in_one_read() -> None:
    """Thousands of lines with no CRLF among them, as one piece: each is read from where the last
    ended (the parser once re-sliced the rest of the piece for every line)."""
    subs = [Sub(b"s.%d" % i, None, b"%d" % i) for i in range(5000)]
    wire = b"".join(b"SUB %b %b\n" % (sub.subject, sub.sid) for sub in subs) + b"PUB a 1\nx\r\nPING\n"
    assert client(wire) == ([*subs, Message(b"a", None, None, b"x"), Ping()], None)


@pytest.mark.parametrize(
    "data",
    [
        b"\r\n",
        b"\n",
        b"ZZZ\r\n",
        b"PUBS foo 2\r\n",
        b"SUBZZZ foo 1\r\n",
        b"PUB\r\n",  # nats-server wants a blank after these verbs before anything else
        b"HPUB\r\n",
        b"SUB\r\n",
        b"UNSUB\n",
        b"-ERR\r\n",
        b"-ERRX\r\n",
        b"P\r\n",
        b"CONNEC {}\r\n",
        b"PUB foo 2\r\nokX\r\n",  # a payload not followed by CRLF
        b"PUB foo 2\r\nok\n\r\n",
        b"PUB foo 2\r\nokXY",  # ... known as soon as the two bytes after it are in
        b"PUB foo 2\nok\rX",
        b"PUB foo 3\r\na\r\nb\r\n",
        b"PUB foo 1\r\n\r\n\r\n",
    ],
)
def test_unknown_operations(data: bytes) -> None:
    assert client(data) == ([], UNKNOWN)
    assert run(ClientOpParser(), bytewise(data)) == ([], UNKNOWN)


def test_a_payload_is_awaited_until_its_crlf_could_have_arrived() -> None:
    for partial in [
        b"PUB foo 2\r\nok",
        b"PUB foo 2\r\nok\r",
        b"PUB foo 3\r\na\r\n",
        b"PUB foo 3\r\na\r",
    ]:
        assert client(partial) == ([], None)


def test_events_before_an_error_are_yielded_first() -> None:
    parser = ClientOpParser(max_payload=100)
    parser.receive_data(b"SUB foo 1\r\nPUB a 1\r\nx\r\nPUB b 1\r\ny\r\nPUB c 200\r\n")
    events = parser.events()
    assert next(events) == Sub(b"foo", None, b"1")
    assert next(events) == PubBatch([Message(b"a", None, None, b"x"), Message(b"b", None, None, b"y")])
    with pytest.raises(ProtocolError) as error:
        next(events)
    assert error.value.message == MAX_PAY
    assert str(error.value) == MAX_PAY


def test_protocol_error_carries_the_text_for_the_peer() -> None:
    error = ProtocolError(None, reason="bad size")
    assert (error.message, str(error)) == (None, "bad size")
    error = ProtocolError("Invalid Subject")
    assert (error.message, str(error)) == ("Invalid Subject", "Invalid Subject")


# -- the writer ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("encoded", "expected"),
    [
        (w.info({"server_id": "N", "proto": 1}), b'INFO {"server_id":"N","proto":1} \r\n'),
        (w.connect({"verbose": False}), b'CONNECT {"verbose":false}\r\n'),
        (w.err("Stale Connection"), b"-ERR 'Stale Connection'\r\n"),
        (w.msg(b"foo", b"1", None, b"hi"), b"MSG foo 1 2\r\nhi\r\n"),
        (w.msg(b"foo", b"1", b"r", b"hi"), b"MSG foo 1 r 2\r\nhi\r\n"),
        (w.msg(b"foo", b"1", None, b"hi", b"H"), b"HMSG foo 1 1 3\r\nHhi\r\n"),
        (w.msg(b"foo", b"1", b"r", b"", b""), b"HMSG foo 1 r 0 0\r\n\r\n"),
        (w.pub(b"foo", b"hi"), b"PUB foo 2\r\nhi\r\n"),
        (w.pub(b"foo", b"hi", b"r"), b"PUB foo r 2\r\nhi\r\n"),
        (w.hpub(b"foo", b"H", b"hi"), b"HPUB foo 1 3\r\nHhi\r\n"),
        (w.hpub(b"foo", b"H", b"hi", b"r"), b"HPUB foo r 1 3\r\nHhi\r\n"),
        (w.sub(b"foo", b"1"), b"SUB foo 1\r\n"),
        (w.sub(b"foo", b"1", b"q"), b"SUB foo q 1\r\n"),
        (w.unsub(b"1"), b"UNSUB 1\r\n"),
        (w.unsub(b"1", 5), b"UNSUB 1 5\r\n"),
        (w.PING + w.PONG + w.OK, b"PING\r\nPONG\r\n+OK\r\n"),
    ],
)
def test_writer_forms(encoded: bytes, expected: bytes) -> None:
    assert encoded == expected


def test_writer_json_is_compact() -> None:
    assert w.connect({"a": [1, 2], "b": "x y"}) == b'CONNECT {"a":[1,2],"b":"x y"}\r\n'
