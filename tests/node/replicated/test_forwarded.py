"""Transactions on keys led by another node: packed into one forwarded request, run atomically by
the leader, answered byte for byte as redis-server answers them."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from node.replicated.forwarded import pack_transaction, split_watched, unpack_transaction
from tests.node.replicated.test_path import NAMES, a_led_key, held, start_nodes
from tests.support import until

END = b"$7\r\n__end__\r\n"

QUEUEABLE = st.sampled_from([b"GET", b"set", b"INCR", b"XADD", b"append"])
COMMAND = st.builds(
    lambda name, rest: [name, *rest], QUEUEABLE, st.lists(st.binary(max_size=6), max_size=4)
)


@given(st.lists(COMMAND, min_size=1, max_size=5))
def test_a_packed_transaction_unpacks_to_its_commands(queued: list[list[bytes]]) -> None:
    assert unpack_transaction(pack_transaction(queued)) == queued


TOKEN = st.builds(lambda name, tail: name + b"/" + tail, st.binary(max_size=4), st.binary(max_size=8))


@given(st.lists(COMMAND, max_size=5), st.lists(TOKEN, min_size=1, max_size=3))
def test_a_watched_transaction_carries_its_tokens(
    queued: list[list[bytes]], tokens: list[bytes]
) -> None:
    watched, plain = split_watched(pack_transaction(queued, tokens))
    assert watched == tokens
    assert plain == pack_transaction(queued)
    assert split_watched(plain) == ([], plain)


@given(st.lists(st.binary(max_size=8), max_size=8))
def test_any_arguments_split_into_tokens_and_the_rest(args: list[bytes]) -> None:
    packed = [b"EXEC", b"WATCHED", *args]
    watched, plain = split_watched(packed)
    if watched:  # (the count as written: no leading zero, not zero)
        assert packed == [b"EXEC", b"WATCHED", b"%d" % len(watched), *watched, *plain[1:]]
    else:  # (malformed: left as it is, and so refused as EXEC with arguments)
        assert plain == packed


@given(st.lists(st.binary(max_size=8), max_size=8))
def test_any_arguments_unpack_to_a_transaction_or_none(args: list[bytes]) -> None:
    queued = unpack_transaction([b"EXEC", *args])
    if queued is not None:
        assert pack_transaction(queued)[1:] == args


def test_what_cannot_be_queued_is_no_transaction() -> None:
    assert unpack_transaction(pack_transaction([[b"GET", b"k"], [b"EXEC"]])) is None
    assert unpack_transaction(pack_transaction([[b"MULTI"]])) is None
    assert unpack_transaction(pack_transaction([[b"WATCH", b"k"]])) is None
    assert unpack_transaction([b"EXEC", b"02", b"GET", b"k"]) is None
    assert unpack_transaction([b"EXEC", b"3", b"GET", b"k"]) is None
    assert unpack_transaction([b"EXEC", b"0"]) is None
    assert unpack_transaction([b"GET", b"1", b"GET"]) is None


def request(args: list[bytes]) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%s\r\n" % (len(a), a) for a in args)


def session(port: int, commands: list[list[bytes]]) -> bytes:
    """Every reply's bytes to ``commands`` sent on one connection."""
    data = b"".join(map(request, [*commands, [b"ECHO", b"__end__"]]))
    got = b""
    with socket.create_connection(("127.0.0.1", port), timeout=10) as sock:
        sock.sendall(data)
        while not got.endswith(END):
            chunk = sock.recv(65536)
            assert chunk, got
            got += chunk
    return got[: -len(END)]


def script(tag: bytes) -> list[list[bytes]]:
    a, b, c = (b"{%s}%s" % (tag, name) for name in (b"a", b"b", b"c"))
    return [
        [b"SET", a, b"1"],
        [b"MULTI"],
        [b"INCR", a],
        [b"XADD", a, b"*", b"f", b"v"],  # (refused as it runs: one of the array's replies)
        [b"APPEND", b, b"xy"],
        [b"GETRANGE", b, b"0", b"-1"],
        [b"XADD", c, b"1-1", b"f", b"v"],
        [b"EXEC"],
        [b"MULTI"],
        [b"INCR", a],
        [b"NOSUCHCOMMAND"],  # (refused while queuing: EXEC aborts)
        [b"EXEC"],
        [b"MULTI"],
        [b"EXEC"],
        [b"MULTI"],
        [b"GET", a],
        [b"DISCARD"],
        [b"GET", a],
    ]


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_a_transaction_led_elsewhere_runs_on_the_leader_as_one(
    nursery: trio.Nursery, tmp_path: Path, reference: int
) -> None:
    nodes = await start_nodes(nursery, tmp_path)
    leader, tag = await a_led_key(nodes)
    other = next(name for name in NAMES if name != leader)
    commands = script(tag)
    expected = await trio.to_thread.run_sync(session, reference, commands)
    assert b"*5\r\n:2\r\n-WRONGTYPE" in expected
    got = await trio.to_thread.run_sync(session, nodes[other].redis_port or 0, commands)
    assert got == expected
    for handle in nodes.values():  # (the transaction's changes, committed on every replica)
        await until(lambda handle=handle: held(handle, b"{%s}c" % tag) is not None)  # type: ignore[misc]

    # WATCH: the leader watches the keys for a client of another node (``test_watch``).
    a = b"{%s}a" % tag
    watched = [[b"WATCH", a], [b"MULTI"], [b"GET", a], [b"EXEC"], [b"GET", a]]
    for name in (other, leader):
        port = nodes[name].redis_port or 0
        assert await trio.to_thread.run_sync(session, port, watched) == (
            b"+OK\r\n+OK\r\n+QUEUED\r\n*1\r\n$1\r\n2\r\n$1\r\n2\r\n"
        )


HELLO = b"$9\r\n__hello__\r\n"


def resp3_session(port: int, commands: list[list[bytes]]) -> bytes:
    """``session`` on a connection switched to RESP3 first (HELLO's own reply left out)."""
    got = session(port, [[b"HELLO", b"3"], [b"ECHO", b"__hello__"], *commands])
    return got[got.index(HELLO) + len(HELLO) :]


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_a_resp3_client_gets_resp3_replies_from_the_leader(
    nursery: trio.Nursery, tmp_path: Path, reference: int
) -> None:
    """A command forwarded for a RESP3 connection runs in RESP3 on the leader (maps, nulls,
    transactions and a blocking read's timeout alike), as redis-server answers it."""
    nodes = await start_nodes(nursery, tmp_path)
    leader, tag = await a_led_key(nodes)
    other = next(name for name in NAMES if name != leader)
    s, missing = b"{%s}s" % tag, b"{%s}missing" % tag
    commands = [
        [b"GET", missing],
        [b"XADD", s, b"1-1", b"f", b"v"],
        [b"XREAD", b"COUNT", b"10", b"STREAMS", s, b"0"],
        [b"XREAD", b"COUNT", b"10", b"STREAMS", missing, b"0"],
        [b"MULTI"],
        [b"XRANGE", s, b"-", b"+"],
        [b"GET", missing],
        [b"XREAD", b"STREAMS", s, b"0"],
        [b"EXEC"],
        [b"XREAD", b"BLOCK", b"50", b"STREAMS", s, b"$"],
    ]
    expected = await trio.to_thread.run_sync(resp3_session, reference, commands)
    assert expected.startswith(b"_\r\n$3\r\n1-1\r\n%1\r\n")
    got = await trio.to_thread.run_sync(resp3_session, nodes[other].redis_port or 0, commands)
    assert got == expected


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_requests_of_any_size_are_carried_to_the_leader(
    nursery: trio.Nursery, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    """More arguments than a frame's array may hold (a wide XADD, a long transaction) travel whole,
    and the routes stay up."""
    nodes = await start_nodes(nursery, tmp_path)
    leader, tag = await a_led_key(nodes)
    other = next(name for name in NAMES if name != leader)
    key = b"{%s}wide" % tag
    fields = [part for n in range(3000) for part in (b"f%d" % n, b"v%d" % n)]
    queued = [[b"XADD", key, b"*", b"n", b"%d" % n] for n in range(1500)]
    port = nodes[other].redis_port or 0
    got = await trio.to_thread.run_sync(
        session, port, [[b"XADD", key, b"1-1", *fields], [b"MULTI"], *queued, [b"EXEC"], [b"XLEN", key]]
    )
    assert got.startswith(b"$3\r\n1-1\r\n+OK\r\n" + b"+QUEUED\r\n" * 1500 + b"*1500\r\n")
    assert got.endswith(b":1501\r\n")
    assert "Route protocol error" not in caplog.text  # (no link was closed over it)
