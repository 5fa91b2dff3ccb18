"""The string commands side by side with redis-server: the same requests to both, the same reply
bytes back, in RESP2 and RESP3; hypothesis-made SET options and INCRBY/INCRBYFLOAT operands; and a
redis-py lock's SET NX PX.

Where a reply depends on the moment (TTL just after an expiry was set, MEMORY USAGE, which counts
differently here) only its kind is compared. The installed redis-server may be 7.0, whose string
commands answer as 7.2's do.
"""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Iterator
from typing import BinaryIO

import pytest
import redis
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.broker import Broker
from node.config.options import Config
from node.resp.commands.string_numbers import (
    add_long_doubles,
    format_long_double,
    parse_long_double,
)
from pipeline.local import redis_server
from tests.live import live_node
from tests.node.resp.test_resp_connection import Peer

pytestmark = [
    pytest.mark.timeout(120),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]


def encode(args: tuple[bytes | str | int, ...]) -> bytes:
    parts = [a if isinstance(a, bytes) else str(a).encode() for a in args]
    return b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%b\r\n" % (len(p), p) for p in parts)


def read_reply(file: BinaryIO) -> bytes:
    """One whole reply, as the bytes it came in."""
    read = file.read
    line = file.readline()
    kind, rest = line[:1], line[1:-2]
    if kind in (b"$", b"=", b"!") and rest != b"-1":
        return line + bytes(read(int(rest) + 2))
    if kind in (b"*", b"~", b">", b"%", b"|") and rest != b"-1":
        count = int(rest) * (2 if kind in (b"%", b"|") else 1)
        return line + b"".join(read_reply(file) for _ in range(count))
    return line


class Side:
    """One connection to one server."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.file = self.sock.makefile("rb")

    def send(self, *args: bytes | str | int) -> bytes:
        self.sock.sendall(encode(args))
        return read_reply(self.file)

    def close(self) -> None:
        self.file.close()
        self.sock.close()


class Pair:
    """The same requests to redis-server and to the node."""

    def __init__(self, theirs: int, ours: int, protocol: int = 2) -> None:
        self.theirs, self.ours = Side(theirs), Side(ours)
        if protocol == 3:
            self.both("HELLO", 3)

    def both(self, *args: bytes | str | int) -> tuple[bytes, bytes]:
        return self.theirs.send(*args), self.ours.send(*args)

    def same(self, *args: bytes | str | int) -> bytes:
        expected, got = self.both(*args)
        assert got == expected, args
        return got

    def close(self) -> None:
        self.theirs.close()
        self.ours.close()


@pytest.fixture(scope="module")
def ports() -> Iterator[tuple[int, int]]:
    """redis-server's port and a node's, the node in a process of its own (in this one, its random
    expiry probes would disturb hypothesis's generation)."""
    with redis_server() as theirs, live_node(redis=True) as node:
        assert node.redis_port is not None
        yield theirs, node.redis_port


@pytest.fixture(params=[2, 3], ids=["resp2", "resp3"])
def pair(ports: tuple[int, int], request: pytest.FixtureRequest) -> Iterator[Pair]:
    both = Pair(*ports, protocol=request.param)
    both.same("FLUSHALL")
    yield both
    both.close()


SCENARIOS: dict[str, list[tuple[bytes | str | int, ...]]] = {
    "set and get": [
        ("SET", "a", "1"), ("GET", "a"), ("GET", "nope"), ("SET", "a", ""), ("GET", "a"),
        ("SET", "a", "2", "NX"), ("SET", "n", "2", "NX"), ("SET", "a", "3", "XX"),
        ("SET", "x", "3", "XX"), ("EXISTS", "x"), ("SET", "a", "4", "XX", "GET"),
        ("SET", "b", "4", "NX", "GET"), ("SET", "b", "5", "NX", "GET"), ("SET", "a", "6", "get", "get"),
        ("SET", "a", "1", "NX", "XX"), ("SET", "a", "1", "XX", "NX"), ("SET", "a", "1", "FOO"),
        ("SET", "a", "1", "EX"), ("SET", "a", "1", "EX", "x"), ("SET", "a", "1", "EX", "0"),
        ("SET", "a", "1", "EX", "-5"), ("SET", "a", "1", "PX", "0"), ("SET", "a", "1", "EX", "1.5"),
        ("SET", "a", "1", "EX", "10", "PX", "10"), ("SET", "a", "1", "KEEPTTL", "EX", "10"),
        ("SET", "a", "1", "EX", "10", "KEEPTTL"), ("SET", "a", "1", "PERSIST"),
        ("SET", "a", "1", "EX", "9223372036854775"), ("SET", "a", "1", "EX", "9223372036854776"),
        ("SET", "a", "1", "PX", "9223372036854775807"), ("SET", "a", "1", "EXAT", "9223372036854775"),
        ("SET", "a", "1", "EX", "100"), ("TTL", "a"), ("SET", "a", "2", "KEEPTTL"), ("TTL", "a"),
        ("SET", "a", "3"), ("TTL", "a"), ("SET", "a", "1", "ex", "100", "nx"), ("TTL", "a"),
        ("SET", "a", "x", "EXAT", "1"), ("EXISTS", "a"), ("SET", "a"), ("GET",), ("GET", "a", "b"),
    ],
    "setnx setex psetex getset": [
        ("SETNX", "a", "1"), ("SETNX", "a", "2"), ("GET", "a"), ("SETEX", "a", "100", "v"),
        ("TTL", "a"), ("SETEX", "a", "0", "v"), ("SETEX", "a", "x", "v"), ("PSETEX", "a", "-1", "v"),
        ("PSETEX", "a", "100000", "w"), ("TTL", "a"), ("GETSET", "a", "z"), ("TTL", "a"),
        ("GETSET", "new", "z"), ("SETEX", "a", "100"), ("GETSET", "a"),
    ],
    "getex getdel": [
        ("SET", "a", "v"), ("GETEX", "a"), ("GETEX", "a", "EX", "100"), ("TTL", "a"),
        ("GETEX", "a", "PERSIST"), ("TTL", "a"), ("GETEX", "a", "PX", "100000"), ("TTL", "a"),
        ("GETEX", "a", "EX", "0"), ("GETEX", "a", "EX", "x"), ("GETEX", "a", "NX"),
        ("GETEX", "a", "KEEPTTL"), ("GETEX", "a", "EX", "1", "PERSIST"), ("GETEX", "a", "EX"),
        ("GETEX", "a", "EXAT", "1"), ("EXISTS", "a"), ("GETEX", "nope"), ("GETEX", "nope", "FOO"),
        ("GETEX", "nope", "EX", "x"), ("SET", "b", "w"), ("GETDEL", "b"), ("GETDEL", "b"),
        ("EXISTS", "b"), ("GETEX",), ("GETDEL", "a", "b"),
    ],
    "mget mset msetnx": [
        ("MSET", "a", "1", "b", "2"), ("MGET", "a", "b", "c"), ("MSET", "a"), ("MSET", "a", "1", "b"),
        ("MSETNX", "c", "3", "a", "9"), ("MGET", "a", "c"), ("MSETNX", "c", "3", "d", "4"),
        ("MSETNX", "e", "1", "e", "2"), ("GET", "e"), ("MSET", "a", "x", "a", "y"), ("GET", "a"),
        ("XADD", "s", "1-1", "f", "v"), ("MGET", "a", "s", "nope"), ("MSETNX", "s", "1"),
        ("MSET", "s", "1"), ("TYPE", "s"),
    ],
    "integers": [
        ("INCR", "n"), ("INCR", "n"), ("DECR", "n"), ("INCRBY", "n", "10"), ("DECRBY", "n", "-5"),
        ("INCRBY", "n", "x"), ("INCRBY", "n", "1.5"), ("INCRBY", "n", " 1"), ("INCRBY", "n", "+1"),
        ("INCRBY", "n", "9223372036854775807"), ("DECRBY", "n", "-9223372036854775808"),
        ("SET", "n", "9223372036854775807"), ("INCR", "n"), ("SET", "n", "-9223372036854775808"),
        ("DECR", "n"), ("INCRBY", "n", "-1"), ("SET", "n", "1 "), ("INCR", "n"), ("SET", "n", "01"),
        ("INCR", "n"), ("SET", "n", "abc"), ("DECR", "n"), ("SET", "n", "5"), ("EXPIRE", "n", "100"),
        ("INCR", "n"), ("TTL", "n"), ("DECRBY", "m", "9223372036854775807"), ("DECR", "m"),
        ("DECR", "m"), ("INCRBY", "big", "99999999999999999999"),
    ],
    "floats": [
        ("INCRBYFLOAT", "f", "1"), ("INCRBYFLOAT", "f", "0.25"), ("SET", "f", "10.5"),
        ("INCRBYFLOAT", "f", "0.1"), ("INCRBYFLOAT", "f", "-5.0e3"), ("INCRBYFLOAT", "f", "1e-10"),
        ("INCRBYFLOAT", "f", "0x10"), ("INCRBYFLOAT", "f", "0x1.8p3"), ("INCRBYFLOAT", "f", "inf"),
        ("INCRBYFLOAT", "f", "-INFINITY"), ("INCRBYFLOAT", "f", "nan"), ("INCRBYFLOAT", "f", "1e5000"),
        ("INCRBYFLOAT", "f", "1e-5000"), ("INCRBYFLOAT", "f", " 1"), ("INCRBYFLOAT", "f", "1 "),
        ("INCRBYFLOAT", "f", ""), ("INCRBYFLOAT", "f", "."), ("INCRBYFLOAT", "f", "1e"),
        ("INCRBYFLOAT", "f", "1_0"), ("INCRBYFLOAT", "f", "3.0e4900"), ("INCRBYFLOAT", "f", "1e4000"),
        ("SET", "f", "1e4000"), ("INCRBYFLOAT", "f", "1e4000"), ("INCRBYFLOAT", "f", "1.1e4932"),
        ("SET", "f", "0.1"), ("INCRBYFLOAT", "f", "-0.1"), ("SET", "f", "1"), ("EXPIRE", "f", "100"),
        ("INCRBYFLOAT", "f", "-2"), ("TTL", "f"), ("SET", "f", "17179869184"),
        ("INCRBYFLOAT", "f", "1.5"), ("INCRBYFLOAT", "f", "1e-20"), ("INCRBYFLOAT", "f", "1e20"),
        ("SET", "f", "abc"), ("INCRBYFLOAT", "f", "1"), ("SET", "f", "1\x002"),
        ("INCRBYFLOAT", "f", "1"), ("SET", "g", "inf"), ("INCRBYFLOAT", "g", "1"),
    ],
    "append strlen ranges": [
        ("APPEND", "a", "hello"), ("APPEND", "a", " world"), ("STRLEN", "a"), ("STRLEN", "nope"),
        ("GETRANGE", "a", "0", "4"), ("GETRANGE", "a", "-5", "-1"), ("GETRANGE", "a", "5", "1"),
        ("GETRANGE", "a", "-1", "-5"), ("GETRANGE", "a", "0", "-100"), ("GETRANGE", "a", "100", "200"),
        ("GETRANGE", "a", "-100", "100"), ("GETRANGE", "a", "x", "1"), ("GETRANGE", "nope", "0", "1"),
        ("GETRANGE", "a", "0", "9223372036854775807"), ("SUBSTR", "a", "1", "3"),
        ("SETRANGE", "a", "6", "W"), ("GET", "a"), ("SETRANGE", "a", "20", "!"), ("GET", "a"),
        ("SETRANGE", "a", "-1", "x"), ("SETRANGE", "a", "x", "x"), ("SETRANGE", "a", "0", ""),
        ("SETRANGE", "new", "0", ""), ("EXISTS", "new"), ("SETRANGE", "new", "3", "x"), ("GET", "new"),
        ("SETRANGE", "a", "536870911", "xy"), ("SETRANGE", "a", "536870912", ""),
        ("SET", "n", "1"), ("APPEND", "n", "2"), ("OBJECT", "ENCODING", "n"), ("INCR", "n"),
        ("OBJECT", "ENCODING", "n"), ("SETRANGE", "n", "0", "9"), ("OBJECT", "ENCODING", "n"),
    ],
    "bits": [
        ("SETBIT", "b", "7", "1"), ("SETBIT", "b", "7", "1"), ("SETBIT", "b", "7", "0"),
        ("GETBIT", "b", "7"), ("SETBIT", "b", "100", "1"), ("GET", "b"), ("GETBIT", "b", "100"),
        ("GETBIT", "b", "1000"), ("GETBIT", "nope", "0"), ("SETBIT", "b", "-1", "1"),
        ("SETBIT", "b", "4294967296", "1"), ("SETBIT", "b", "1", "2"), ("SETBIT", "b", "1", "01"),
        ("GETBIT", "b", "x"), ("SET", "n", "1234"), ("SETBIT", "n", "0", "0"),
        ("OBJECT", "ENCODING", "n"),
    ],
    "lcs": [
        ("MSET", "a", "ohmytext", "b", "mynewtext"), ("LCS", "a", "b"), ("LCS", "a", "b", "LEN"),
        ("LCS", "a", "b", "IDX"), ("LCS", "a", "b", "IDX", "WITHMATCHLEN"),
        ("LCS", "a", "b", "IDX", "MINMATCHLEN", "4", "WITHMATCHLEN"), ("LCS", "a", "b", "LEN", "IDX"),
        ("LCS", "a", "b", "MINMATCHLEN"), ("LCS", "a", "b", "MINMATCHLEN", "x"), ("LCS", "a", "nope"),
        ("LCS", "nope", "nope2", "IDX"), ("XADD", "s", "1-1", "f", "v"), ("LCS", "a", "s"),
    ],
    "strings and streams": [
        ("SET", "k", "v"), ("XADD", "k", "1-1", "f", "v"),
        ("XADD", "k", "MAXLEN", "x", "1-1", "f", "v"), ("XLEN", "k"), ("XRANGE", "k", "-", "+"),
        ("XRANGE", "k", "x", "+"), ("XREVRANGE", "k", "+", "-"),
        ("XDEL", "k", "1-1"), ("XTRIM", "k", "MAXLEN", "1"), ("XSETID", "k", "1-1"),
        ("XREAD", "STREAMS", "k", "0"), ("XREAD", "STREAMS", "k", "$"), ("XREAD", "STREAMS", "k", "x"),
        ("XREAD", "BLOCK", "10", "STREAMS", "k", "$"),
        ("XREADGROUP", "GROUP", "g", "c", "STREAMS", "k", ">"),
        ("XGROUP", "CREATE", "k", "g", "$"), ("XGROUP", "CREATE", "k", "g", "$", "MKSTREAM"),
        ("XGROUP", "SETID", "k", "g", "0"), ("XGROUP", "DESTROY", "k", "g"),
        ("XGROUP", "CREATECONSUMER", "k", "g", "c"), ("XINFO", "STREAM", "k"), ("XINFO", "GROUPS", "k"),
        ("XACK", "k", "g", "1-1"), ("XPENDING", "k", "g"), ("XCLAIM", "k", "g", "c", "0", "1-1"),
        ("XAUTOCLAIM", "k", "g", "c", "0", "0"), ("TYPE", "k"), ("OBJECT", "ENCODING", "k"),
        ("XADD", "s", "1-1", "f", "v"), ("GET", "s"), ("APPEND", "s", "x"), ("INCR", "s"),
        ("INCRBYFLOAT", "s", "1"), ("STRLEN", "s"), ("GETRANGE", "s", "0", "1"),
        ("SETRANGE", "s", "0", "x"),
        ("GETEX", "s", "EX", "10"), ("GETDEL", "s"), ("GETSET", "s", "x"), ("SET", "s", "x", "GET"),
        ("SETBIT", "s", "0", "1"), ("GETBIT", "s", "0"), ("OBJECT", "ENCODING", "s"), ("TYPE", "s"),
        ("SET", "s", "x"), ("TYPE", "s"), ("RENAME", "s", "t"), ("GET", "t"), ("DEL", "t"),
    ],
    "object": [
        ("SET", "i", "12345"), ("SET", "e", "x" * 44), ("SET", "r", "x" * 45), ("SET", "z", "0123"),
        ("SET", "l", "-9223372036854775808"), ("SET", "o", "9223372036854775808"),
        ("OBJECT", "ENCODING", "i"), ("OBJECT", "ENCODING", "e"), ("OBJECT", "ENCODING", "r"),
        ("OBJECT", "ENCODING", "z"), ("OBJECT", "ENCODING", "l"), ("OBJECT", "ENCODING", "o"),
        ("OBJECT", "ENCODING", "nope"), ("OBJECT", "REFCOUNT", "i"), ("OBJECT", "REFCOUNT", "e"),
        ("SET", "small", "5"), ("OBJECT", "REFCOUNT", "small"), ("OBJECT", "REFCOUNT", "nope"),
        ("OBJECT", "FREQ", "i"), ("OBJECT", "FREQ", "nope"), ("OBJECT", "ENCODING"),
        ("OBJECT", "FOO", "i"), ("OBJECT",), ("INCRBYFLOAT", "fl", "1.5"), ("OBJECT", "ENCODING", "fl"),
        ("MEMORY", "USAGE", "nope"), ("MEMORY", "USAGE", "i", "SAMPLES"),
        ("MEMORY", "USAGE", "i", "SAMPLES", "x"), ("MEMORY", "USAGE", "i", "SAMPLES", "-1"),
        ("MEMORY", "USAGE", "i", "FOO", "1"),
    ],
    "transactions": [
        ("MULTI",), ("SET", "a", "1"), ("INCR", "a"), ("GET", "a"), ("XADD", "a", "1-1", "f", "v"),
        ("APPEND", "a", "x"), ("EXEC",), ("WATCH", "a"), ("SET", "a", "2"), ("MULTI",), ("GET", "a"),
        ("EXEC",),
    ],
}  # fmt: skip


@pytest.mark.parametrize("name", list(SCENARIOS))
def test_same_replies_as_redis_server(pair: Pair, name: str) -> None:
    for args in SCENARIOS[name]:
        pair.same(*args)


def test_keepttl_over_a_key_that_expired_unseen() -> None:
    """The expired key goes first (as redis-server's lookup before a write): KEEPTTL keeps no
    time, and the new value stays. (In a broker without a running node, no sweep removes the
    key meanwhile.)"""
    peer = Peer(Broker(Config()))
    peer.send("SET", "k", "v", "PX", "20")
    peer.send("SET", "n", "5", "PX", "20")
    time.sleep(0.05)
    assert peer.send("SET", "k", "w", "KEEPTTL") == b"+OK\r\n"
    assert peer.send("INCR", "n") == b":1\r\n"
    assert peer.send("MGET", "k", "n") == b"*2\r\n$1\r\nw\r\n$1\r\n1\r\n"
    assert peer.send("TTL", "k") == peer.send("TTL", "n") == b":-1\r\n"


def test_memory_usage_counts_the_key_and_the_value(pair: Pair) -> None:
    """What MEMORY USAGE counts here differs from redis-server's allocator sizes: only ours."""
    ours = pair.ours
    ours.send("SET", "k", "x" * 1000)
    small = int(ours.send("MEMORY", "USAGE", "k")[1:-2])
    ours.send("APPEND", "k", "y" * 1000)
    assert int(ours.send("MEMORY", "USAGE", "k", "SAMPLES", "0")[1:-2]) == small + 1000
    ours.send("XADD", "s", "1-1", "f", "v")
    assert ours.send("MEMORY", "USAGE", "s")[:1] == b":"
    # What maxmemory limits counts the same: every key's MEMORY USAGE.
    usage = sum(int(ours.send("MEMORY", "USAGE", key)[1:-2]) for key in ("k", "s"))
    assert _dataset(ours) == usage
    ours.send("SETRANGE", "k", "3000", "z")
    ours.send("DEL", "s")
    assert _dataset(ours) == int(ours.send("MEMORY", "USAGE", "k")[1:-2])
    ours.send("DEL", "k")
    assert _dataset(ours) == 0


def _dataset(side: Side) -> int:
    """INFO's ``used_memory_dataset``."""
    info = side.send("INFO", "memory").split(b"\r\n", 1)[1]
    return int(info.split(b"used_memory_dataset:")[1].split(b"\r\n")[0])


def test_blocked_readers_and_a_key_that_becomes_a_string(ports: tuple[int, int]) -> None:
    """XREAD keeps waiting while its key holds a string; XREADGROUP is answered WRONGTYPE, as
    redis-server 7.2 answers it (7.0 answered ``-UNBLOCKED``)."""
    writer, reader, group_reader = Side(ports[1]), Side(ports[1]), Side(ports[1])
    writer.send("FLUSHALL")
    writer.send("XGROUP", "CREATE", "g", "grp", "$", "MKSTREAM")
    reader.sock.sendall(encode(("XREAD", "BLOCK", "0", "STREAMS", "s", "$")))
    group_reader.sock.sendall(
        encode(("XREADGROUP", "GROUP", "grp", "c", "BLOCK", "0", "STREAMS", "g", ">"))
    )
    time.sleep(0.2)
    assert writer.send("SET", "s", "x") == b"+OK\r\n"
    assert writer.send("SET", "g", "x") == b"+OK\r\n"
    assert read_reply(group_reader.file).startswith(b"-WRONGTYPE")
    writer.send("DEL", "s")
    writer.send("XADD", "s", "7-1", "f", "v")
    assert b"7-1" in read_reply(reader.file)
    for side in (writer, reader, group_reader):
        side.close()


OPTION = st.one_of(
    st.sampled_from(["NX", "XX", "GET", "KEEPTTL", "PERSIST", "EX", "PX", "EXAT", "PXAT", "nx", "Get"]),
    st.sampled_from(["100000", "0", "-1", "x", "2000000000", "9999999999", "9223372036854775807"]),
)
"""(No expiry short enough to pass between the two servers' replies.)"""


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    before=st.sampled_from(["none", "string", "expiring", "stream"]),
    options=st.lists(OPTION, max_size=6),
)
def test_set_options_as_redis_server(ports: tuple[int, int], before: str, options: list[str]) -> None:
    both = Pair(*ports)
    try:
        both.same("DEL", "k")
        if before == "stream":
            both.same("XADD", "k", "1-1", "f", "v")
        elif before != "none":
            both.same("SET", "k", "old", *(["EX", "1000"] if before == "expiring" else []))
        both.same("SET", "k", "new", *options)
        both.same("TYPE", "k")
        if before != "stream":
            both.same("GET", "k")
        theirs, ours = both.both("TTL", "k")
        if theirs in (b":-1\r\n", b":-2\r\n"):
            assert ours == theirs
        else:  # (the time left, which may differ by the moment it was asked)
            assert int(ours[1:-2]) >= 0
    finally:
        both.close()


NUMBER_TEXT = st.one_of(
    st.floats(allow_nan=True, allow_infinity=True).map(repr),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: f"{f:.25e}"),
    st.floats(allow_nan=False, allow_infinity=False).map(lambda f: f.hex()),
    st.integers(-(2**70), 2**70).map(str),
    st.builds(
        lambda sign, whole, point, fraction, exponent: f"{sign}{whole}{point}{fraction}{exponent}",
        st.sampled_from(["", "-", "+"]),
        st.sampled_from(["", "0", "1", "123456789012345678901234567890"]),
        st.sampled_from(["", "."]),
        st.sampled_from(["", "5", "000001", "3333333333333333333333"]),
        st.sampled_from(["", "e10", "E-300", "e+4931", "e-4940", "e4933", "e-5000", "e"]),
    ),
    st.text(alphabet="0123456789.e-+xXpinfa ", max_size=12),
)


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(value=NUMBER_TEXT, increment=NUMBER_TEXT)
def test_incrbyfloat_as_redis_server(ports: tuple[int, int], value: str, increment: str) -> None:
    both = Pair(*ports)
    try:
        both.same("SET", "f", value)
        both.same("INCRBYFLOAT", "f", increment)
        both.same("GET", "f")
    finally:
        both.close()


INTEGER_TEXT = st.one_of(
    st.integers(-(2**64), 2**64).map(str),
    st.sampled_from(["9223372036854775807", "-9223372036854775808", "0", "-0", "+1", "01", " 1"]),
    st.sampled_from(["1.0", "", "x", "-", "99999999999999999999999"]),
)


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    value=INTEGER_TEXT,
    command=st.sampled_from(["INCRBY", "DECRBY", "INCR", "DECR"]),
    increment=INTEGER_TEXT,
)
def test_integer_arithmetic_as_redis_server(
    ports: tuple[int, int], value: str, command: str, increment: str
) -> None:
    both = Pair(*ports)
    try:
        both.same("SET", "n", value)
        both.same(command, "n", *([increment] if command.endswith("BY") else []))
        both.same("GET", "n")
    finally:
        both.close()


def test_long_double_rounding() -> None:
    """A few values whose digits show x87 long-double precision (not a double's)."""
    value, tenth = parse_long_double(b"10.5"), parse_long_double(b"0.1")
    assert value is not None
    assert tenth is not None
    total = add_long_doubles(value, tenth)
    assert total is not None
    assert format_long_double(total) == b"10.6"  # (a double's is 10.5999...)
    assert parse_long_double(b"nan") is None
    assert parse_long_double(b"1e-4950") is not None  # (a subnormal, not an underflow to zero)
    assert parse_long_double(b"1e-4952") is None


def test_a_redis_py_lock_set_nx_px(ports: tuple[int, int]) -> None:
    """What redis-py's ``Lock`` sends to take a lock (SET NX PX) and how it behaves."""
    client = redis.Redis(port=ports[1], socket_timeout=5)
    try:
        client.delete("lock")
        assert client.set("lock", "token-1", nx=True, px=10_000) is True
        assert client.set("lock", "token-2", nx=True, px=10_000) is None
        assert client.get("lock") == b"token-1"
        assert 0 < client.pttl("lock") <= 10_000
        assert client.set("lock", "token-1", xx=True, keepttl=True) is True
        assert client.pttl("lock") > 0
        client.delete("lock")
        assert client.set("lock", "token-3", nx=True, px=50) is True
        time.sleep(0.1)
        assert client.set("lock", "token-4", nx=True, px=10_000) is True
        assert client.get("lock") == b"token-4"
    finally:
        client.close()


def test_past_maxmemory_string_writes_that_add_data_are_refused(ports: tuple[int, int]) -> None:
    ours = Side(ports[1])
    try:
        ours.send("SET", "k", "v")
        assert ours.send("CONFIG", "SET", "maxmemory", "1") == b"+OK\r\n"
        for args in (("SET", "k", "w"), ("APPEND", "k", "x"), ("INCR", "n"), ("MSET", "a", "1")):
            assert ours.send(*args).startswith(b"-OOM ")
        assert ours.send("GET", "k") == b"$1\r\nv\r\n"
        assert ours.send("GETDEL", "k") == b"$1\r\nv\r\n"  # (not denyoom: deleting goes on)
    finally:
        ours.send("CONFIG", "SET", "maxmemory", "0")
        ours.close()


@pytest.mark.slow
@settings(max_examples=200, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    a=st.binary(max_size=30).map(lambda b: bytes(97 + x % 4 for x in b)),
    b=st.binary(max_size=30).map(lambda b: bytes(97 + x % 4 for x in b)),
    options=st.sampled_from(
        [[], ["LEN"], ["IDX"], ["IDX", "WITHMATCHLEN"], ["IDX", "MINMATCHLEN", "2", "WITHMATCHLEN"]]
    ),
)
def test_lcs_as_redis_server(ports: tuple[int, int], a: bytes, b: bytes, options: list[str]) -> None:
    both = Pair(*ports)
    try:
        both.same("MSET", "a", a, "b", b)
        both.same("LCS", "a", "b", *options)
    finally:
        both.close()


WORDS = st.sampled_from(
    [
        *["k", "s", "v", "", "0", "1", "-1", "5", "100", "x", "1.5", "1e3", "inf", "nan", " 2", "+3"],
        *["007", "9223372036854775807", "-9223372036854775808", "536870912", "4294967296"],
        *["99999999999", "NX", "XX", "GET", "KEEPTTL", "PERSIST", "EXAT", "PXAT", "IDX", "LEN"],
        *["WITHMATCHLEN", "MINMATCHLEN", "ENCODING", "REFCOUNT", "FREQ", "HELP", "Get", "nx"],
    ]
)
"""(No EX or PX, and no PSETEX: an expiry of a few milliseconds could pass between the two
servers' replies; EXAT and PXAT with these numbers are past or far.)"""
STRING_COMMANDS = [
    "SET", "GET", "GETDEL", "GETEX", "GETSET", "MGET", "MSET", "MSETNX", "SETNX", "SETEX",
    "INCR", "DECR", "INCRBY", "DECRBY", "INCRBYFLOAT", "APPEND", "STRLEN", "GETRANGE", "SUBSTR",
    "SETRANGE", "SETBIT", "GETBIT", "LCS", "OBJECT", "TYPE",
]  # fmt: skip


@pytest.mark.slow
@settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
@given(
    requests=st.lists(
        st.tuples(st.sampled_from(STRING_COMMANDS), st.lists(WORDS, max_size=6)), min_size=1, max_size=8
    )
)
def test_any_arguments_get_redis_servers_reply(
    ports: tuple[int, int], requests: list[tuple[str, list[str]]]
) -> None:
    """Arguments made of the commands' own words, numbers and edge values, in any order: the same
    reply, error or not, as redis-server's (no expiry passes meanwhile: relative ones are long)."""
    both = Pair(*ports)
    try:
        both.same("FLUSHALL")
        both.same("XADD", "s", "1-1", "f", "v")
        for name, args in requests:
            both.same(name, *args)
    finally:
        both.close()
