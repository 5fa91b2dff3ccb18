"""What clients are told about changes to replicated keys, wherever they are connected: keyspace
notifications, published once by the group's leader and routed to subscribers on every node, and
client-side caching's invalidations, sent by a client's own node as it applies the change."""

from __future__ import annotations

import socket
import time
from pathlib import Path

import pytest
import redis
import trio

from node.config.options import RedisConfig
from tests.node.replicated import test_path
from tests.node.replicated.test_path import NAMES, a_led_key, start_nodes

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


@pytest.fixture
def notifying(monkeypatch: pytest.MonkeyPatch) -> None:
    """Nodes started with ``notify-keyspace-events KEA``."""

    def config(**fields: object) -> RedisConfig:
        return RedisConfig(**fields, notify_keyspace_events="KEA")  # type: ignore[arg-type]

    monkeypatch.setattr(test_path, "RedisConfig", config)


@pytest.mark.usefixtures("notifying")
async def test_keyspace_events_reach_subscribers_on_every_node_once(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    nodes = await start_nodes(nursery, tmp_path)
    leader, key = await a_led_key(nodes)
    other = next(name for name in NAMES if name != leader)

    def run() -> dict[str, list[tuple[bytes, bytes]]]:
        clients = {
            name: redis.Redis(port=h.redis_port or 0, socket_timeout=5) for name, h in nodes.items()
        }
        try:
            subs = {name: c.pubsub() for name, c in clients.items()}
            for sub in subs.values():
                sub.psubscribe("__key*__:*")
                assert sub.get_message(timeout=5) is not None  # (the confirmation)
            time.sleep(0.5)  # (the interest reaches the other nodes)
            clients[other].xadd(key, {"f": "v"})  # (forwarded to the leader)
            clients[leader].set(key + b"x", "1")
            got: dict[str, list[tuple[bytes, bytes]]] = {}
            for name, sub in subs.items():
                got[name] = []
                deadline = time.monotonic() + 5
                while len(got[name]) < 4 and time.monotonic() < deadline:
                    message = sub.get_message(timeout=0.5)
                    if message is not None and message["type"] == "pmessage":
                        got[name].append((message["channel"], message["data"]))
                time.sleep(0.3)  # (no more come)
                assert sub.get_message(timeout=0.2) is None, name
            return got
        finally:
            for c in clients.values():
                c.close()

    got = await trio.to_thread.run_sync(run)
    expected = [
        (b"__keyspace@0__:" + key, b"xadd"),
        (b"__keyevent@0__:xadd", key),
        (b"__keyspace@0__:" + key + b"x", b"set"),
        (b"__keyevent@0__:set", key + b"x"),
    ]
    assert got == {name: expected for name in NAMES}


async def test_a_cached_key_led_elsewhere_is_invalidated_when_it_changes(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    """RESP3 client tracking on a node that does not lead the key: the read (alone, or in a
    transaction) goes to the leader, the key is remembered here, and the write (made through
    another node) invalidates it as this node applies it."""
    nodes = await start_nodes(nursery, tmp_path)
    leader, key = await a_led_key(nodes)
    reader, writer = (name for name in NAMES if name != leader)

    queued = b"{%s}queued" % key  # (in the same slot)

    def until_in(sock: socket.socket, end: bytes) -> bytes:
        got = b""
        while end not in got:
            chunk = sock.recv(65536)
            assert chunk, got
            got += chunk
        return got

    def run() -> tuple[bytes, bytes]:
        with redis.Redis(port=nodes[writer].redis_port or 0, socket_timeout=5) as w:
            w.set(key, "old")
            w.set(queued, "old")
            with socket.create_connection(("127.0.0.1", nodes[reader].redis_port or 0), 5) as sock:
                sock.sendall(b"HELLO 3\r\nCLIENT TRACKING ON\r\nGET %s\r\n" % key)
                until_in(sock, b"$3\r\nold\r\n")
                w.set(key, "new")
                alone = until_in(sock, key + b"\r\n")
                sock.sendall(b"MULTI\r\nGET %s\r\nEXEC\r\n" % queued)
                until_in(sock, b"*1\r\n$3\r\nold\r\n")
                w.set(queued, "new")
                return alone, until_in(sock, queued + b"\r\n")

    alone, in_transaction = await trio.to_thread.run_sync(run)
    for pushed, name in [(alone, key), (in_transaction, queued)]:
        assert pushed == b">2\r\n$10\r\ninvalidate\r\n*1\r\n$%d\r\n%s\r\n" % (len(name), name)
