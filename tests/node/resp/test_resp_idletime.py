"""OBJECT IDLETIME: the whole seconds since a key was last read or written, on the keyspaces'
clock of whole seconds (as redis-server's LRU clock). Reads and writes mark a key accessed;
EXISTS, TYPE, the TTL family and OBJECT do not; TOUCH does. The replies around it (a missing key,
arity, FREQ's refusal without an LFU policy) beside redis-server, and the idle time itself on a
live node. A CLIENT NO-TOUCH client's reads (scripts' and transactions' too) leave the
access times as they were."""

from __future__ import annotations

import shutil
import time
from typing import Any

import pytest
import redis
import trio

from node.broker import Broker
from node.config.options import Config
from node.data.keyspaces import Keyspaces
from tests.node.resp.test_resp_conformance import Step
from tests.node.resp.test_resp_conformance import redis_port as redis_port  # (the redis-server fixture)
from tests.node.resp.test_resp_connection import Peer
from tests.node.resp.test_resp_maxmemory import redis_node, same_bytes

needs_redis_server = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="needs redis-server"
)
NOW = 1_700_000_000_000


def test_reads_and_writes_mark_a_key_accessed_and_lookups_that_do_not_touch_leave_it() -> None:
    keyspaces = Keyspaces()
    db = keyspaces.database("$G", 0)
    keyspaces.clock = 100
    db.put(b"k", b"v")
    assert db.access == {b"k": 100}
    keyspaces.clock = 105
    assert db.read(b"k", NOW, False) == b"v"
    assert db.inspect(b"k", NOW) == b"v"
    assert db.get(b"k", NOW) == b"v"
    assert db.access[b"k"] == 100
    db.read(b"k", NOW)
    assert db.access[b"k"] == 105
    keyspaces.clock = 110
    db.set_expiry(b"k", NOW + 1000)
    assert db.access[b"k"] == 110
    db.delete(b"k")
    assert db.access == {}


def test_access_times_go_with_their_keys_on_swapdb() -> None:
    keyspaces = Keyspaces()
    one, two = keyspaces.database("$G", 0), keyspaces.database("$G", 1)
    keyspaces.clock = 7
    one.put(b"a", b"1")
    one.exchange(two)
    assert (one.access, two.access) == ({}, {b"a": 7})


SCENARIO: list[Step] = [
    (0, b"flushall\r\nobject idletime nope\r\nobject idletime\r\nobject idletime a b\r\n"),
    (0, b"set k v\r\nobject idletime k\r\nobject freq k\r\nobject freq nope\r\n"),
    (0, b"xadd s 1-1 f v\r\nobject idletime s\r\nget k\r\ntouch k s nope\r\nobject idletime k\r\n"),
    (0, b"flushall\r\n"),
]


@needs_redis_server
async def test_object_idletime_replies_as_redis_server(nursery: trio.Nursery, redis_port: int) -> None:
    await same_bytes(nursery, redis_port, SCENARIO)


@pytest.mark.slow
async def test_idle_time_counts_from_the_last_access(nursery: trio.Nursery) -> None:
    node = await redis_node(nursery)

    def scenario(port: int) -> None:
        client: Any = redis.Redis(port=port, socket_timeout=5)
        try:
            client.set("foo", "bar")
            client.set("bar", "foo")
            time.sleep(2.2)
            client.ttl("foo")
            client.type("foo")
            client.exists("foo")
            client.pexpiretime("foo")
            assert client.object("idletime", "foo") >= 2
            client.touch("foo")
            client.get("bar")
            assert client.object("idletime", "foo") < 2
            assert client.object("idletime", "bar") < 2
        finally:
            client.close()

    await trio.to_thread.run_sync(scenario, node.redis_port or 0)


def test_a_no_touch_client_reads_without_marking_keys_accessed() -> None:
    broker = Broker(Config())
    keyspaces = broker.keyspaces
    peer, other = Peer(broker), Peer(broker)
    keyspaces.clock = 1000
    assert peer.send("SET", "foo", "bar") == b"+OK\r\n"
    keyspaces.clock = 1010
    assert peer.send("CLIENT", "NO-TOUCH", "maybe") == b"-ERR syntax error\r\n"
    assert peer.send("CLIENT", "NO-TOUCH", "on") == b"+OK\r\n"
    assert b" flags=T " in peer.send("CLIENT", "INFO")
    peer.send("GET", "foo")
    peer.send("EVAL", "return redis.call('get', KEYS[1])", "1", "foo")
    peer.send("MULTI")
    peer.send("GET", "foo")
    peer.send("EXEC")
    assert peer.send("OBJECT", "IDLETIME", "foo") == b":10\r\n"
    assert b" lru:1000 lru_seconds_idle:10" in peer.send("DEBUG", "OBJECT", "foo")
    assert other.send("OBJECT", "IDLETIME", "foo") == b":10\r\n"
    peer.send("SET", "new", "v")  # (a new key is marked at its making even so)
    assert peer.send("OBJECT", "IDLETIME", "new") == b":0\r\n"
    peer.send("TOUCH", "foo")
    assert peer.send("OBJECT", "IDLETIME", "foo") == b":0\r\n"
    keyspaces.clock = 1020
    other.send("GET", "foo")  # (another client's reads mark it as ever)
    assert peer.send("OBJECT", "IDLETIME", "foo") == b":0\r\n"
    keyspaces.clock = 1030
    assert peer.send("CLIENT", "NO-TOUCH", "OFF") == b"+OK\r\n"
    peer.send("GET", "foo")
    assert peer.send("OBJECT", "IDLETIME", "foo") == b":0\r\n"
    assert b" flags=N " in peer.send("CLIENT", "INFO")
