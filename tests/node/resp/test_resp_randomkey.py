"""RANDOMKEY, TOUCH and COMMAND GETKEYS of scripts beside redis-server: a nil from an empty
database, the only live key of one (an expired key is never picked), TOUCH counting the keys that
exist, and the keys of EVAL and FCALL as their key count says."""

from __future__ import annotations

import shutil

import pytest
import trio

from tests.node.resp.test_resp_conformance import Step
from tests.node.resp.test_resp_conformance import redis_port as redis_port  # (the redis-server fixture)
from tests.node.resp.test_resp_maxmemory import command, same_bytes

needs_redis_server = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="needs redis-server"
)

SCENARIO: list[Step] = [
    (0, command(b"SELECT", b"5") + command(b"FLUSHDB") + command(b"RANDOMKEY")),
    (0, command(b"SET", b"gone", b"v", b"PX", b"1") + command(b"SET", b"k", b"v")),
    (0, command(b"PING") + command(b"PING") + command(b"RANDOMKEY") + command(b"RANDOMKEY")),
    (
        0,
        command(b"TOUCH", b"k", b"k", b"nope", b"gone")
        + command(b"TOUCH")
        + command(b"RANDOMKEY", b"x"),
    ),
    (0, command(b"FLUSHDB") + command(b"SELECT", b"0")),
]


@needs_redis_server
async def test_randomkey_and_touch_as_redis_server(nursery: trio.Nursery, redis_port: int) -> None:
    await same_bytes(nursery, redis_port, SCENARIO)


GETKEYS: list[Step] = [
    (0, command(b"COMMAND", b"GETKEYS", b"EVAL", b"return 1", b"1", b"key")),
    (0, command(b"COMMAND", b"GETKEYS", b"EVAL", b"return 1", b"0")),
    (0, command(b"COMMAND", b"GETKEYS", b"EVALSHA_RO", b"x", b"5", b"a")),
    (
        0,
        command(b"COMMAND", b"GETKEYS", b"EVAL", b"x", b"-1")
        + command(b"COMMAND", b"GETKEYS", b"EVAL", b"x", b"y"),
    ),
    (0, command(b"COMMAND", b"GETKEYS", b"FCALL", b"f", b"2", b"a", b"b", b"c")),
    (
        0,
        command(b"COMMAND", b"GETKEYS", b"FCALL_RO", b"f", b"1", b"a"),
    ),
]


@needs_redis_server
async def test_getkeys_of_scripts_as_redis_server(nursery: trio.Nursery, redis_port: int) -> None:
    await same_bytes(nursery, redis_port, GETKEYS)
