"""Scripts against a live node beside a live redis-server: the recorded replies of
``test_scripting`` replayed against redis-server, hypothesis-generated scripts answered with the
same bytes by both, redis-py's script helpers, and a script's writes and a loaded library kept
across a restart of a node with a store.
"""

from __future__ import annotations

import shutil
import socket
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import pytest
import redis
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.config.options import Config, RedisConfig
from pipeline.local import redis_server
from tests.node.resp.test_scripting import CASES, RESP3_CASES
from tests.support import start_node, start_redis_node

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

needs_redis_server = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="needs redis-server"
)


@pytest.fixture(scope="module")
def redis_port() -> Iterator[int]:
    with redis_server() as port:
        yield port


class Client:
    """A raw RESP connection: one request, one whole reply, as bytes."""

    def __init__(self, port: int) -> None:
        self.sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        self.file = self.sock.makefile("rb")

    def send(self, *args: str | bytes) -> bytes:
        parts = [a.encode() if isinstance(a, str) else a for a in args]
        request = b"*%d\r\n" % len(parts) + b"".join(b"$%d\r\n%b\r\n" % (len(p), p) for p in parts)
        self.sock.sendall(request)
        return self._reply()

    def _reply(self) -> bytes:
        line = self.file.readline()
        kind, size = line[:1], line[1:-2]
        if kind in (b"$", b"=") and int(size) >= 0:
            return line + self.file.read(int(size) + 2)
        if kind in (b"*", b"~", b">", b"%") and int(size) >= 0:
            count = int(size) * (2 if kind == b"%" else 1)
            return line + b"".join(self._reply() for _ in range(count))
        return line

    def close(self) -> None:
        self.file.close()
        self.sock.close()


def _replay(port: int, hello: bool, cases: Sequence[tuple[str, list[str], bytes]]) -> list[Any]:
    client = Client(port)
    try:
        for reset in (["FLUSHALL"], ["SCRIPT", "FLUSH"], ["FUNCTION", "FLUSH"]):
            client.send(*reset)
        if hello:
            client.send("HELLO", "3")
        return [(name, client.send(*args)) for name, args, _ in cases]
    finally:
        client.close()


UNORDERED = {"function list", "function list withcode pattern"}
"""Replies listing a library's functions, which redis-server lists in its hash table's order (the
recording is one of its orders; pubmesh lists them in the order they were registered)."""


@needs_redis_server
def test_the_recorded_replies_are_redis_servers(redis_port: int) -> None:
    for hello, cases in ((False, CASES), (True, RESP3_CASES)):
        got = _replay(redis_port, hello, cases)
        for (name, reply), (_, _, recorded) in zip(got, cases, strict=True):
            if name in UNORDERED:
                assert sorted(reply.split(b"\r\n")) == sorted(recorded.split(b"\r\n")), name
            else:
                assert (name, reply) == (name, recorded)


# -- hypothesis: small scripts, the same bytes from both -------------------------------------------


def _lua_string(data: bytes) -> str:
    return '"' + "".join(f"\\{b}" for b in data) + '"'


def _lua_number(value: float) -> str:
    if value != value:
        return "(0/0)"
    if value in (float("inf"), float("-inf")):
        return "(1/0)" if value > 0 else "(-1/0)"
    return f"({value!r})"


_texts = st.binary(max_size=12)
_scalars = st.one_of(
    st.integers(min_value=-(2**53), max_value=2**53).map(str),
    st.floats(allow_nan=True, allow_infinity=True).map(_lua_number),
    _texts.map(_lua_string),
    st.sampled_from(["true", "false", "nil"]),
    st.sampled_from(
        [
            "redis.call('ping')",
            "redis.pcall('nope')",
            "redis.pcall('echo')",
            "redis.pcall('xadd', 'k', 'bad', 'f', 'v')",
            "redis.call('exists', 'nokey')",
            "redis.call('xrange', 'nokey', '-', '+')",
            "redis.call('type', 'nokey')",
        ]
    ),
    _texts.map(lambda t: f"redis.call('echo', {_lua_string(t)})"),
    _texts.map(lambda t: f"redis.status_reply({_lua_string(t)})"),
    _texts.map(lambda t: f"redis.error_reply({_lua_string(t)})"),
    _texts.map(lambda t: "{ok=" + _lua_string(t) + "}"),
    _texts.map(lambda t: "{err=" + _lua_string(t) + "}"),
)
_values = st.recursive(
    _scalars,
    lambda inner: st.lists(inner, max_size=4).map(lambda v: "{" + ", ".join(v) + "}"),
    max_leaves=8,
)
_scripts = st.one_of(
    _values.map(lambda v: f"return {v}"),
    _values.map(lambda v: f"local ok, e = pcall(function() return {v} end) return {{tostring(ok), e}}"),
    st.sampled_from(
        ["error('x')", "redis.call('nope')", "return 1 +", "return a", "x = 1", "return #KEYS"]
    ),
)


@needs_redis_server
async def test_generated_scripts_get_redis_servers_replies(redis_port: int) -> None:
    async with trio.open_nursery() as nursery:
        node = await start_redis_node(nursery)
        assert node.redis_port is not None
        ours, theirs = Client(node.redis_port), Client(redis_port)

        @settings(max_examples=300, deadline=None, suppress_health_check=list(HealthCheck))
        @given(_scripts, st.booleans())
        def same(script: str, resp3: bool) -> None:
            for client in (ours, theirs):
                client.send("HELLO", "3" if resp3 else "2")
            expected = theirs.send("EVAL", script, "0")
            assert (script, ours.send("EVAL", script, "0")) == (script, expected)

        try:
            await trio.to_thread.run_sync(same)
        finally:
            ours.close()
            theirs.close()
        nursery.cancel_scope.cancel()


# -- redis-py's script helpers ------------------------------------------------------------------------


async def test_redis_py_scripts_and_functions() -> None:
    async with trio.open_nursery() as nursery:
        node = await start_redis_node(nursery)
        port = node.redis_port
        assert port is not None

        def use() -> None:
            r = redis.Redis(port=port, socket_timeout=5)
            appender = r.register_script(
                "redis.call('xadd', KEYS[1], '*', 'n', ARGV[1]) return redis.call('xlen', KEYS[1])"
            )
            assert appender(keys=["log"], args=[1]) == 1  # (EVALSHA fails first, then EVAL)
            assert appender(keys=["log"], args=[2]) == 2
            assert r.script_exists(appender.sha) == [True]
            assert r.evalsha(appender.sha, 1, "log", 3) == 3
            r.script_flush()
            assert r.script_exists(appender.sha) == [False]
            assert appender(keys=["log"], args=[4]) == 4  # (loaded again)
            assert (
                r.function_load(
                    "#!lua name=lib\nredis.register_function('size', "
                    "function(keys) return redis.call('xlen', keys[1]) end)"
                )
                == b"lib"
            )
            assert r.fcall("size", 1, "log") == 4
            with pytest.raises(redis.ResponseError, match="Can not execute a script with write flag"):
                r.fcall_ro("size", 1, "log")
            assert r.function_list()[0][:2] == [b"library_name", b"lib"]
            r.close()

        await trio.to_thread.run_sync(use)
        nursery.cancel_scope.cancel()


# -- journaled as the commands a script ran ------------------------------------------------------------


async def _call(port: int | None, *args: Any) -> Any:
    assert port is not None

    def call() -> Any:
        client = redis.Redis(port=port, socket_timeout=5)
        try:
            return client.execute_command(*args)
        finally:
            client.close()

    return await trio.to_thread.run_sync(call)


async def _rewritten(port: int | None) -> None:
    """Until the node has finished a rewrite of its journal (the test's fail_after bounds it)."""
    while True:
        if (await _call(port, "INFO", "persistence"))["aof_rewrites"]:
            return
        await trio.sleep(0.02)


async def test_a_scripts_writes_and_a_library_survive_a_restart(tmp_path: Path) -> None:
    config = Config(redis=RedisConfig(host="127.0.0.1", port=0), store_dir=str(tmp_path))
    with trio.fail_after(60):
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, config)
            port = node.redis_port
            script = (
                "redis.call('xadd', KEYS[1], '1-1', 'a', '1') "
                "redis.call('xadd', KEYS[1], '2-1', 'b', '2') "
                "redis.call('select', 3) redis.call('xadd', KEYS[2], '1-1', 'c', '3') "
                "redis.call('xadd', KEYS[1], 'bad', 'x', 'y')"
            )
            with pytest.raises(redis.ResponseError, match="Invalid stream ID"):
                await _call(port, "EVAL", script, "2", "s", "t")  # (what it wrote before stays)
            await _call(port, "EVAL", "redis.call('del', KEYS[1])", "1", "gone")
            await _call(
                port,
                "FUNCTION",
                "LOAD",
                "#!lua name=kept\nredis.register_function('total', "
                "function(keys) return redis.call('xlen', keys[1]) end)",
            )
            await _call(port, "BGREWRITEAOF")  # (the rewritten journal keeps the library)
            await _rewritten(port)
            await _call(
                port,
                "FUNCTION",
                "LOAD",
                "#!lua name=later\nredis.register_function('two', function() return 2 end)",
            )
            node.shutdown()
        async with trio.open_nursery() as nursery:
            node = await start_node(nursery, config)
            port = node.redis_port
            assert await _call(port, "XLEN", "s") == 2
            assert await _call(port, "EXISTS", "t") == 0
            assert await _call(port, "FCALL", "total", "1", "s") == 2
            assert await _call(port, "FCALL", "two", "0") == 2
            assert (
                await _call(
                    port, "EVAL", "redis.call('select', 3) return redis.call('xlen', KEYS[1])", "1", "t"
                )
                == 1
            )
            node.shutdown()


# -- a busy script: BUSY for the others, SCRIPT KILL and FUNCTION KILL ---------------------------------

BUSY_EVAL = (
    b"-BUSY Redis is busy running a script. You can only call SCRIPT KILL or SHUTDOWN NOSAVE.\r\n"
)
BUSY_FUNCTION = (
    b"-BUSY Redis is busy running a script. You can only call FUNCTION KILL or SHUTDOWN NOSAVE.\r\n"
)


def _busy(runner: Client, other: Client, request: list[str]) -> bytes:
    """Start ``request`` on ``runner``; once ``other`` is answered BUSY, return that answer."""
    runner.sock.sendall(
        b"*%d\r\n" % len(request) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a.encode()) for a in request)
    )
    while True:  # (each PONG was written at once: none waits behind the script)
        answer = other.send("PING")
        if answer != b"+PONG\r\n":
            return answer


async def test_a_busy_script_answers_others_busy_and_can_be_killed() -> None:
    async with trio.open_nursery() as nursery:
        node = await start_redis_node(nursery)
        node.server.broker.scripts.busy_reply_threshold_ms = 50
        port = node.redis_port
        assert port is not None

        def scenario() -> None:
            runner, other, rude = Client(port), Client(port), Client(port)
            for client in (runner, other, rude):  # (all served before the script starts)
                assert client.send("PING") == b"+PONG\r\n"
            assert _busy(runner, other, ["EVAL", "while true do end", "0"]) == BUSY_EVAL
            rude.sock.sendall(b"*abc\r\n")  # (a protocol error while busy closes only its sender)
            assert rude.file.readline() == b"-ERR Protocol error: invalid multibulk length\r\n"
            rude.close()
            assert other.send("XLEN", "s") == BUSY_EVAL
            assert other.send("FUNCTION", "KILL") == BUSY_EVAL  # (not a function that runs)
            assert other.send("FUNCTION", "STATS") == BUSY_EVAL
            assert other.send("SCRIPT", "KILL") == b"+OK\r\n"
            assert runner._reply().startswith(b"-ERR Script killed by user with SCRIPT KILL... script: ")
            assert other.send("PING") == b"+PONG\r\n"
            # pcall does not catch the kill
            body = "local f = function() while 1 do redis.call('ping') end end while 1 do pcall(f) end"
            assert _busy(runner, other, ["EVAL", body, "0"]) == BUSY_EVAL
            assert other.send("SCRIPT", "KILL") == b"+OK\r\n"
            assert runner._reply().startswith(b"-ERR Script killed by user with SCRIPT KILL...")
            # a script that wrote cannot be killed; it ends on its own
            body = "redis.call('xadd', 's', '*', 'f', 'v') local i = 0 while i < 3e7 do i = i + 1 end"
            assert _busy(runner, other, ["EVAL", body, "0"]) == BUSY_EVAL
            assert other.send("SCRIPT", "KILL").startswith(b"-UNKILLABLE Sorry the script already")
            assert runner._reply() == b"$-1\r\n"
            assert other.send("XLEN", "s") == b":1\r\n"
            # a function: FUNCTION KILL
            other.send(
                "FUNCTION",
                "LOAD",
                "#!lua name=spin\nredis.register_function('spin', function() while true do end end)",
            )
            assert _busy(runner, other, ["FCALL", "spin", "0"]) == BUSY_FUNCTION
            stats = other.send("FUNCTION", "STATS")
            assert stats.startswith(
                b"*4\r\n$14\r\nrunning_script\r\n*6\r\n$4\r\nname\r\n$4\r\nspin\r\n"
                b"$7\r\ncommand\r\n*3\r\n$5\r\nFCALL\r\n$4\r\nspin\r\n$1\r\n0\r\n$11\r\nduration_ms\r\n:"
            )
            assert other.send("SCRIPT", "KILL") == BUSY_FUNCTION
            assert other.send("FUNCTION", "KILL") == b"+OK\r\n"
            assert runner._reply().startswith(b"-ERR Script killed by user with SCRIPT KILL...")
            runner.close()
            other.close()

        with trio.fail_after(60):
            await trio.to_thread.run_sync(scenario)
        nursery.cancel_scope.cancel()


async def test_clients_connecting_while_a_script_is_busy_are_answered_busy() -> None:
    async with trio.open_nursery() as nursery:
        node = await start_redis_node(nursery)
        node.server.broker.scripts.busy_reply_threshold_ms = 10
        port = node.redis_port
        assert port is not None

        def scenario() -> None:
            runner, other = Client(port), Client(port)
            assert other.send("CONFIG", "SET", "lua-time-limit", "10") == b"+OK\r\n"
            # the script and a PING pipelined behind it: the PING is answered after the kill
            runner.sock.sendall(
                b"*3\r\n$4\r\neval\r\n$33\r\nwhile 1 do redis.call('ping') end\r\n$1\r\n0\r\n"
                b"*1\r\n$4\r\nping\r\n"
            )
            while other.send("PING") == b"+PONG\r\n":
                pass
            newcomers = [Client(port) for _ in range(3)]
            for newcomer in newcomers:
                assert newcomer.send("PING") == BUSY_EVAL
                assert newcomer.send("GET", "k") == BUSY_EVAL
            assert newcomers[0].send("SCRIPT", "KILL") == b"+OK\r\n"
            assert runner._reply().startswith(b"-ERR Script killed by user with SCRIPT KILL...")
            assert runner._reply() == b"+PONG\r\n"
            for client in (other, runner, *newcomers):
                assert client.send("PING") == b"+PONG\r\n"
                client.close()

        with trio.fail_after(60):
            await trio.to_thread.run_sync(scenario)
        nursery.cancel_scope.cancel()


def _transactions_while_busy(port: int) -> list[bytes]:
    """A transaction meeting a busy script: MULTI and DISCARD run, a command refused BUSY spoils
    the transaction, and an EXEC refused BUSY ends it (what redis-server answers each time)."""
    runner, other, killer = Client(port), Client(port), Client(port)
    try:
        answers = [killer.send("CONFIG", "SET", "lua-time-limit", "10"), killer.send("SET", "xx", "1")]
        answers.append(_busy(runner, killer, ["EVAL", "while true do end", "0"]))
        answers += [other.send("MULTI"), other.send("MULTI"), other.send("INCR", "xx")]
        answers += [other.send("DISCARD"), other.send("MULTI"), other.send("INCR", "xx")]
        answers += [killer.send("SCRIPT", "KILL"), runner._reply()[:40]]
        answers += [other.send("INCR", "xx"), other.send("EXEC"), other.send("PING", "free")]
        answers += [other.send("MULTI"), other.send("INCR", "xx")]
        answers.append(_busy(runner, killer, ["EVAL", "while true do end", "0"]))
        answers += [other.send("EXEC"), killer.send("SCRIPT", "KILL"), runner._reply()[:40]]
        answers += [other.send("PING", "free"), other.send("GET", "xx")]
        return answers
    finally:
        for client in (runner, other, killer):
            client.close()


@needs_redis_server
async def test_a_transaction_meeting_a_busy_script_as_redis_server(redis_port: int) -> None:
    expected = await trio.to_thread.run_sync(_transactions_while_busy, redis_port)
    async with trio.open_nursery() as nursery:
        node = await start_redis_node(nursery)
        assert node.redis_port is not None
        with trio.fail_after(60):
            got = await trio.to_thread.run_sync(_transactions_while_busy, node.redis_port)
        nursery.cancel_scope.cancel()
    assert expected[12] == b"-EXECABORT Transaction discarded because of previous errors.\r\n"
    assert got == expected
