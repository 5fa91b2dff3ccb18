"""RANDOMKEY and TOUCH beside redis-server: a nil from an empty database, the only live key of
one (an expired key is never picked), and TOUCH counting the keys that exist."""

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
