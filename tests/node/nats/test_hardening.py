"""Attacks on the client port, replayed over real sockets against a running node.

Each of these once ended the whole process, or let one client pin memory the node never gave back.
Every test sends the attack, checks the answer on the attacking connection (a protocol error and a
close, or normal processing), and then checks that another client is still served.

The CONNECT answers are a conformance table, checked against pubmesh and, where it is installed,
against nats-server (2.9.10 answered as the table says), which reads CONNECT into a typed struct.
"""

from __future__ import annotations

import shutil
import subprocess
import tracemalloc
from functools import partial

import pytest
import trio

from cluster.config import ClusterConfig
from node.broker import Broker
from node.config.options import Config, UserConfig
from node.nats.client import ClientConnection
from node.nats.protocol import writer as w
from node.run.launch import NodeHandle
from pipeline.local import free_port
from tests.support import start_node, until

pytestmark = pytest.mark.timeout(60)

QUIET = b'CONNECT {"verbose":false,"pedantic":false}\r\n'
PONG = b"PONG\r\n"
CLOSED = b"<closed>"
"""Stands for the server closing the connection, in expected answers."""
AUTH_VIOLATION = b"-ERR 'Authorization Violation'\r\n" + CLOSED
WAIT = 10.0
"""Seconds any one exchange or wait may take."""
MiB = 1 << 20


async def open_client(port: int) -> trio.SocketStream:
    """A raw connection whose INFO line has been read (so nothing unread is left when it closes)."""
    stream = await trio.open_tcp_stream("127.0.0.1", port)
    greeting = b""
    with trio.fail_after(WAIT):
        while not greeting.endswith(b"\r\n"):
            data = await stream.receive_some(4096)
            assert data, "closed before INFO"
            greeting += data
    assert greeting.startswith(b"INFO {")
    return stream


async def exchange(port: int, data: bytes, *, until: bytes = PONG) -> bytes:
    """What the server answers ``data`` on a new connection: everything up to ``until`` (ending
    the answer), or up to the close (then ending in ``CLOSED``)."""
    stream = await open_client(port)
    answer = b""
    try:
        await stream.send_all(data)
        with trio.fail_after(WAIT):
            while not answer.endswith(until):
                try:
                    received = await stream.receive_some(1 << 16)
                except trio.BrokenResourceError:  # (a reset, if the server closed with input unread)
                    received = b""
                if not received:
                    return answer + CLOSED
                answer += received
    finally:
        await trio.aclose_forcefully(stream)
    return answer


async def assert_serving(port: int) -> None:
    """A fresh client can still subscribe, publish to itself and get its message."""
    answer = await exchange(port, QUIET + b"SUB still.here 1\r\n" + w.pub(b"still.here", b"ok") + w.PING)
    assert answer == b"MSG still.here 1 2\r\nok\r\n" + PONG


# -- 1. credentials that are not valid Unicode -----------------------------------------------------

ALICE = UserConfig(user="alice", password="pw")
TOKEN = UserConfig(token="s3cret")


@pytest.mark.parametrize(
    ("users", "connect"),
    [
        ((TOKEN,), rb'CONNECT {"auth_token":"\ud800"}'),
        ((TOKEN,), b'CONNECT {"auth_token":"s3cret\xff"}'),
        ((ALICE,), rb'CONNECT {"user":"alice","pass":"\udfff"}'),
        ((ALICE,), rb'CONNECT {"user":"\ud800","pass":"pw"}'),
    ],
)
async def test_credentials_that_are_not_valid_unicode_fail_authentication(
    nursery: trio.Nursery, users: tuple[UserConfig, ...], connect: bytes
) -> None:
    handle = await start_node(nursery, Config(users=users))
    assert await exchange(handle.port, connect + b"\r\nPING\r\n") == AUTH_VIOLATION
    login = {"auth_token": "s3cret"} if users == (TOKEN,) else {"user": "alice", "pass": "pw"}
    answer = await exchange(handle.port, w.connect({"verbose": False, **login}) + w.PING)
    assert answer == PONG


# -- 2. subjects that are not UTF-8 on a node with routes ------------------------------------------


@pytest.fixture
async def routed(nursery: trio.Nursery) -> tuple[NodeHandle, NodeHandle]:
    """Two nodes joined by routes, so interest is encoded for links."""
    first = await start_node(nursery, Config(cluster=ClusterConfig(host="127.0.0.1", port=0)))
    seeds = (f"nats://127.0.0.1:{first.cluster_port}",)
    second = await start_node(
        nursery, Config(cluster=ClusterConfig(host="127.0.0.1", port=0, seeds=seeds))
    )
    await until(
        lambda: all(
            handle.routes is not None and any(link.registered for link in handle.routes.links)
            for handle in (first, second)
        )
    )
    return first, second


async def routed_messages(
    subscriber: trio.SocketStream, publisher: trio.SocketStream, subject: bytes, expected: bytes
) -> None:
    """Publish on one node until the subscriber on the other gets ``expected`` (interest crosses
    the route in its own time), then check that nothing else came."""
    received = b""
    with trio.fail_after(WAIT):
        while expected not in received:
            await publisher.send_all(w.pub(subject, b"x"))
            with trio.move_on_after(0.1):
                while expected not in received:
                    received += await subscriber.receive_some(4096)
    assert set(received.split(expected)) <= {b""}


@pytest.mark.parametrize(
    "sub",
    [
        b"SUB a.\xff 1",
        b"SUB \xc3 1",
        b"SUB a q\xff 1",
        b"SUB a.\xed\xa0\x80 1",
    ],  # (the last: a surrogate)
)
async def test_a_subscription_that_is_not_utf8_is_an_invalid_subject(
    routed: tuple[NodeHandle, NodeHandle], sub: bytes
) -> None:
    first, second = routed
    attacker = await open_client(first.port)
    await attacker.send_all(QUIET + sub + b"\r\nSUB valid.\xc3\xa9 2\r\nPING\r\n")
    answer = b""
    with trio.fail_after(WAIT):
        while not answer.endswith(PONG):
            answer += await attacker.receive_some(4096)
    assert answer == b"-ERR 'Invalid Subject'\r\n" + PONG  # and the connection carries on
    # The valid subscription made after it crossed the route.
    publisher = await open_client(second.port)
    await publisher.send_all(QUIET)
    await routed_messages(attacker, publisher, "valid.é".encode(), b"MSG valid.\xc3\xa9 2 1\r\nx\r\n")
    for stream in (attacker, publisher):
        await trio.aclose_forcefully(stream)
    await assert_serving(first.port)
    await assert_serving(second.port)


async def test_published_subjects_that_are_not_utf8_cross_routes_as_bytes(
    routed: tuple[NodeHandle, NodeHandle],
) -> None:
    first, second = routed
    subscriber = await open_client(second.port)
    await subscriber.send_all(QUIET + b"SUB > 1\r\n")
    publisher = await open_client(first.port)
    await publisher.send_all(QUIET)
    await routed_messages(subscriber, publisher, b"a.\xff", b"MSG a.\xff 1 1\r\nx\r\n")
    for stream in (subscriber, publisher):
        await trio.aclose_forcefully(stream)
    await assert_serving(first.port)


# -- 3. CONNECT fields of the wrong type: pubmesh and nats-server ----------------------------------

OK_PONG = b"+OK\r\nPONG\r\n"
CONFORMANCE: dict[str, list[tuple[bytes, bytes]]] = {
    "open": [
        (b'{"verbose":false}', PONG),
        (b'{"verbose":"yes"}', CLOSED),
        (b'{"verbose":1}', CLOSED),
        (b'{"verbose":null}', OK_PONG),  # null leaves the default
        (b'{"pedantic":"no"}', CLOSED),
        (b'{"user":5}', CLOSED),
        (b'{"pass":5}', CLOSED),
        (b'{"auth_token":5}', CLOSED),
        (b'{"echo":1}', CLOSED),
        (b'{"echo":"false"}', CLOSED),
        (b'{"protocol":"1"}', CLOSED),
        (b'{"protocol":1.5}', CLOSED),
        (b'{"protocol":1.0}', CLOSED),
        (b'{"protocol":1e0}', CLOSED),
        (b'{"protocol":99999999999999999999}', CLOSED),
        (b'{"protocol":-0}', OK_PONG),
        (b'{"protocol":2}', b"-ERR 'invalid client protocol'\r\n" + CLOSED),
        (b'{"headers":[]}', CLOSED),
        (b'{"headers":1}', CLOSED),
        (b'{"no_responders":"x"}', CLOSED),
        (b'{"name":{}}', CLOSED),
        (b'{"name":5}', CLOSED),
        (b'{"lang":5}', CLOSED),
        (b'{"version":[]}', CLOSED),
        (b'{"tls_required":"x"}', CLOSED),
        (b'{"new_account":"x"}', CLOSED),
        (b'{"account":5}', CLOSED),
        (b'{"import":5}', CLOSED),
        (b'{"import":{"allow":"a"}}', CLOSED),
        (b'{"import":{"allow":["a"]}}', OK_PONG),
        (b'{"VERBOSE":false}', PONG),  # names match regardless of case
        (b'{"Verbose":"x"}', CLOSED),
        (b'{"verbose":"x","verbose":false}', CLOSED),  # every occurrence is checked
        (b'{"unknown":{"a":[1,2]}}', OK_PONG),
        (rb'{"verbose":false,"name":"\ud800"}', PONG),
        (b'{"verbose":false,"name":"\xff"}', PONG),
        (b"[]", CLOSED),
        (b'{"verbose":false} junk', CLOSED),
    ],
    "users": [
        (b'{"user":"alice","pass":"pw","verbose":false}', PONG),
        (rb'{"user":"alice","pass":"\ud800","verbose":false}', AUTH_VIOLATION),
        (rb'{"user":"\ud800","pass":"pw","verbose":false}', AUTH_VIOLATION),
        (b'{"user":"alice","pass":"p\xffw","verbose":false}', AUTH_VIOLATION),
        (b'{"user":"alice","pass":5}', CLOSED),
        (b'{"user":5,"pass":"pw"}', CLOSED),
        (b'{"user":null,"pass":"pw"}', AUTH_VIOLATION),
        (b'{"user":"alice","pass":"pw","verbose":"x"}', CLOSED),
    ],
    "token": [
        (b'{"auth_token":"s3cret","verbose":false}', PONG),
        (rb'{"auth_token":"\ud800","verbose":false}', AUTH_VIOLATION),
        (b'{"auth_token":5}', CLOSED),
    ],
}
"""CONNECT arguments (sent with a PING), and what the server answers, by how auth is set up."""
USERS = {"open": (), "users": (ALICE,), "token": (TOKEN,)}
NATS_SERVER_FLAGS = {
    "open": [],
    "users": ["--user", "alice", "--pass", "pw"],
    "token": ["--auth", "s3cret"],
}


async def answers(port: int, mode: str) -> list[tuple[bytes, bytes]]:
    return [
        (argument, await exchange(port, b"CONNECT " + argument + b"\r\nPING\r\n"))
        for argument, _ in CONFORMANCE[mode]
    ]


@pytest.mark.parametrize("mode", sorted(CONFORMANCE))
async def test_connect_is_answered_as_the_conformance_table_says(
    nursery: trio.Nursery, mode: str
) -> None:
    handle = await start_node(nursery, Config(users=USERS[mode]))
    assert await answers(handle.port, mode) == CONFORMANCE[mode]  # (each on a connection of its own)


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("nats-server") is None, reason="nats-server is not installed")
@pytest.mark.parametrize("mode", sorted(CONFORMANCE))
async def test_nats_server_answers_connect_as_the_conformance_table_says(mode: str) -> None:
    port = free_port()
    command = [shutil.which("nats-server") or "", "-a", "127.0.0.1", "-p", str(port)]
    async with trio.open_nursery() as nursery:
        server = await nursery.start(
            partial(
                trio.run_process,
                command + NATS_SERVER_FLAGS[mode],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
                check=False,
            )
        )
        with trio.fail_after(WAIT):
            while True:
                try:
                    await trio.aclose_forcefully(await trio.open_tcp_stream("127.0.0.1", port))
                    break
                except OSError:
                    await trio.sleep(0.05)
        try:
            assert await answers(port, mode) == CONFORMANCE[mode]
        finally:
            server.terminate()


# -- 4. closed connections do not keep what they held ----------------------------------------------

CLIENTS = 100


async def hang_up(client: trio.SocketStream) -> None:
    """Leave as a client does, with a FIN and nothing unread: the node's first PING (about two
    seconds in) may be waiting, and closing over unread bytes would reset the connection instead."""
    await client.send_eof()
    with trio.fail_after(WAIT):
        while await client.receive_some(4096):
            pass
    await client.aclose()


def held_by(broker: Broker) -> int:
    """Bytes the node's open client connections hold unparsed."""
    return sum(c.parser.buffered for c in broker.clients.values() if isinstance(c, ClientConnection))


async def test_closed_connections_keep_no_buffers(nursery: trio.Nursery) -> None:
    """Clients that each leave a 1 MiB PUB unfinished and go: while they are connected the node
    holds their bytes; once they have gone (and are listed as closed) it holds none of them."""
    handle = await start_node(nursery)
    broker = handle.server.broker
    unfinished = b"PUB a 1048576\r\n" + bytes(MiB - 1)
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        clients = []
        for _ in range(CLIENTS):
            client = await open_client(handle.port)
            await client.send_all(QUIET + unfinished)
            clients.append(client)
        await until(lambda: held_by(broker) >= CLIENTS * MiB)  # every unfinished message is in
        held = tracemalloc.get_traced_memory()[0] - base
        for client in clients:
            await hang_up(client)
        await until(
            lambda: len(broker.closed) == CLIENTS and tracemalloc.get_traced_memory()[0] - base < 8 * MiB
        )
        kept = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    assert held > CLIENTS * MiB
    assert kept < 8 * MiB  # (a closed connection's record is a few KiB)
    assert {c.closing for c in broker.closed} == {"Client Closed"}
    await assert_serving(handle.port)


# -- 5. bare-LF control lines ----------------------------------------------------------------------


async def test_a_long_run_of_bare_lf_lines_is_answered_in_full(nursery: trio.Nursery) -> None:
    handle = await start_node(nursery)
    lines = 20_000
    answer = await exchange(
        handle.port,
        QUIET + b"PING\n" * lines + b"PUB a 1\nx\r\n" * lines + b"UNSUB 9\nPING\n",
        until=PONG * (lines + 1),
    )
    assert answer == PONG * (lines + 1)
    await assert_serving(handle.port)
