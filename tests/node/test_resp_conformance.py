"""The same requests against redis-server and a pubmesh node's Redis port: the same bytes back.

Each scenario is a list of steps on numbered connections; after every step the bytes each
connection received are compared. Skipped where redis-server is not installed. The installed
server may be 7.0, so the scenarios avoid what 7.2 changed (pushes produced while a command runs
come after its reply there, which ``test_resp_connection`` checks) and what is only an identity
(HELLO's map, client ids).
"""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Iterator

import pytest
import trio

from node.config import Config, RedisConfig
from tests.live import free_port
from tests.node.conftest import start_node

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]

Step = tuple[int, bytes]

SCENARIOS: dict[str, list[Step]] = {
    "commands and their errors": [
        (0, b"PING\r\n"),
        (0, b"*2\r\n$4\r\nping\r\n$2\r\nhi\r\n"),
        (0, b"echo x\r\n"),
        (0, b"ping a b\r\n"),
        (0, b"foo a b\r\n"),
        (0, b"FOO\r\n"),
        (0, b"client foo\r\n"),
        (0, b"client\r\n"),
        (0, b"client reply\r\n"),
        (0, b"client setname a\tb\r\n"),
        (0, b"select 16\r\nselect x\r\nselect 3\r\n"),
        (0, b"hello 4\r\nhello x\r\nhello 3 auth a\r\n"),
        (0, b"auth x\r\n"),
        (0, b"dbsize\r\n"),
        (0, b"pubsub foo\r\npubsub numpat\r\npubsub channels\r\npubsub numsub a b\r\n"),
        (0, b"config get databases\r\n"),
        (0, b"unsubscribe\r\npunsubscribe\r\nsunsubscribe\r\n"),
        (0, b"subscribe\r\npublish x\r\n"),
    ],
    "subscribed mode in RESP2": [
        (0, b"subscribe c1 c2 c1\r\n"),
        (0, b"psubscribe c* h?llo\r\n"),
        (0, b"ping\r\nping hi\r\n"),
        (0, b"client id\r\n"),
        (0, b"echo x\r\n"),
        (0, b"unsubscribe nope\r\nunsubscribe c1\r\n"),
        (0, b"punsubscribe h?llo\r\n"),
        (1, b"publish c2 m1\r\n"),
        (0, b"ping\r\n"),
        (1, b"publish c9 m2\r\n"),
        (0, b"reset\r\nping\r\n"),
        (1, b"publish c2 m3\r\n"),
    ],
    "shard channels": [
        (0, b"ssubscribe s1 s2\r\n"),
        (1, b"spublish s1 hi\r\n"),
        (0, b"sunsubscribe s1\r\n"),  # (one left: listings of several come in hash order there)
        (1, b"pubsub shardchannels\r\npubsub shardnumsub s2 s3\r\n"),
        (0, b"sunsubscribe\r\nsunsubscribe\r\n"),
    ],
    "channels that are not subjects": [
        (0, b'subscribe "hello world" a..b > *\r\n'),
        (1, b'publish "hello world" 1\r\npublish a..b 2\r\npublish > 3\r\npublish * 4\r\n'),
        (1, b"pubsub numsub > * a..b\r\n"),
    ],
    "RESP3 pushes": [
        (0, b"hello 3\r\n"),
        (0, b"subscribe x\r\nping\r\necho y\r\n"),
        (1, b"publish x z\r\n"),
        (0, b"unsubscribe x\r\nunsubscribe\r\n"),
    ],
    "protocol errors": [
        (0, b"subscribe c\r\n"),
        (0, b"*1\r\nx\r\n"),
        (1, b"*abc\r\n"),
        (2, b"*1\r\n$x\r\n"),
    ],
}
SKIP_COMPARE = {b"hello 3\r\n"}
"""Steps whose reply is an identity (server version, client id): sent, not compared."""


def receive(conn: socket.socket, first: float) -> bytes:
    """What arrives within ``first`` seconds and then until the connection stays quiet (or closes)."""
    got = b""
    conn.settimeout(first)
    while True:
        try:
            chunk = conn.recv(1 << 16)
        except TimeoutError:
            return got
        if not chunk:
            return got
        got += chunk
        conn.settimeout(0.05)


def play(port: int, steps: list[Step]) -> Iterator[tuple[int, bytes, bytes]]:
    """Send each step and yield (connection, request, what each connection received)."""
    conns: dict[int, socket.socket] = {}
    try:
        for index, request in steps:
            for n in {index, *(i for i, _ in steps)}:
                if n not in conns:
                    conns[n] = socket.create_connection(("127.0.0.1", port), timeout=5)
            conns[index].sendall(request)
            for n in sorted(conns):
                yield n, request, receive(conns[n], 2.0 if n == index else 0.1)
    finally:
        for conn in conns.values():
            conn.close()


@pytest.fixture(scope="module")
def redis_port() -> Iterator[int]:
    port = free_port()
    args = [
        "redis-server",
        "--port",
        str(port),
        "--bind",
        "127.0.0.1",
        "--save",
        "",
        "--appendonly",
        "no",
    ]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        deadline = time.monotonic() + 10
        while True:
            try:
                socket.create_connection(("127.0.0.1", port), timeout=1).close()
                break
            except OSError:
                assert time.monotonic() < deadline, "redis-server did not start"
                time.sleep(0.05)
        yield port
    finally:
        process.kill()
        process.wait(10)


@pytest.mark.parametrize("name", list(SCENARIOS))
async def test_same_bytes_as_redis_server(nursery: trio.Nursery, redis_port: int, name: str) -> None:
    node = await start_node(nursery, Config(redis=RedisConfig(host="127.0.0.1", port=0)))
    steps = SCENARIOS[name]

    def both() -> tuple[list[tuple[int, bytes, bytes]], list[tuple[int, bytes, bytes]]]:
        return list(play(redis_port, steps)), list(play(node.redis_port or 0, steps))

    theirs, ours = await trio.to_thread.run_sync(both)
    for expected, got in zip(theirs, ours, strict=True):
        if expected[1] not in SKIP_COMPARE:
            assert got == expected
