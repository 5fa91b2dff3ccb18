"""SWAPDB side by side with redis-server (skipped where it is not installed): the errors, the keys
and expiry times exchanged, WATCH spoiled for keys either database holds, blocked readers served
by a stream swapped in; and the swap repeated when the journal is replayed."""

from __future__ import annotations

import shutil
from pathlib import Path
from typing import Any

import pytest
import redis
import trio

from node.config.options import Config, RedisConfig
from tests.node.resp.test_resp_conformance import Step, play
from tests.node.resp.test_resp_conformance import redis_port as redis_port  # (the redis-server fixture)
from tests.support import start_node

pytestmark = pytest.mark.timeout(60)

SWAPDB: list[Step] = [
    (0, b"flushall\r\nset a 1\r\nset b 2\r\npexpireat b 4102444800123\r\nselect 1\r\nset c 3\r\n"),
    (0, b"select 0\r\nswapdb x 1\r\nswapdb 1 x\r\nswapdb 99999999999 0\r\nswapdb 0 99999999999\r\n"),
    (0, b"swapdb -1 0\r\nswapdb 0 16\r\nswapdb 01 1\r\nswapdb 0\r\nswapdb 0 1 2\r\nswapdb 3 3\r\n"),
    # Watchers: spoiled for a key either database holds, not for one neither does.
    (1, b"watch a\r\nmulti\r\nping\r\n"),
    (2, b"watch zz\r\nmulti\r\nping\r\n"),
    (0, b"swapdb 0 1\r\n"),
    (1, b"exec\r\n"),
    (2, b"exec\r\n"),
    (0, b"get a\r\nget c\r\ndbsize\r\nselect 1\r\nget a\r\npexpiretime b\r\nget c\r\ndbsize\r\n"),
    (0, b"select 0\r\nswapdb 1 0\r\nget a\r\npexpiretime b\r\nselect 5\r\nswapdb 0 5\r\ndbsize\r\n"),
    (0, b"get a\r\nselect 0\r\ndbsize\r\nswapdb 5 0\r\n"),
    # A reader blocked on a stream of database 2 is served by one swapped in.
    (0, b"select 3\r\nxadd s 1-1 f v\r\n"),
    (1, b"select 2\r\nxread count 1 block 0 streams s 0\r\n"),
    (0, b"swapdb 2 3\r\n"),
    (1, b"ping\r\n"),
    (0, b"flushall\r\n"),
]  # fmt: skip


async def redis_node(nursery: trio.Nursery, **config: Any) -> Any:
    return await start_node(
        nursery, Config(redis=RedisConfig(host="127.0.0.1", port=0)).evolve(**config)
    )


@pytest.mark.slow
@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
async def test_swapdb_as_redis_server(nursery: trio.Nursery, redis_port: int) -> None:
    node = await redis_node(nursery)

    def both() -> tuple[list[tuple[int, bytes, bytes]], list[tuple[int, bytes, bytes]]]:
        return list(play(redis_port, SWAPDB)), list(play(node.redis_port or 0, SWAPDB))

    theirs, ours = await trio.to_thread.run_sync(both)
    assert any(b"$1\r\n3\r\n" in got for _, _, got in theirs)
    for expected, got in zip(theirs, ours, strict=True):
        assert got == expected


async def test_swapdb_is_repeated_when_the_journal_is_replayed(tmp_path: Path) -> None:
    def run(port: int, *requests: tuple[Any, ...]) -> list[Any]:
        client: Any = redis.Redis(port=port, socket_timeout=5)
        try:
            return [client.execute_command(*request) for request in requests]
        finally:
            client.close()

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            node = await redis_node(nursery, store_dir=str(tmp_path))
            await trio.to_thread.run_sync(
                lambda: run(
                    node.redis_port,
                    ("SET", "a", "1"),
                    ("PEXPIREAT", "a", 4102444800123),
                    ("SELECT", "4"),
                    ("SET", "b", "2"),
                    ("SWAPDB", "0", "4"),
                    ("SET", "c", "3"),
                )
            )
            node.shutdown()
        async with trio.open_nursery() as nursery:
            node = await redis_node(nursery, store_dir=str(tmp_path))
            got = await trio.to_thread.run_sync(
                lambda: run(
                    node.redis_port,
                    ("MGET", "a", "b", "c"),
                    ("SELECT", "4"),
                    ("MGET", "a", "b", "c"),
                    ("PEXPIRETIME", "a"),
                )
            )
            assert got == [[None, b"2", None], True, [b"1", None, b"3"], 4102444800123]
            node.shutdown()
