"""SAVE, LASTSAVE and SHUTDOWN: refused inside MULTI (spoiling the transaction) and SHUTDOWN's
argument checks beside redis-server; SAVE making the journal durable, and SHUTDOWN stopping the
node (after saving, or not with NOSAVE) and its keys surviving the restart."""

from __future__ import annotations

import shutil
import time
from pathlib import Path
from typing import Any

import pytest
import redis
import trio

from node.broker import Broker
from node.config.options import Config
from tests.node.resp.test_resp_conformance import Step
from tests.node.resp.test_resp_conformance import redis_port as redis_port  # (the redis-server fixture)
from tests.node.resp.test_resp_connection import Peer
from tests.node.resp.test_resp_maxmemory import redis_node, same_bytes

needs_redis_server = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="needs redis-server"
)

SCENARIO: list[Step] = [
    (0, b"del foo\r\nmulti\r\nset foo bar\r\nsave\r\nexec\r\nget foo\r\n"),
    (0, b"multi\r\nset foo bar\r\nshutdown\r\nexec\r\nget foo\r\n"),
    (0, b"multi\r\nshutdown nosave now\r\nshutdown bogus\r\nsave extra\r\nexec\r\n"),
    (0, b"multi\r\nsave\r\ndiscard\r\n"),  # (LASTSAVE in MULTI: below, its time is each server's)
    # Checked before anything is done: none of these stops the server.
    (0, b"shutdown bogus\r\nshutdown abort nosave\r\nshutdown save nosave\r\nshutdown now abort\r\n"),
    (0, b"shutdown abort\r\nSHUTDOWN ABORT\r\nsave x\r\n"),
]


@needs_redis_server
async def test_save_and_shutdown_as_redis_server(nursery: trio.Nursery, redis_port: int) -> None:
    await same_bytes(nursery, redis_port, SCENARIO)


def _run(port: int, *requests: tuple[Any, ...]) -> list[Any]:
    client: Any = redis.Redis(port=port, socket_timeout=5)
    try:
        return [client.execute_command(*request) for request in requests]
    finally:
        client.close()


async def test_save_makes_changes_durable_and_lastsave_follows(tmp_path: Path) -> None:
    def scenario(port: int) -> None:
        started = int(time.time())
        before, ok, saved, after = _run(
            port, ("LASTSAVE",), ("SET", "k", "fresh"), ("SAVE",), ("LASTSAVE",)
        )
        assert ok is True
        assert saved is True
        assert before <= after
        assert _run(port, ("MULTI",), ("LASTSAVE",), ("EXEC",))[2] == [int(after.timestamp())]
        assert after.timestamp() >= started
        assert b"fresh" in (tmp_path / "appendonly.log").read_bytes()

    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            node = await redis_node(nursery, store_dir=str(tmp_path), appendfsync="no")
            await trio.to_thread.run_sync(scenario, node.redis_port or 0)
            node.shutdown()


async def test_save_without_a_store_is_refused(nursery: trio.Nursery) -> None:
    node = await redis_node(nursery)
    with pytest.raises(redis.ResponseError, match="in memory only"):
        await trio.to_thread.run_sync(lambda: _run(node.redis_port or 0, ("SAVE",)))


@pytest.mark.parametrize("how", [("SHUTDOWN",), ("SHUTDOWN", "NOSAVE", "NOW"), ("shutdown", "save")])
async def test_shutdown_stops_the_node_and_keys_survive(tmp_path: Path, how: tuple[str, ...]) -> None:
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            node = await redis_node(nursery, store_dir=str(tmp_path))
            port = node.redis_port or 0
            await trio.to_thread.run_sync(lambda: _run(port, ("SET", "k", "v")))
            with pytest.raises(redis.ConnectionError):  # (no reply: the connection closes)
                await trio.to_thread.run_sync(lambda: _run(port, how))
            await node.finished.wait()
        async with trio.open_nursery() as nursery:
            node = await redis_node(nursery, store_dir=str(tmp_path))
            got = await trio.to_thread.run_sync(lambda: _run(node.redis_port or 0, ("GET", "k")))
            assert got == [b"v"]
            node.shutdown()


def test_shutdown_of_a_node_nothing_can_stop_is_refused() -> None:
    peer = Peer(Broker(Config()))  # (no runner: the broker has no ``stop``)
    assert peer.send("SHUTDOWN", "NOSAVE") == b"-ERR Errors trying to SHUTDOWN. Check logs.\r\n"
    assert peer.send("PING") == b"+PONG\r\n"
