"""INFO stats' ``keyspace_hits`` and ``keyspace_misses``, and the ``keymiss`` keyspace event, side
by side with redis-server (skipped where it is not installed): which commands count their lookups,
how many each, and CONFIG RESETSTAT zeroing them."""

from __future__ import annotations

import contextlib
import shutil
from typing import Any

import pytest
import redis
import trio

from node.config.options import Config, RedisConfig
from tests.node.resp.test_resp_conformance import Step, play
from tests.node.resp.test_resp_conformance import redis_port as redis_port  # (the redis-server fixture)
from tests.support import start_node

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]

SETUP = [
    ["FLUSHALL"],
    ["SET", "s", "hello"],
    ["XADD", "x", "1-1", "f", "v"],
    ["XGROUP", "CREATE", "x", "g", "0"],
]
COMMANDS = [
    ["GET", "s"], ["GET", "nx"], ["MGET", "s", "nx", "nx", "x"], ["STRLEN", "s"],
    ["GETRANGE", "s", "0", "1"], ["SUBSTR", "nx", "0", "1"], ["GETBIT", "s", "1"],
    ["EXISTS", "s", "nx", "x"], ["TOUCH", "s", "nx"], ["TYPE", "s"], ["TYPE", "nx"],
    ["TTL", "s"], ["PTTL", "nx"], ["EXPIRETIME", "s"], ["PEXPIRETIME", "nx"],
    ["OBJECT", "ENCODING", "s"], ["OBJECT", "REFCOUNT", "nx"], ["OBJECT", "FREQ", "s"],
    ["LCS", "s", "nx"], ["COPY", "s", "s2"], ["COPY", "nx", "s3"],
    ["XLEN", "x"], ["XLEN", "nx"], ["XRANGE", "x", "-", "+"], ["XREVRANGE", "nx", "+", "-"],
    ["XREAD", "STREAMS", "x", "nx", "0", "0"], ["XREADGROUP", "GROUP", "g", "c", "STREAMS", "x", ">"],
    ["XPENDING", "x", "g"], ["XCLAIM", "x", "g", "c", "0", "1-1"],
    ["XAUTOCLAIM", "x", "g", "c", "0", "0"], ["XACK", "x", "g", "1-1"],
    ["XINFO", "STREAM", "x"], ["XINFO", "GROUPS", "nx"], ["XINFO", "CONSUMERS", "x", "g"],
    ["GETEX", "s"], ["GETSET", "s", "hello"], ["SET", "s", "hello", "GET"], ["GETDEL", "nx"],
    # Writes, and lookups redis-server does not count.
    ["SET", "t", "1"], ["APPEND", "t", "x"], ["INCR", "n"], ["SETRANGE", "t", "0", "a"],
    ["SETNX", "t", "v"], ["MSETNX", "a", "1", "b", "2"], ["XADD", "x", "*", "a", "b"],
    ["XTRIM", "x", "MAXLEN", "5"], ["XDEL", "x", "9-9"], ["EXPIRE", "t", "100"],
    ["PERSIST", "nx"], ["RENAME", "t", "t2"], ["MOVE", "t2", "1"], ["DEL", "nx", "a"],
    ["RANDOMKEY"], ["KEYS", "*"], ["SCAN", "0"], ["DBSIZE"],
]  # fmt: skip


def counts(client: Any) -> tuple[int, int]:
    stats = client.info("stats")
    return stats["keyspace_hits"], stats["keyspace_misses"]


def counted(port: int) -> list[tuple[str, int, int]]:
    """For each command: the hits and misses it added."""
    client: Any = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5)
    try:
        for request in SETUP:
            client.execute_command(*request)
        found = []
        for request in COMMANDS:
            client.execute_command("CONFIG", "RESETSTAT")
            assert counts(client) == (0, 0)
            with contextlib.suppress(redis.ResponseError):
                client.execute_command(*request)
            found.append((" ".join(request), *counts(client)))
        return found
    finally:
        client.close()


async def test_hits_and_misses_counted_as_redis_server(nursery: trio.Nursery, redis_port: int) -> None:
    node = await start_node(nursery, Config(redis=RedisConfig(host="127.0.0.1", port=0)))

    def both() -> tuple[list[tuple[str, int, int]], list[tuple[str, int, int]]]:
        return counted(redis_port), counted(node.redis_port or 0)

    theirs, ours = await trio.to_thread.run_sync(both)
    assert any(hits for _, hits, _ in theirs)
    assert any(misses for _, _, misses in theirs)
    assert ours == theirs


KEYMISS: list[Step] = [
    (0, b"flushall\r\nconfig set notify-keyspace-events KEm\r\nset s v\r\n"),
    (1, b"psubscribe __key*\r\n"),
    (0, b"get s\r\nget nx\r\nmget s nx\r\nexists nx\r\ntype nx\r\nttl nx\r\nstrlen nx\r\n"),
    (0, b"xlen nx\r\nxrange nx - +\r\nxread streams nx 0\r\nincr n\r\nappend s x\r\n"),
    (0, b"object encoding nx\r\nobject freq nx\r\nmemory usage nx\r\ndbsize\r\n"),
    (0, b"config set notify-keyspace-events Em\r\nget nx\r\nconfig set notify-keyspace-events KE\r\n"),
    (0, b"get nx\r\nconfig set notify-keyspace-events ''\r\n"),
]
"""``keymiss`` events where redis-server sends them (class ``m``, in both kinds of channel)."""


async def test_keymiss_events_as_redis_server(nursery: trio.Nursery, redis_port: int) -> None:
    node = await start_node(nursery, Config(redis=RedisConfig(host="127.0.0.1", port=0)))

    def both() -> tuple[list[tuple[int, bytes, bytes]], list[tuple[int, bytes, bytes]]]:
        return list(play(redis_port, KEYMISS)), list(play(node.redis_port or 0, KEYMISS))

    theirs, ours = await trio.to_thread.run_sync(both)
    assert any(b"keymiss" in got for _, _, got in theirs)
    for expected, got in zip(theirs, ours, strict=True):
        assert got == expected
