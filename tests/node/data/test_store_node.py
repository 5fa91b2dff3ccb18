"""A node with a store: configuration, INFO persistence, CONFIG GET, BGREWRITEAOF, automatic
rewrites, a clean stop and start, and a damaged file refusing the start with a clear error."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import redis
import trio

from node.broker import Broker
from node.config.load import from_mapping
from node.config.options import Config, ConfigError, RedisConfig
from node.data.store import COMMIT, FILE_NAME, encode
from node.run.cli import command_line_config
from tests.node.resp.test_resp_connection import Peer
from tests.support import start_node

pytestmark = pytest.mark.timeout(60)


def test_store_settings_from_toml_and_flags() -> None:
    config = from_mapping({"store_dir": "/data", "appendfsync": "always", "rewrite_min_size": 10})
    assert (config.store_dir, config.appendfsync, config.rewrite_min_size) == ("/data", "always", 10)
    assert config.rewrite_percentage == 100
    with pytest.raises(ConfigError, match="appendfsync must be one of always, everysec, no"):
        from_mapping({"appendfsync": "sometimes"})
    flags = command_line_config(["--store_dir", "/d", "--appendfsync", "no"])
    assert (flags.store_dir, flags.appendfsync) == ("/d", "no")
    assert Config().store_dir is None
    assert Config().appendfsync == "everysec"


def test_without_a_store_keys_live_in_memory_and_say_so() -> None:
    peer = Peer(Broker(Config()))
    assert b"aof_enabled:0\r\n" in peer.send("INFO", "persistence")
    assert peer.send("CONFIG", "GET", "append*") == (
        b"*4\r\n$10\r\nappendonly\r\n$2\r\nno\r\n$11\r\nappendfsync\r\n$8\r\neverysec\r\n"
    )
    assert peer.send("BGREWRITEAOF").startswith(b"-ERR no append only file to rewrite")


async def _call(node: Any, *args: Any) -> Any:
    def call() -> Any:
        return redis.Redis(port=node.redis_port, socket_timeout=5).execute_command(*args)

    return await trio.to_thread.run_sync(call)


async def _info(node: Any) -> dict[str, Any]:
    info: dict[str, Any] = await _call(node, "INFO", "persistence")  # (redis-py parses it)
    return info


async def _rewritten(node: Any) -> None:
    """Until the node has finished a rewrite (the test's fail_after bounds it)."""
    while True:
        if (await _info(node))["aof_rewrites"]:
            return
        await trio.sleep(0.02)


def _config(directory: Path, **changes: Any) -> Config:
    return Config(redis=RedisConfig(host="127.0.0.1", port=0), store_dir=str(directory), **changes)


async def test_a_node_keeps_its_keys_across_a_stop_and_a_rewrite(tmp_path: Path) -> None:
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, _config(tmp_path, appendfsync="always"))
            info = await _info(node)
            assert (info["aof_enabled"], info["aof_fsync_policy"]) == (1, "always")
            assert await _call(node, "CONFIG", "GET", "appendonly") == {b"appendonly": b"yes"}
            assert await _call(node, "CONFIG", "GET", "appendfsync") == {b"appendfsync": b"always"}
            await _call(node, "XADD", "s", "1-1", "f", "v")
            await _call(node, "XGROUP", "CREATE", "s", "g", "0")
            await _call(node, "XREADGROUP", "GROUP", "g", "c", "STREAMS", "s", ">")
            assert node.redis_port is not None
            stream = await trio.open_tcp_stream("127.0.0.1", node.redis_port)
            await stream.send_all(b"BGREWRITEAOF\r\nBGREWRITEAOF\r\n")
            got = b""
            while got.count(b"\r\n") < 2:
                got += await stream.receive_some()
            assert got == (
                b"+Background append only file rewriting started\r\n"
                b"-ERR Background append only file rewriting already in progress\r\n"
            )
            await stream.aclose()
            await _rewritten(node)
            await _call(node, "XADD", "s", "2-1", "f", "w")
            info = await _info(node)
            assert info["aof_last_bgrewrite_status"] == "ok"
            assert info["aof_current_size"] > info["aof_base_size"]
            node.shutdown()
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, _config(tmp_path))
            assert await _call(node, "XRANGE", "s", "-", "+") == [
                (b"1-1", {b"f": b"v"}),
                (b"2-1", {b"f": b"w"}),
            ]
            pending = await _call(node, "XPENDING", "s", "g")
            assert (pending["pending"], pending["min"], pending["max"]) == (1, b"1-1", b"1-1")
            node.shutdown()


async def test_renamenx_move_copy_and_expiry_times_survive_a_restart(tmp_path: Path) -> None:
    when = 4102444800123  # (ms: the year 2100)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, _config(tmp_path))
            await _call(node, "XADD", "a", "1-1", "f", "v")
            await _call(node, "XADD", "b", "1-1", "f", "v")
            await _call(node, "PEXPIREAT", "a", when)
            assert await _call(node, "RENAMENX", "a", "b") == 0
            assert await _call(node, "RENAMENX", "a", "c") == 1
            await _call(node, "XADD", "m", "1-1", "f", "v")
            await _call(node, "PEXPIREAT", "m", when)
            assert await _call(node, "MOVE", "m", 3) == 1
            await _call(node, "XGROUP", "CREATE", "c", "g", "0")
            assert await _call(node, "COPY", "c", "cc") == 1
            await _call(node, "XADD", "c", "2-1", "f", "v")  # (the copy stays as it was)
            node.shutdown()
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, _config(tmp_path))
            assert await _call(node, "EXISTS", "a", "b", "c") == 2
            assert await _call(node, "PEXPIRETIME", "c") == when
            assert await _call(node, "EXPIRETIME", "c") == (when + 500) // 1000
            assert await _call(node, "EXPIRETIME", "b") == -1
            assert await _call(node, "PEXPIRETIME", "cc") == when
            assert (await _call(node, "XLEN", "c"), await _call(node, "XLEN", "cc")) == (2, 1)
            [group] = await _call(node, "XINFO", "GROUPS", "cc")
            assert (group[b"name"], group[b"lag"]) == (b"g", 1)
            assert await _call(node, "MOVE", "m", 3) == 0  # (not here: in database 3, with its time)

            def in_db3() -> Any:
                with redis.Redis(port=node.redis_port or 0, db=3) as client:
                    return client.execute_command("PEXPIRETIME", "m")

            assert await trio.to_thread.run_sync(in_db3) == when
            node.shutdown()


async def test_the_file_is_rewritten_when_it_has_doubled(tmp_path: Path) -> None:
    config = _config(tmp_path, rewrite_min_size=2000, rewrite_percentage=100)
    with trio.fail_after(30):
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, config)
            for _ in range(20):
                await _call(node, "XADD", "s", "MAXLEN", "1", "*", "field", "x" * 100)
            await _rewritten(node)
            info = await _info(node)
            assert info["aof_base_size"] < 1000  # (one entry left: a small file)
            node.shutdown()


@pytest.mark.slow
def test_a_damaged_file_stops_the_start_naming_file_and_offset(tmp_path: Path) -> None:
    first = encode("$G", 0, [b"XADD", b"s", b"1-1", b"f", b"v"]) + COMMIT
    damaged = bytearray(first)
    damaged[20] ^= 1
    (tmp_path / FILE_NAME).write_bytes(first + damaged + first)
    args = [sys.executable, "-m", "node.run.cli", "serve", "-a", "127.0.0.1", "-p", "0"]
    done = subprocess.run(
        [*args, "--store_dir", str(tmp_path)], capture_output=True, text=True, timeout=30
    )
    assert done.returncode == 1
    assert f"{tmp_path / FILE_NAME}: record checksum mismatch at offset {len(first)}" in done.stderr
    assert "Traceback" not in done.stderr
