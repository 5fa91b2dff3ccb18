"""COPY and MOVE beside redis-server: the same replies and errors, and a copied stream is an independent
twin of its source (entries, counters, groups, consumers and pending entries, as XINFO STREAM FULL
shows them), in this database or another; generated sequences of COPY, MOVE and SELECT with any
options leave the same keys where redis-server leaves them."""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.run.launch import NodeHandle
from pipeline.local import redis_server
from pubmesh_testing import running_node
from tests.support import start_redis_node

pytestmark = [
    pytest.mark.timeout(60),
    pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server"),
]

FAR = 4102444800000  # (ms: the year 2100)


def _scenario(port: int) -> list[Any]:
    client = redis.Redis(host="127.0.0.1", port=port, socket_timeout=5, protocol=2)
    client.response_callbacks.clear()  # (raw replies)

    def call(*args: Any) -> Any:
        try:
            return client.execute_command(*args)
        except redis.ResponseError as exc:
            return f"error: {exc}"

    try:
        call("FLUSHALL")
        for ms, field in ((100, "a"), (101, "b"), (102, "c"), (103, "e"), (104, "f"), (105, "g")):
            call("XADD", "x", ms, field, 1)
        call("XGROUP", "CREATE", "x", "g1", "0")
        call("XGROUP", "CREATE", "x", "g2", "0")
        call("XREADGROUP", "GROUP", "g1", "Alice", "COUNT", 1, "STREAMS", "x", ">")
        call("XREADGROUP", "GROUP", "g1", "Bob", "COUNT", 1, "STREAMS", "x", ">")
        call("XREADGROUP", "GROUP", "g1", "Bob", "NOACK", "COUNT", 1, "STREAMS", "x", ">")
        call("XREADGROUP", "GROUP", "g2", "Charlie", "COUNT", 4, "STREAMS", "x", ">")
        call("XGROUP", "SETID", "x", "g1", "101-0")
        call("XREADGROUP", "GROUP", "g1", "Dave", "COUNT", 3, "STREAMS", "x", ">")
        call("XDEL", "x", 103)
        call("PEXPIREAT", "x", FAR)
        seen: list[Any] = [call("COPY", "x", "twin")]
        full = call("XINFO", "STREAM", "x", "FULL")
        seen.append(call("XINFO", "STREAM", "twin", "FULL") == full)
        call("XADD", "x", "300-0", "z", 1)  # (the source changes, the twin does not)
        call("XACK", "x", "g2", "100-0")
        call("XGROUP", "DELCONSUMER", "x", "g1", "Dave")
        seen.append(call("XINFO", "STREAM", "twin", "FULL") == full)
        call("DEL", "x")
        seen.append(call("XINFO", "STREAM", "twin", "FULL") == full)
        call("XADD", "twin", "200-0", "z", 1)
        seen += [
            call("PEXPIRETIME", "twin"),
            call("XPENDING", "twin", "g2"),
            call("COPY", "twin", "twin"),
            call("COPY", "twin", "twin", "DB", 0),
            call("COPY", "twin", "y", "DB", 16),
            call("COPY", "twin", "y", "DB", "x"),
            call("COPY", "twin", "y", "DB", 2**40),
            call("COPY", "twin", "y", "FOO"),
            call("COPY", "twin", "y", "DB"),
            call("COPY", "nope", "y"),
            call("COPY", "twin", "y", "DB", 3),
            call("COPY", "twin", "y", "DB", 3),
            call("COPY", "twin", "y", "REPLACE", "DB", 3),
            call("COPY", "twin", "twin", "DB", 3, "replace", "db", 0),
            call("EXISTS", "y"),
            call("SELECT", 3),
            call("XLEN", "y"),
            call("PEXPIRETIME", "y"),
            call("XINFO", "GROUPS", "y"),
            call("MOVE", "y", 3),
            call("MOVE", "y", 0),
            call("MOVE", "y", 0),
            call("EXISTS", "y"),
        ]
        return seen
    finally:
        client.close()


async def test_copy_matches_redis_server(nursery: trio.Nursery) -> None:
    node: NodeHandle = await start_redis_node(nursery)

    def both() -> tuple[list[Any], list[Any]]:
        with redis_server() as port:
            theirs = _scenario(port)
        return theirs, _scenario(node.redis_port or 0)

    theirs, ours = await trio.to_thread.run_sync(both)
    assert theirs[:4] == [1, True, True, True]
    assert ours == theirs


def _string_scenario(port: int) -> list[Any]:
    with redis.Redis(host="127.0.0.1", port=port, socket_timeout=5, protocol=2) as client:
        client.response_callbacks.clear()
        requests: list[tuple[Any, ...]] = [
            ("FLUSHALL",),
            ("SET", "a", "12"),
            ("APPEND", "a", "34"),  # (a string changed in place)
            ("PEXPIREAT", "a", FAR),
            ("COPY", "a", "b"),
            ("APPEND", "a", "56"),
            ("SETRANGE", "b", 0, "x"),
            ("MGET", "a", "b"),
            ("PEXPIRETIME", "b"),
            ("SET", "n", 7),
            ("COPY", "n", "m", "DB", 2),
            ("INCR", "n"),
            ("SELECT", 2),
            ("GET", "m"),
            ("OBJECT", "ENCODING", "m"),
            ("MOVE", "m", 0),
            ("SELECT", 0),
            ("COPY", "m", "a"),
            ("COPY", "m", "a", "REPLACE"),
            ("MGET", "a", "b", "m", "n"),
            ("TYPE", "a"),
        ]
        replies = []
        for request in requests:
            try:
                replies.append(client.execute_command(*request))
            except redis.ResponseError as exc:
                replies.append(f"error: {exc}")
        return replies


async def test_copy_and_move_of_strings_match_redis_server(nursery: trio.Nursery) -> None:
    """A copied string is independent of its source, even one changed in place."""
    node: NodeHandle = await start_redis_node(nursery)

    def both() -> tuple[list[Any], list[Any]]:
        with redis_server() as port:
            theirs = _string_scenario(port)
        return theirs, _string_scenario(node.redis_port or 0)

    theirs, ours = await trio.to_thread.run_sync(both)
    assert theirs[7] == [b"123456", b"x234"]
    assert ours == theirs


@pytest.fixture(scope="module")
def ports() -> Iterator[tuple[int, int]]:
    """A node's Redis port and a redis-server's."""
    with running_node(monitoring=False) as node, redis_server() as theirs:
        assert node.redis_url is not None
        yield int(node.redis_url.rsplit(":", 1)[1]), theirs


WORD = st.sampled_from(
    [b"REPLACE", b"replace", b"DB", b"db", b"0", b"1", b"3", b"16", b"-1", b"x", b"", b"2147483648"]
)


def _replies(port: int, requests: list[list[bytes]]) -> list[Any]:
    with redis.Redis(host="127.0.0.1", port=port, socket_timeout=5, protocol=2) as client:
        client.response_callbacks.clear()
        client.execute_command("FLUSHALL")
        client.execute_command("XADD", "s", "1-1", "f", "v")
        client.execute_command("XADD", "t", "1-1", "f", "w")
        replies = []
        for request in requests:
            try:
                replies.append(client.execute_command(*request))
            except redis.ResponseError as exc:
                replies.append(f"error: {exc}")
        for db in range(4):
            client.execute_command("SELECT", db)
            replies.append(sorted(client.execute_command("KEYS", "*")))
        return replies


@pytest.mark.slow
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(
    requests=st.lists(
        st.one_of(
            st.builds(
                lambda name, key, new, options: [name, key, new, *options],
                st.sampled_from([b"COPY", b"copy"]),
                st.sampled_from([b"s", b"t", b"nope"]),
                st.sampled_from([b"s", b"t", b"u"]),
                st.lists(WORD, max_size=4),
            ),
            st.builds(
                lambda key, db, extra: [b"MOVE", key, db, *extra],
                st.sampled_from([b"s", b"t", b"u", b"nope"]),
                WORD,
                st.lists(WORD, max_size=1),
            ),
            st.builds(lambda db: [b"SELECT", db], st.sampled_from([b"0", b"1", b"3"])),
        ),
        max_size=8,
    )
)
def test_copy_and_move_arguments_as_redis_server_takes_them(
    ports: tuple[int, int], requests: list[list[bytes]]
) -> None:
    ours, theirs = ports
    assert _replies(ours, requests) == _replies(theirs, requests)
