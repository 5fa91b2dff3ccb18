"""Limits a client meets, over real sockets to a node in this process: how much output a client
that has not signed in may leave unread (on both front doors), the count of such connections in
/varz and INFO, and ``max_subscriptions`` counting Redis channels, shard channels and patterns
together."""

from __future__ import annotations

import json
import socket
import tracemalloc
import urllib.request
from typing import Any

import pytest
import trio

from node.config.options import Config, UserConfig
from node.resp.connection import UNAUTHENTICATED_OUTPUT
from node.run.launch import NodeHandle
from tests.support import start_node, start_redis_node

pytestmark = pytest.mark.timeout(60)

WAIT = 10.0
"""Seconds any one exchange or wait may take."""
MiB = 1 << 20
ALICE = UserConfig(user="alice", password="pw")
PINGS = b"PING\r\n" * (MiB // 6)
NOAUTH = b"-NOAUTH Authentication required.\r\n"
CLOSED = b"<closed>"
"""Stands for the node closing the connection, in answers."""
ATTACKERS = 4


async def start_limited_node(nursery: trio.Nursery, config: Config) -> NodeHandle:
    """A node with a Redis port and a monitoring port; a write deadline far beyond any wait here,
    so a connection the node closes was closed for its output, not for being slow to read."""
    return await start_redis_node(nursery, config.evolve(http_port=0, write_deadline=600.0))


async def connect(port: int) -> trio.SocketStream:
    """A raw connection with a small receive buffer, so replies it leaves unread back up at once."""
    sock = trio.socket.socket()
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    await sock.connect(("127.0.0.1", port))
    return trio.SocketStream(sock)


async def receive(stream: trio.SocketStream, size: int) -> bytes:
    """``size`` bytes, or what came before the close (then ending in ``CLOSED``)."""
    got = b""
    with trio.fail_after(WAIT):
        while len(got) < size:
            try:
                data = await stream.receive_some(1 << 16)
            except trio.BrokenResourceError:  # (a reset: the node closed with input unread)
                data = b""
            if not data:
                return got + CLOSED
            got += data
    return got


async def until(stream: trio.SocketStream, end: bytes) -> bytes:
    """What the node sends up to (and including) ``end``, or up to the close (ending in ``CLOSED``)."""
    got = b""
    with trio.fail_after(WAIT):
        while not got.endswith((end, CLOSED)):
            got += await receive(stream, 1)
    return got


async def flood(stream: trio.SocketStream, data: bytes) -> bytes:
    """Send ``data`` without reading anything, then what the node answers until it closes."""
    try:
        with trio.fail_after(WAIT):
            await stream.send_all(data)
    except trio.BrokenResourceError:
        pass  # (the node closed before taking it all)
    try:
        return await receive(stream, len(data) * 8)  # (more than any answer, so: up to the close)
    finally:
        await trio.aclose_forcefully(stream)


def get_json(handle: NodeHandle, path: str) -> dict[str, Any]:
    url = f"http://127.0.0.1:{handle.http_port}{path}"
    with urllib.request.urlopen(url, timeout=WAIT) as reply:
        doc: dict[str, Any] = json.loads(reply.read())
        return doc


async def varz(handle: NodeHandle) -> dict[str, Any]:
    return await trio.to_thread.run_sync(get_json, handle, "/varz")


# -- output before signing in ----------------------------------------------------------------------


async def test_redis_clients_that_never_sign_in_are_closed_past_16_kib_of_unread_output(
    nursery: trio.Nursery,
) -> None:
    """Four clients each pipeline a MiB of PINGs (5.7 MiB of NOAUTH replies) and read nothing:
    each is closed, its replies dropped, as redis-server closes them, and the node's memory barely
    moves, while a client that signed in may leave as many replies unread as it likes."""
    handle = await start_limited_node(nursery, Config(users=(ALICE,)))
    broker = handle.server.broker
    port = handle.redis_port or 0
    answers: list[bytes] = []

    async def attack() -> None:
        answers.append(await flood(await connect(port), PINGS))

    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        async with trio.open_nursery() as attackers:
            for _ in range(ATTACKERS):
                attackers.start_soon(attack)
        grown = tracemalloc.get_traced_memory()[1] - base
    finally:
        tracemalloc.stop()
    for answer in answers:
        # (replies written before the close, if the node read the PINGs in several pieces)
        assert answer.endswith(CLOSED)
        assert answer == NOAUTH * (len(answer) // len(NOAUTH)) + CLOSED
    assert grown < 4 * MiB  # (the replies were 23 MiB; a Python node's own churn is some MiB)
    assert [c.closing for c in broker.closed] == ["Slow Consumer (Pending Bytes)"] * ATTACKERS
    assert broker.slow_consumers == ATTACKERS

    signed_in = await connect(port)
    await signed_in.send_all(b"AUTH alice pw\r\n" + PINGS)
    expected = b"+OK\r\n" + b"+PONG\r\n" * (len(PINGS) // 6)
    assert await receive(signed_in, len(expected)) == expected
    await signed_in.aclose()


@pytest.mark.parametrize(("pings", "closed"), [(481, False), (482, True)])
async def test_the_limit_is_redis_servers(nursery: trio.Nursery, pings: int, closed: bool) -> None:
    """Replies that fit in 16 KiB are all sent (481 NOAUTH lines); one more, and none is, as
    redis-server (7.0.15, with its limit for clients that never signed in) answers too."""
    handle = await start_limited_node(nursery, Config(users=(ALICE,)))
    stream = await connect(handle.redis_port or 0)
    await stream.send_all(b"PING\r\n" * pings + b"AUTH alice pw\r\n")
    answer = await receive(stream, len(NOAUTH) * pings + 5)
    await stream.aclose()
    assert (len(NOAUTH) * pings > UNAUTHENTICATED_OUTPUT) == closed
    assert answer == (CLOSED if closed else NOAUTH * pings + b"+OK\r\n")


@pytest.mark.slow
async def test_a_client_that_signed_in_once_keeps_its_freedom(nursery: trio.Nursery) -> None:
    """The limit holds until the first sign-in: after a RESET (signed out again) replies may pile
    up, as redis-server lets a client that was ever authenticated do."""
    handle = await start_limited_node(nursery, Config(users=(ALICE,)))
    stream = await connect(handle.redis_port or 0)
    await stream.send_all(b"AUTH alice pw\r\nRESET\r\n" + PINGS)
    expected = b"+OK\r\n+RESET\r\n" + NOAUTH * (len(PINGS) // 6)
    assert await receive(stream, len(expected)) == expected
    await stream.aclose()


@pytest.mark.parametrize("first", [b"PING\r\n", b'CONNECT {"user":"alice","pass":"nope"}\r\n'])
async def test_nats_clients_get_nothing_but_the_refusal_before_signing_in(
    nursery: trio.Nursery, first: bytes
) -> None:
    """A NATS client that must sign in and pipelines PINGs gets its INFO, one Authorization
    Violation and the close, as from nats-server: its output cannot grow either."""
    handle = await start_node(nursery, Config(users=(ALICE,), write_deadline=600.0))
    stream = await connect(handle.port)
    info = await until(stream, b"\r\n")
    assert info.startswith(b"INFO {")
    assert await flood(stream, first + PINGS) == b"-ERR 'Authorization Violation'\r\n" + CLOSED


async def test_connections_yet_to_sign_in_are_counted(nursery: trio.Nursery) -> None:
    """/varz ``unauthenticated_connections`` counts both front doors; Redis ``INFO clients`` its
    own as ``unauthenticated_clients``."""
    handle = await start_limited_node(nursery, Config(users=(ALICE,), auth_timeout=WAIT * 6))
    port = handle.redis_port or 0
    waiting = [await connect(port) for _ in range(3)] + [await connect(handle.port)]
    signed_in = await connect(port)
    await signed_in.send_all(b"AUTH alice pw\r\n")
    assert await receive(signed_in, 5) == b"+OK\r\n"
    nats = await connect(handle.port)
    await nats.send_all(b'CONNECT {"user":"alice","pass":"pw","verbose":false}\r\nPING\r\n')
    assert (await until(nats, b"PONG\r\n")).endswith(b"\r\nPONG\r\n")

    assert (await varz(handle))["unauthenticated_connections"] == 4
    await signed_in.send_all(b"INFO clients\r\n")
    info = await until(signed_in, b"\r\n\r\n")  # (the end of the one section asked for)
    for field in (b"connected_clients:4", b"pubsub_clients:0", b"unauthenticated_clients:3"):
        assert b"\r\n" + field + b"\r\n" in info

    await waiting[0].send_all(b"AUTH alice pw\r\n")
    assert await receive(waiting[0], 5) == b"+OK\r\n"
    assert (await varz(handle))["unauthenticated_connections"] == 3
    for stream in [*waiting, signed_in, nats]:
        await stream.aclose()


# -- max_subscriptions -----------------------------------------------------------------------------


def request(*args: bytes) -> bytes:
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args)


def ack(kind: bytes, name: bytes, count: int) -> bytes:
    return b"*3\r\n$%d\r\n%b\r\n$%d\r\n%b\r\n:%d\r\n" % (len(kind), kind, len(name), name, count)


LIMIT = b"-ERR maximum subscriptions exceeded\r\n"


async def exchange(stream: trio.SocketStream, data: bytes, expected: bytes) -> None:
    await stream.send_all(data)
    assert await receive(stream, len(expected)) == expected


async def test_patterns_count_against_max_subscriptions(nursery: trio.Nursery) -> None:
    """With max_subscriptions 3, channels, shard channels and patterns count together: whichever
    kind comes fourth is refused with the same error."""
    handle = await start_limited_node(nursery, Config(max_subscriptions=3))
    port = handle.redis_port or 0

    channels_first = await connect(port)
    await exchange(
        channels_first,
        request(b"SUBSCRIBE", b"a", b"b"),
        ack(b"subscribe", b"a", 1) + ack(b"subscribe", b"b", 2),
    )
    await exchange(
        channels_first, request(b"PSUBSCRIBE", b"x*", b"y*"), ack(b"psubscribe", b"x*", 3) + LIMIT
    )
    await exchange(channels_first, request(b"PSUBSCRIBE", b"x*"), ack(b"psubscribe", b"x*", 3))
    await exchange(channels_first, request(b"SUBSCRIBE", b"c"), LIMIT)

    patterns_first = await connect(port)
    await exchange(
        patterns_first,
        request(b"PSUBSCRIBE", b"x*", b"y*"),
        ack(b"psubscribe", b"x*", 1) + ack(b"psubscribe", b"y*", 2),
    )
    await exchange(patterns_first, request(b"SUBSCRIBE", b"a", b"b"), ack(b"subscribe", b"a", 3) + LIMIT)

    shard = await connect(port)
    await exchange(shard, request(b"SSUBSCRIBE", b"s"), ack(b"ssubscribe", b"s", 1))
    await exchange(
        shard,
        request(b"PSUBSCRIBE", b"x*") + request(b"SUBSCRIBE", b"a"),
        ack(b"psubscribe", b"x*", 1) + ack(b"subscribe", b"a", 2),
    )
    await exchange(shard, request(b"PSUBSCRIBE", b"y*"), LIMIT)
    await exchange(shard, request(b"SSUBSCRIBE", b"t"), LIMIT)
    for stream in (channels_first, patterns_first, shard):
        await stream.aclose()
