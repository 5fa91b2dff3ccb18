"""The RESP codec: requests parsed as redis-server parses them, under any split of the stream, with
its error texts; replies written as redis-server writes them, in RESP2 and RESP3.

The tables hold bytes taken from a live redis-server 7.0.15 (the RESP3 double formatting is 7.2's,
noted where it differs). The live tests replay the request tables against a real redis-server when
one is installed, so the tables cannot drift from it.
"""

from __future__ import annotations

import contextlib
import shutil
import socket
from collections.abc import Iterator, Sequence

import pytest
from hypothesis import given
from hypothesis import strategies as st

from node.resp import (
    MAX_INLINE,
    RESP2,
    RESP3,
    Command,
    RequestParser,
    RespProtocolError,
    Writer,
    split_inline,
    writer_for,
)
from node.resp import writer as w
from pipeline.local import redis_server

K = 1024
AUTH_LIMITS: dict[str, object] = {"authenticated": False}


def multibulk(args: Sequence[bytes]) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args)


def parse(pieces: Sequence[bytes], **limits: object) -> tuple[list[Command], str | None]:
    """The commands the pieces make, fed one after another, and the error text (``"<close>"`` for
    an error without one), or None."""
    parser = RequestParser(**limits)  # type: ignore[arg-type]
    commands: list[Command] = []
    try:
        for piece in pieces:
            parser.receive_data(piece)
            commands.extend(parser.commands())
    except RespProtocolError as exc:
        return commands, "<close>" if exc.message is None else exc.message
    return commands, None


def bytewise(data: bytes) -> list[bytes]:
    return [data[i : i + 1] for i in range(len(data))]


# -- requests that fail: (request, error text, parser limits); replayed live below ------------------

ERRORS: list[tuple[bytes, str, dict[str, object]]] = [
    (b"*abc\r\n", "invalid multibulk length", {}),
    (b"*\r\n", "invalid multibulk length", {}),
    (b"*-0\r\n", "invalid multibulk length", {}),
    (b"*01\r\n", "invalid multibulk length", {}),
    (b"*+1\r\n", "invalid multibulk length", {}),
    (b"* 1\r\n", "invalid multibulk length", {}),
    (b"*2147483648\r\n", "invalid multibulk length", {}),
    (b"*99999999999999999999\r\n", "invalid multibulk length", {}),
    (b"*1X$4\r\nPING\r\n", "invalid multibulk length", {}),
    (b"*1\nPING\r\n", "invalid multibulk length", {}),
    (b"*1\r\nx\r\n", "expected '$', got 'x'", {}),
    (b"*1\r\n\r\n", "expected '$', got ' '", {}),
    (b"*1\r\n\n\r\n", "expected '$', got ' '", {}),
    (b"*1\r\n\xff\r\n", "expected '$', got '\udcff'", {}),
    (b"*2\r\n$4\r\nECHO\r\n:1\r\n", "expected '$', got ':'", {}),
    (b"*1\r\n$-1\r\n", "invalid bulk length", {}),
    (b"*1\r\n$\r\n", "invalid bulk length", {}),
    (b"*1\r\n$abc\r\n", "invalid bulk length", {}),
    (b"*1\r\n$01\r\nx\r\n", "invalid bulk length", {}),
    (b"*1\r\n$536870913\r\n", "invalid bulk length", {}),
    (b"*1\r\n$4 \r\nPING\r\n", "invalid bulk length", {}),
    (b'SET a "b\r\n', "unbalanced quotes in request", {}),
    (b"SET a 'b\r\n", "unbalanced quotes in request", {}),
    (b'SET a "b"c\r\n', "unbalanced quotes in request", {}),
    (b"SET a 'b'c\r\n", "unbalanced quotes in request", {}),
    (b'ECHO "\\"\r\n', "unbalanced quotes in request", {}),
    (b"ECHO '\\\\'\r\n", "unbalanced quotes in request", {}),
    (b'PING\r\nECHO a"b\r\n', "unbalanced quotes in request", {}),
    (b"A" * (64 * K + 1), "too big inline request", {}),
    (b"PING\0\r\n" + b"x" * (64 * K), "too big inline request", {}),
    (b"*" + b"1" * (64 * K), "too big mbulk count string", {}),
    (b"*1\0\r\n" + b"x" * (64 * K), "too big mbulk count string", {}),
    (b"*1\r\n$" + b"1" * (64 * K), "too big bulk count string", {}),
    (b"*1\r\n$4\0\r\n" + b"x" * (64 * K), "too big bulk count string", {}),
    (b"*11\r\n", "unauthenticated multibulk length", AUTH_LIMITS),
    (b"*11x\r\n", "invalid multibulk length", AUTH_LIMITS),
    (b"*1\r\n$16385\r\n", "unauthenticated bulk length", AUTH_LIMITS),
    (b"*1\r\n$536870913\r\n", "invalid bulk length", AUTH_LIMITS),
]

# -- requests redis-server takes, quirks included: (request, the arguments of each command) ---------
# Every command is an ECHO (or PING), so the live test can tell from the replies how redis-server
# read them.

ACCEPTED: list[tuple[bytes, list[list[bytes]]]] = [
    (multibulk([b"ECHO", b"a b"]), [[b"ECHO", b"a b"]]),
    (b"*-1\r\n*0\r\n*-9223372036854775808\r\nPING\r\n", [[b"PING"]]),
    (b"*1\r\n$4\r\nPINGxx*2\r\n$4\r\nECHO\r\n$1\r\nz\r\n", [[b"PING"], [b"ECHO", b"z"]]),
    (b"*2\r\n$4\rXECHO\r\n$0\r\n\r\n", [[b"ECHO", b""]]),
    (b"*2\r\n$4\r\nECHO\r\n$3\r\na\r\n\r\n", [[b"ECHO", b"a\r\n"]]),
    (b"*2\r\n$4\r\nECHO\r\n$1\r\n\0\r\n", [[b"ECHO", b"\0"]]),
    (b"\r\n\n   \r\nPING\r\n", [[b"PING"]]),
    (b"PING\n", [[b"PING"]]),
    (b"PING\r\r\n", [[b"PING"]]),
    (b"ECHO \t a  \r\n", [[b"ECHO", b"a"]]),
    (b"ECHO a\x0bb\r\n", [[b"ECHO", b"a\x0bb"]]),
    (b'ECHO "a"\x0b\r\n', [[b"ECHO", b"a"]]),
    (b'ECHO a"b c"\r\n', [[b"ECHO", b"ab c"]]),
    (b'ECHO "a\\x41\\n\\r\\t\\b\\a\\q\\"\\\\"\r\n', [[b"ECHO", b'aA\n\r\t\b\aq"\\']]),
    (b'ECHO "\\xzz\\x4"\r\n', [[b"ECHO", b"xzzx4"]]),
    (b"ECHO 'a\\'b\\n'\r\n", [[b"ECHO", b"a'b\\n"]]),
    (b"ECHO ''\r\n", [[b"ECHO", b""]]),
    (b"ECHO \xff\xfe\r\n", [[b"ECHO", b"\xff\xfe"]]),
    (b"ECHO " + b"A" * (64 * K - 6) + b"\r\n", [[b"ECHO", b"A" * (64 * K - 6)]]),
]

WAITING: list[bytes] = [
    b"*1\0\r\n$4\r\nPING\r\n",  # a NUL before the line end: the line never ends
    b"PING\0\r\n",
    b"*1\r\n$4\0\r\nPING\r\n",
    b"*1\0\r\n" + b"x" * (64 * K - 5),  # ... and the limit counts everything after the line start
    b"*2147483647\r\n",
    b"*1\r\n$536870912\r\n",
    b"*1\r\n$4\r\nPING\r",  # the data of a bulk and the two bytes after it
    b"*1\r\n$4\r",  # the byte after a length line's CR
]


@pytest.mark.parametrize(("request_bytes", "text", "limits"), ERRORS)
def test_error_texts(request_bytes: bytes, text: str, limits: dict[str, object]) -> None:
    assert parse([request_bytes], **limits)[1] == text
    assert (
        parse(bytewise(request_bytes) if len(request_bytes) < 200 else [request_bytes], **limits)[1]
        == text
    )


@pytest.mark.parametrize(("request_bytes", "expected"), ACCEPTED)
def test_accepted_requests(request_bytes: bytes, expected: list[list[bytes]]) -> None:
    for pieces in ([request_bytes], bytewise(request_bytes)):
        commands, error = parse(pieces)
        assert error is None
        assert [c.args for c in commands] == expected


def test_inline_or_not() -> None:
    commands, _ = parse([b"PING\r\n" + multibulk([b"PING"]) + b"ECHO x\n"])
    assert commands == [
        Command([b"PING"], True),
        Command([b"PING"], False),
        Command([b"ECHO", b"x"], True),
    ]


def test_a_line_is_held_to_its_limit_however_it_arrives() -> None:
    """redis-server checks line lengths per read of up to 16 KiB, so a line a little over 64 KiB
    can pass when it arrives in one burst, and fails when it trickles in; here it always fails."""
    line = b"ECHO " + b"A" * (MAX_INLINE - 4) + b"\r\n"
    assert parse([line])[1] == parse([line[:-2], line[-2:]])[1] == "too big inline request"
    assert parse([line], max_inline=MAX_INLINE + 2)[1] is None


@pytest.mark.parametrize("request_bytes", WAITING)
def test_incomplete_requests_wait(request_bytes: bytes) -> None:
    assert parse([request_bytes]) == ([], None)


def test_commands_before_an_error_come_first() -> None:
    data = multibulk([b"PING"]) + b"PING\r\n*x\r\n" + multibulk([b"PING"])
    commands, error = parse([data])
    assert [c.args for c in commands] == [[b"PING"], [b"PING"]]
    assert error == "invalid multibulk length"


def test_authentication_applies_from_the_next_request() -> None:
    parser = RequestParser(authenticated=False)
    parser.receive_data(multibulk([b"AUTH", b"pw"]) + multibulk([b"x"] * 11))
    commands = parser.commands()
    assert next(commands).args == [b"AUTH", b"pw"]
    parser.authenticated = True
    assert next(commands).args == [b"x"] * 11


def test_max_request_closes_without_a_reply() -> None:
    big = multibulk([b"SET", b"k", b"v" * 1000])
    assert parse([big], max_request=1000) == ([], "<close>")
    assert parse([big], max_request=2000)[1] is None
    assert parse([multibulk([b"a"] * 300)], max_request=1000) == ([], "<close>")


def test_max_bulk_len_is_a_parameter() -> None:
    assert parse([multibulk([b"x" * 11])], max_bulk_len=10)[1] == "invalid bulk length"
    assert parse([multibulk([b"x" * 10])], max_bulk_len=10)[1] is None


def test_a_pipeline_is_parsed_whole() -> None:
    data = multibulk([b"PUBLISH", b"ch", b"msg"]) * 10_000
    commands, error = parse([data])
    assert error is None
    assert len(commands) == 10_000
    assert commands[-1] == Command([b"PUBLISH", b"ch", b"msg"], False)


def test_abandoned_iteration_resumes() -> None:
    parser = RequestParser()
    parser.receive_data(multibulk([b"A"]) + b"B\r\n" + multibulk([b"C"]))
    assert next(parser.commands()).args == [b"A"]
    assert [c.args for c in parser.commands()] == [[b"B"], [b"C"]]
    assert parser.buffered == 0


def test_buffered_counts_a_partial_request() -> None:
    parser = RequestParser()
    data = multibulk([b"SET", b"key", b"value"])
    parser.receive_data(data[:-3])
    assert list(parser.commands()) == []
    assert parser.buffered == len(data) - 3
    parser.receive_data(data[-3:])
    assert len(list(parser.commands())) == 1
    assert parser.buffered == 0


# -- any split gives the same commands ----------------------------------------------------------

arguments = st.lists(st.binary(max_size=40), min_size=1, max_size=6)


@st.composite
def split_stream(draw: st.DrawFn) -> tuple[list[list[bytes]], list[bytes]]:
    commands = draw(st.lists(arguments, min_size=1, max_size=8))
    data = b"".join(multibulk(c) for c in commands)
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=12)))
    pieces = [data[a:b] for a, b in zip([0, *cuts], [*cuts, len(data)], strict=True)]
    return commands, pieces


@given(split_stream())
def test_any_split_gives_the_same_commands(case: tuple[list[list[bytes]], list[bytes]]) -> None:
    commands, pieces = case
    data = b"".join(pieces)
    whole = parse([data])
    assert [c.args for c in whole[0]] == commands
    assert parse(pieces) == whole
    assert parse(bytewise(data)) == whole


# -- inline splitting against a transliteration of sdssplitargs ---------------------------------


def reference_split(line: bytes) -> list[bytes] | None:
    """``sdssplitargs`` step by step (None for its error); the line holds no NUL, so the C
    string's terminator is read as 0 past the end."""

    def at(i: int) -> int:
        return line[i] if i < len(line) else 0

    hexdigits = b"0123456789abcdefABCDEF"
    escapes = {ord("n"): 10, ord("r"): 13, ord("t"): 9, ord("b"): 8, ord("a"): 7}
    args: list[bytes] = []
    p = 0
    while True:
        while at(p) and at(p) in b" \t\n\r\v\f":
            p += 1
        if not at(p):
            return args
        current = bytearray()
        inq = insq = done = False
        while not done:
            c = at(p)
            if inq:
                if c == 92 and at(p + 1) == ord("x") and at(p + 2) and at(p + 2) in hexdigits \
                        and at(p + 3) and at(p + 3) in hexdigits:  # fmt: skip
                    current.append(int(line[p + 2 : p + 4], 16))
                    p += 3
                elif c == 92 and at(p + 1):
                    p += 1
                    current.append(escapes.get(at(p), at(p)))
                elif c == ord('"'):
                    if at(p + 1) and at(p + 1) not in b" \t\n\r\v\f":
                        return None
                    done = True
                elif not c:
                    return None
                else:
                    current.append(c)
            elif insq:
                if c == 92 and at(p + 1) == ord("'"):
                    p += 1
                    current.append(ord("'"))
                elif c == ord("'"):
                    if at(p + 1) and at(p + 1) not in b" \t\n\r\v\f":
                        return None
                    done = True
                elif not c:
                    return None
                else:
                    current.append(c)
            elif c in b" \n\r\t" or not c:
                done = True
            elif c == ord('"'):
                inq = True
            elif c == ord("'"):
                insq = True
            else:
                current.append(c)
            if at(p):
                p += 1
        args.append(bytes(current))


inline_lines = st.lists(
    st.sampled_from([b"a", b"b", b" ", b"\t", b"\r", b"\x0b", b"\x0c", b'"', b"'", b"\\", b"x",
                     b"4", b"f", b"n", b"\xff", b"\\x4F", b"\\'"]),
    max_size=30,
).map(b"".join)  # fmt: skip


@given(inline_lines)
def test_inline_split_matches_sdssplitargs(line: bytes) -> None:
    expected = reference_split(line)
    if expected is None:
        with pytest.raises(RespProtocolError, match="unbalanced quotes in request"):
            split_inline(line)
    else:
        assert split_inline(line) == expected


def quote(arg: bytes) -> bytes:
    """An argument as ``sdscatrepr`` writes it: double quotes, escapes for the rest."""
    named = {10: b"\\n", 13: b"\\r", 9: b"\\t", 7: b"\\a", 8: b"\\b", 34: b'\\"', 92: b"\\\\"}
    out = b"".join(named.get(c) or (bytes([c]) if 32 <= c < 127 else b"\\x%02x" % c) for c in arg)
    return b'"' + out + b'"'


@given(st.lists(st.binary(max_size=20), min_size=1, max_size=5))
def test_inline_quoting_round_trips(args: list[bytes]) -> None:
    line = b" ".join(quote(a) for a in args)
    assert split_inline(line) == args
    assert parse([line + b"\r\n"])[0] == [Command(args, True)]


# -- replies ------------------------------------------------------------------------------------

# (what, RESP2 bytes, RESP3 bytes), from redis-server 7.0.15; LIVE_REPLIES says how to get each
# (the live test below does, on a fresh connection).
REPLIES: list[tuple[str, bytes, bytes]] = [
    ("null", b"$-1\r\n", b"_\r\n"),
    ("null_array", b"*-1\r\n", b"_\r\n"),
    ("true", b":1\r\n", b"#t\r\n"),
    ("false", b":0\r\n", b"#f\r\n"),
    ("map", b"*2\r\n$1\r\na\r\n:1\r\n", b"%1\r\n$1\r\na\r\n:1\r\n"),
    ("set", b"*1\r\n:1\r\n", b"~1\r\n:1\r\n"),
    ("double 1.5", b"$3\r\n1.5\r\n", b",1.5\r\n"),
    ("double 3", b"$1\r\n3\r\n", b",3\r\n"),
    ("double inf", b"$3\r\ninf\r\n", b",inf\r\n"),
    ("double -inf", b"$4\r\n-inf\r\n", b",-inf\r\n"),
    ("big number", b"$22\r\n1234567890123456789012\r\n", b"(1234567890123456789012\r\n"),
    ("verbatim", b"$2\r\nhi\r\n", b"=6\r\ntxt:hi\r\n"),
    ("unsubscribe all of none", b"*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n",
     b">3\r\n$11\r\nunsubscribe\r\n_\r\n:0\r\n"),
    ("punsubscribe all of none", b"*3\r\n$12\r\npunsubscribe\r\n$-1\r\n:0\r\n",
     b">3\r\n$12\r\npunsubscribe\r\n_\r\n:0\r\n"),
    ("subscribe c1", b"*3\r\n$9\r\nsubscribe\r\n$2\r\nc1\r\n:1\r\n",
     b">3\r\n$9\r\nsubscribe\r\n$2\r\nc1\r\n:1\r\n"),
    ("psubscribe c*", b"*3\r\n$10\r\npsubscribe\r\n$2\r\nc*\r\n:1\r\n",
     b">3\r\n$10\r\npsubscribe\r\n$2\r\nc*\r\n:1\r\n"),
    ("ssubscribe s1", b"*3\r\n$10\r\nssubscribe\r\n$2\r\ns1\r\n:1\r\n",
     b">3\r\n$10\r\nssubscribe\r\n$2\r\ns1\r\n:1\r\n"),
    ("sunsubscribe s1", b"*3\r\n$12\r\nsunsubscribe\r\n$2\r\ns1\r\n:0\r\n",
     b">3\r\n$12\r\nsunsubscribe\r\n$2\r\ns1\r\n:0\r\n"),
    ("message", b"*3\r\n$7\r\nmessage\r\n$2\r\nc1\r\n$5\r\nhello\r\n",
     b">3\r\n$7\r\nmessage\r\n$2\r\nc1\r\n$5\r\nhello\r\n"),
    ("pmessage", b"*4\r\n$8\r\npmessage\r\n$2\r\nc*\r\n$2\r\nc1\r\n$5\r\nhello\r\n",
     b">4\r\n$8\r\npmessage\r\n$2\r\nc*\r\n$2\r\nc1\r\n$5\r\nhello\r\n"),
    ("smessage", b"*3\r\n$8\r\nsmessage\r\n$2\r\ns1\r\n$5\r\nthere\r\n",
     b">3\r\n$8\r\nsmessage\r\n$2\r\ns1\r\n$5\r\nthere\r\n"),
]  # fmt: skip


def reply(what: str, out: Writer) -> bytes:
    return {
        "null": lambda: out.null,
        "null_array": lambda: out.null_array,
        "true": lambda: out.boolean(True),
        "false": lambda: out.boolean(False),
        "map": lambda: out.map([(w.bulk(b"a"), w.integer(1))]),
        "set": lambda: out.set([w.integer(1)]),
        "double 1.5": lambda: out.double(1.5),
        "double 3": lambda: out.double(3.0),
        "double inf": lambda: out.double(float("inf")),
        "double -inf": lambda: out.double(float("-inf")),
        "big number": lambda: out.big_number(b"1234567890123456789012"),
        "verbatim": lambda: out.verbatim(b"hi"),
        "unsubscribe all of none": lambda: out.subscription(b"unsubscribe", None, 0),
        "punsubscribe all of none": lambda: out.subscription(b"punsubscribe", None, 0),
        "subscribe c1": lambda: out.subscription(b"subscribe", b"c1", 1),
        "psubscribe c*": lambda: out.subscription(b"psubscribe", b"c*", 1),
        "ssubscribe s1": lambda: out.subscription(b"ssubscribe", b"s1", 1),
        "sunsubscribe s1": lambda: out.subscription(b"sunsubscribe", b"s1", 0),
        "message": lambda: out.message(b"c1", b"hello"),
        "pmessage": lambda: out.pmessage(b"c*", b"c1", b"hello"),
        "smessage": lambda: out.smessage(b"s1", b"there"),
    }[what]()


LIVE_REPLIES: dict[str, bytes | tuple[bytes, bytes, tuple[bytes, bytes]]] = {
    "null": b"GET nokey",
    "null_array": b"BLPOP nolist 0.01",
    "true": b'EVAL "redis.setresp(3); return true" 0',
    "false": b'EVAL "redis.setresp(3); return false" 0',
    "map": b'EVAL "return {map={a=1}}" 0',
    "set": b"EVAL \"return {set={'a'}}\" 0",
    "double 1.5": b'EVAL "return {double=1.5}" 0',
    "double 3": b'EVAL "return {double=3}" 0',
    "double inf": b'EVAL "return {double=1/0}" 0',
    "double -inf": b'EVAL "return {double=-1/0}" 0',
    "big number": b"EVAL \"return {big_number='1234567890123456789012'}\" 0",
    "verbatim": b"EVAL \"return {verbatim_string={format='txt', string='hi'}}\" 0",
    "unsubscribe all of none": b"UNSUBSCRIBE",
    "punsubscribe all of none": b"PUNSUBSCRIBE",
    "subscribe c1": b"SUBSCRIBE c1",
    "psubscribe c*": b"PSUBSCRIBE c*",
    "ssubscribe s1": b"SSUBSCRIBE s1",
    "sunsubscribe s1": b"SUNSUBSCRIBE s1",
    # (subscribe, its acknowledgement, then what another client publishes)
    "message": (b"SUBSCRIBE c1", b"PUBLISH c1 hello", (b"subscribe", b"c1")),
    "pmessage": (b"PSUBSCRIBE c*", b"PUBLISH c1 hello", (b"psubscribe", b"c*")),
    "smessage": (b"SSUBSCRIBE s1", b"SPUBLISH s1 there", (b"ssubscribe", b"s1")),
}


@pytest.mark.parametrize(("what", "resp2", "resp3"), REPLIES)
def test_replies_as_redis_writes_them(what: str, resp2: bytes, resp3: bytes) -> None:
    assert reply(what, RESP2) == resp2
    assert reply(what, RESP3) == resp3
    assert writer_for(2) is RESP2
    assert writer_for(3) is RESP3


def test_shared_replies() -> None:
    assert w.simple(b"PONG") == w.PONG == b"+PONG\r\n"
    assert w.OK == b"+OK\r\n"
    assert w.integer(-3) == b":-3\r\n"
    assert w.bulk(b"") == b"$0\r\n\r\n"
    assert w.array([]) == b"*0\r\n"
    assert w.array([w.bulk(b"pong"), w.bulk(b"hi")]) == b"*2\r\n$4\r\npong\r\n$2\r\nhi\r\n"
    assert w.error("unknown command 'X'") == b"-ERR unknown command 'X'\r\n"
    assert w.error("-WRONGTYPE x") == b"-WRONGTYPE x\r\n"
    assert w.error("a\r\nb") == b"-ERR a  b\r\n"
    assert w.protocol_error("expected '$', got '\udcff'") == (
        b"-ERR Protocol error: expected '$', got '\xff'\r\n"
    )
    assert RESP3.verbatim(b"# x", b"mkd") == b"=7\r\nmkd:# x\r\n"
    assert RESP3.push([w.bulk(b"a")]) == b">1\r\n$1\r\na\r\n"
    assert RESP2.push([w.bulk(b"a")]) == b"*1\r\n$1\r\na\r\n"
    with pytest.raises(ValueError, match="RESP version 4"):
        writer_for(4)


def test_a_delivery_written_again_is_the_same_bytes() -> None:
    """``message`` keeps its last delivery for a fan-out; what it gives back never depends on it."""
    writer = Writer(2)
    assert writer.message(b"", b"") == b"*3\r\n$7\r\nmessage\r\n$0\r\n\r\n$0\r\n\r\n"
    payload = b"x" * 10
    first = writer.message(b"a", payload)
    assert writer.message(b"a", payload) is first
    assert writer.message(b"b", payload) == b"*3\r\n$7\r\nmessage\r\n$1\r\nb\r\n$10\r\n%b\r\n" % payload
    assert writer.message(b"a", b"y" * 10).endswith(b"$10\r\nyyyyyyyyyy\r\n")
    big = b"z" * (1 << 17)
    assert writer.message(b"a", big).endswith(b"\r\n%b\r\n" % big)
    assert writer.message(b"a", payload) == first


# Doubles as redis-server 7.2 writes them (d2string: integers as integers, else the shortest
# digits in fpconv's layout). 7.0.15 wrote %.17g: 0.1 was "0.10000000000000001".
DOUBLES = [
    (0.1, b"0.1"), (-0.0, b"-0"), (0.0, b"0"), (float("nan"), b"nan"), (2.0**62, b"4611686018427387904"),
    (2.0**63, b"9223372036854776000"), (1e21, b"1e+21"), (1e-7, b"1e-7"), (0.000123, b"0.000123"),
    (123456.789, b"123456.789"), (-2.5e-10, b"-2.5e-10"), (5e-324, b"5e-324"),
    (1.7976931348623157e308, b"1.7976931348623157e+308"),
]  # fmt: skip


@pytest.mark.parametrize(("value", "text"), DOUBLES)
def test_doubles_as_redis_7_2_writes_them(value: float, text: bytes) -> None:
    assert RESP3.double(value) == b",%b\r\n" % text
    assert RESP2.double(value) == w.bulk(text)


# -- live: the tables against a real redis-server -----------------------------------------------

REDIS = shutil.which("redis-server")
PASSWORD = b"pw"


@pytest.fixture(scope="module")
def redis_port(tmp_path_factory: pytest.TempPathFactory) -> Iterator[int]:
    if REDIS is None:
        pytest.skip("redis-server is not installed")
    folder = tmp_path_factory.mktemp("redis")
    flags = ["--dir", str(folder), "--requirepass", PASSWORD.decode(), "--logfile", str(folder / "log")]
    with redis_server(*flags) as port:
        yield port


def exchange(port: int, data: bytes, *, authenticated: bool, until: int | None = None) -> bytes:
    """What redis-server answers to ``data``: read until it closes (``until`` None), or until
    ``until`` bytes came and then for a short while more (nothing else may come, and a close
    shows as ``<closed>``)."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as sock:
        if authenticated:
            sock.sendall(multibulk([b"AUTH", PASSWORD]))
            assert sock.recv(5) == b"+OK\r\n"
        sock.sendall(data)
        received = b""
        try:
            while until is None or len(received) < until:
                chunk = sock.recv(65536)
                if not chunk:
                    return received
                received += chunk
            sock.settimeout(0.2)
            received += sock.recv(65536) or b"<closed>"
        except TimeoutError:
            assert until is not None, received
        return received


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize(("request_bytes", "text", "limits"), ERRORS)
def test_live_error_texts(
    redis_port: int, request_bytes: bytes, text: str, limits: dict[str, object]
) -> None:
    authenticated = limits.get("authenticated", True) is True
    received = exchange(redis_port, request_bytes, authenticated=authenticated)
    assert received.endswith(w.protocol_error(text))


def expected_reply(args: list[bytes]) -> bytes:
    return w.PONG if args == [b"PING"] else w.bulk(args[1])


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize(("request_bytes", "expected"), ACCEPTED)
def test_live_accepted_requests(
    redis_port: int, request_bytes: bytes, expected: list[list[bytes]]
) -> None:
    replies = b"".join(expected_reply(args) for args in expected)
    assert exchange(redis_port, request_bytes, authenticated=True, until=len(replies)) == replies


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize("request_bytes", WAITING)
def test_live_incomplete_requests_wait(redis_port: int, request_bytes: bytes) -> None:
    assert exchange(redis_port, request_bytes, authenticated=True, until=0) == b""


@pytest.mark.slow
@pytest.mark.timeout(60)
def test_live_inline_lines_split_alike(redis_port: int) -> None:
    """Lines the reference splitter reads, sent as ``ECHO`` arguments: redis-server's reply and the
    parser's arguments agree (or both call the quotes unbalanced)."""
    lines = [b'"a\\x4"', b"'\\\\'", b'"\\xfF"', b"x'y z'", b'"a" \x0b', b"'a\\''", b'"\\', b"\\'"]
    for line in lines:
        data = b"ECHO " + line + b"\r\n"
        commands, error = parse([data])
        received = exchange(redis_port, data, authenticated=True, until=None if error else 1)
        if error is not None:
            assert received == w.protocol_error(error), line
        elif len(commands[0].args) == 2:
            assert received == w.bulk(commands[0].args[1]), line
        else:
            assert received.startswith(b"-ERR wrong number of arguments"), line


def connect(port: int, version: int) -> socket.socket:
    """An authenticated connection speaking RESP ``version``."""
    sock = socket.create_connection(("127.0.0.1", port), timeout=5)
    marker = b"hello-done"
    hello = b"HELLO 3 AUTH default %b\r\n" % PASSWORD if version == 3 else b"AUTH %b\r\n" % PASSWORD
    sock.sendall(hello + b"ECHO " + marker + b"\r\n")
    received = b""
    while not received.endswith(w.bulk(marker)):
        received += sock.recv(65536)
    return sock


def read_reply(sock: socket.socket, expected: bytes) -> bytes:
    """As many bytes as ``expected`` has, and anything that follows within a short while."""
    received = b""
    while len(received) < len(expected):
        chunk = sock.recv(65536)
        if not chunk:
            break
        received += chunk
    sock.settimeout(0.1)
    with contextlib.suppress(TimeoutError):
        received += sock.recv(65536)
    sock.settimeout(5)
    return received


@pytest.mark.slow
@pytest.mark.timeout(60)
@pytest.mark.parametrize(("what", "resp2", "resp3"), REPLIES)
def test_live_replies(redis_port: int, what: str, resp2: bytes, resp3: bytes) -> None:
    for version, expected in ((2, resp2), (3, resp3)):
        how = LIVE_REPLIES[what]
        with connect(redis_port, version) as sock:
            if isinstance(how, bytes):
                sock.sendall(how + b"\r\n")
                assert read_reply(sock, expected) == expected
                continue
            subscribe, publish, (kind, name) = how
            sock.sendall(subscribe + b"\r\n")
            ack = writer_for(version).subscription(kind, name, 1)
            assert read_reply(sock, ack) == ack
            with connect(redis_port, 2) as publisher:
                publisher.sendall(publish + b"\r\n")
                assert read_reply(sock, expected) == expected
