"""A command a script may not run is counted as a rejected call of that command (INFO
commandstats) and its error once (INFO errorstats), as redis-server counts them: the script's
error that repeats it, raised by ``redis.call`` or returned as ``redis.pcall`` gave it, is not
counted again; a shebang's empty ``flags=`` gives a script no flags
(so past ``maxmemory`` it is refused as any flagged script is), beside redis-server."""

from __future__ import annotations

import shutil
from typing import Any

import pytest
import redis
import trio

from node.broker import Broker
from node.config.options import Config
from tests.node.resp.test_resp_conformance import Step
from tests.node.resp.test_resp_conformance import redis_port as redis_port  # (the redis-server fixture)
from tests.node.resp.test_resp_connection import Peer
from tests.node.resp.test_resp_maxmemory import command, redis_node, same_bytes

needs_redis_server = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="needs redis-server"
)

SCENARIO: list[Step] = [
    (
        0,
        command(b"EVAL", b"#!lua flags=\nreturn 1", b"0")
        + command(b"EVAL", b"#!lua flags=,\nreturn 1", b"0"),
    ),
    (0, command(b"SET", b"x", b"123") + command(b"CONFIG", b"SET", b"maxmemory", b"1")),
    (0, command(b"EVAL", b"#!lua flags=\nreturn 1", b"0") + command(b"EVAL", b"#!lua\nreturn 1", b"0")),
    (0, command(b"EVAL", b"return redis.call('set', 'x', 1)", b"0") + command(b"GET", b"x")),
    (0, command(b"EVAL", b"#!lua flags=allow-oom\nreturn redis.call('set', 'x', 1)", b"0")),
    (0, command(b"CONFIG", b"SET", b"maxmemory", b"0") + command(b"DEL", b"x")),
]


@needs_redis_server
async def test_empty_shebang_flags_as_redis_server(nursery: trio.Nursery, redis_port: int) -> None:
    await same_bytes(nursery, redis_port, SCENARIO)


def _commandstat(peer: Peer, name: bytes) -> bytes:
    info = peer.send("INFO", "commandstats")
    start = info.find(b"cmdstat_" + name + b":")
    return info[start : info.find(b"\r\n", start)] if start >= 0 else b""


def test_a_refused_command_of_a_script_counts_as_rejected() -> None:
    peer = Peer(Broker(Config()))
    peer.send("CONFIG", "RESETSTAT")
    assert peer.send("CONFIG", "SET", "maxmemory", "1") == b"+OK\r\n"
    assert peer.send("EVAL", "return redis.call('set', 'x', 'y')", "1", "x").startswith(b"-OOM ")
    assert b"calls=0," in _commandstat(peer, b"set")
    assert b"rejected_calls=1,failed_calls=0" in _commandstat(peer, b"set")
    assert b"calls=1," in _commandstat(peer, b"eval")
    assert peer.send("CONFIG", "SET", "maxmemory", "0") == b"+OK\r\n"
    peer.send("CONFIG", "RESETSTAT")
    peer.send("EVAL_RO", "return redis.pcall('set', 'x', 'y')", "0")
    peer.send("EVAL", "return redis.pcall('get', 'x', 'y')", "0")
    peer.send("EVAL", "return redis.pcall('nope')", "0")
    assert b"rejected_calls=1," in _commandstat(peer, b"set")
    assert b"rejected_calls=1," in _commandstat(peer, b"get")
    assert _commandstat(peer, b"nope") == b""


def _error_counts(port: int) -> list[object]:
    """Error replies and stats around scripts whose commands fail or are refused."""
    client: Any = redis.Redis(port=port, socket_timeout=5)
    seen: list[object] = []

    def stats() -> tuple[object, object]:
        return client.info("errorstats"), client.info("stats")["total_error_replies"]

    def run(method: str, *args: object) -> None:
        client.config_resetstat()
        try:
            seen.append(getattr(client, method)(*args))
        except redis.ResponseError as exc:
            seen.append(str(exc)[:30])
        seen.append(stats())

    try:
        client.config_set("maxmemory", "1")
        run("eval", "return redis.call('set','x','y')", 1, "x")
        seen.append(client.info("commandstats")["cmdstat_set"]["rejected_calls"])
        run("eval", "local t = redis.pcall('set','x','y') return t['err'] and 1 or 0", 1, "x")
        run("eval", "return redis.pcall('set','x','y')", 1, "x")
        client.config_set("maxmemory", "0")
        run("eval", "return redis.call('select', 99)", 0)
        run("eval", "local t = redis.pcall('select', 99) return t['err'] and 1 or 0", 0)
        run("eval", "return redis.error_reply('MY err')", 0)
        run("eval_ro", "return redis.call('set','x','y')", 1, "x")
        run("eval", "redis.pcall('select', 99) return redis.error_reply('ERR other')", 0)
    finally:
        client.config_set("maxmemory", "0")
        client.close()
    return seen


@needs_redis_server
async def test_errors_of_script_commands_counted_once_as_redis_server(
    nursery: trio.Nursery, redis_port: int
) -> None:
    node = await redis_node(nursery)

    def both() -> tuple[list[object], list[object]]:
        return _error_counts(redis_port), _error_counts(node.redis_port or 0)

    theirs, ours = await trio.to_thread.run_sync(both)
    assert ours == theirs
