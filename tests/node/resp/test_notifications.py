"""Keyspace notifications: ``notify-keyspace-events`` read and shown as redis-server does, the events
of every write command compared byte for byte with redis-server (skipped where it is not
installed), expiry's ``expired`` both lazy and active, captured entries announced, NATS clients
receiving events on the channel's subject, and an event never begetting another."""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Iterator
from typing import cast

import pytest
import redis
import trio
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from node.config.keyspace_events import ALL, KEYEVENT, NEW, STREAM, format_flags, parse_flags
from node.config.options import (
    AccountConfig,
    Config,
    ConfigError,
    RedisConfig,
    StreamConfig,
    UserConfig,
)
from node.config.tables import read_redis
from node.run.launch import NodeHandle
from pipeline.local import redis_server
from tests.live import live_node
from tests.node.resp.test_resp_conformance import Step, play
from tests.node.resp.test_resp_conformance import redis_port as redis_port  # (the redis-server fixture)
from tests.node.resp.test_resp_maxmemory import command, nats_request
from tests.support import start_node

pytestmark = pytest.mark.timeout(60)

needs_redis_server = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="needs redis-server"
)

EVENTS: list[Step] = [
    (0, b"flushall\r\nconfig set notify-keyspace-events KEA\r\nconfig get notify-keyspace-events\r\n"),
    (1, b"psubscribe __key*\r\n"),
    (0, b"xadd s 1-1 a 1\r\nxadd s 2-1 a 1\r\nxadd s MAXLEN 1 3-1 a 1\r\n"),
    (0, b"xgroup create s g $\r\nxgroup create s2 g $ MKSTREAM\r\n"),
    (0, b"xgroup createconsumer s g c\r\nxgroup createconsumer s g c\r\nxgroup setid s g 0\r\n"),
    (0, b"xreadgroup GROUP g c2 STREAMS s >\r\nxclaim s g c3 0 3-1 JUSTID\r\n"),
    (0, b"xautoclaim s g c4 0 0 JUSTID\r\nxack s g 3-1\r\n"),
    (0, b"xgroup delconsumer s g c\r\nxgroup delconsumer s g nobody\r\n"),
    (0, b"xgroup destroy s g\r\nxgroup destroy s g\r\n"),
    (0, b"xadd s 4-1 a 1\r\nxdel s 4-1\r\nxdel s 4-1\r\nxtrim s MAXLEN 0\r\nxtrim s MAXLEN 0\r\n"),
    (0, b"xsetid s 10-0\r\nexpire s 100\r\npersist s\r\npersist s\r\n"),
    (0, b"rename s t\r\nrename t t\r\nrename s2 t\r\nexpire t -1\r\npexpireat nope 1\r\n"),
    (
        0,
        b"xadd u 1-1 a 1\r\nxadd v 1-1 a 1\r\ndel u v nope\r\nxadd w 1-1 a 1\r\nflushdb\r\nflushall\r\n",
    ),
    (0, b"multi\r\nxadd m 1-1 a 1\r\ndel m\r\nexec\r\n"),
    # Strings: SET and its options (nothing when NX or XX refuses, or on an error).
    (0, b"set a 1\r\nset a 2 nx\r\nset a 3 xx\r\nset b 1 xx\r\nset a 4 nx get\r\nset b 1 xx get\r\n"),
    (0, b"set a 4 ex 100\r\nset a 5 keepttl\r\nset a 6 px 100000 get\r\nset c 1 nx exat 4102444800\r\n"),
    (0, b"set c 2 xx pxat 4102444800000\r\nset c 3 ex 0\r\nset c 3 ex x\r\nset c 3 keepttl ex 1\r\n"),
    (0, b"setnx a 1\r\nsetnx d 1\r\nsetex e 100 v\r\npsetex e 100000 v\r\nsetex e 0 v\r\n"),
    (0, b"getset e w\r\ngetset f w\r\ngetdel f\r\ngetdel f\r\nget e\r\nstrlen e\r\n"),
    # GETEX: ``persist`` only when there was a time to remove, ``del`` for a time already past.
    (0, b"getex a\r\ngetex a persist\r\ngetex a persist\r\ngetex a ex 100\r\ngetex a px 100000\r\n"),
    (0, b"getex a exat 4102444800\r\ngetex a pxat 4102444800000\r\ngetex a persist\r\n"),
    (0, b"getex a exat 1\r\ngetex a\r\ngetex nope ex 10\r\ngetex c pxat 1\r\ngetex d ex 0\r\n"),
    (0, b"mset g 1 h 2 g 3\r\nmsetnx g 1 i 2\r\nmsetnx i 1 j 2 i 3\r\nmset g\r\n"),
    (0, b"incr k\r\ndecr k\r\nincrby k 5\r\ndecrby k 2\r\nincrby k x\r\nincr e\r\n"),
    (0, b"incrbyfloat k 1.5\r\nincrbyfloat l 2\r\nincrbyfloat e 1\r\nincrbyfloat l inf\r\n"),
    (0, b"set k 9223372036854775807\r\nincr k\r\ndecrby k -1\r\n"),
    (0, b'append m x\r\nappend m y\r\nsetrange m 0 ""\r\nsetrange n 3 ""\r\n'),
    (0, b"setrange m 5 z\r\nsetrange o 2 z\r\nsetrange o -1 z\r\n"),
    (0, b"setbit p 7 1\r\nsetbit p 7 1\r\nsetbit p 7 0\r\nsetbit p 20 0\r\nsetbit p 0 0\r\n"),
    (0, b"set q abc\r\nsetbit q 0 0\r\nsetbit q 1 1\r\nsetbit q 0 1\r\nsetbit q 2 2\r\n"),
    (0, b"xadd s 1-1 a 1\r\nset s v get\r\nappend s x\r\nincr s\r\ngetdel s\r\nset s v\r\n"),
    (0, b"config set notify-keyspace-events KEn$g\r\nset t 1 ex 10\r\nset t 2\r\nincr u\r\n"),
    (0, b"append v x\r\nsetrange w 1 x\r\nsetbit x 1 1\r\nmset y 1 y 2 z 3\r\nincrbyfloat zz 1\r\n"),
    (0, b"getset gs 1\r\nsetnx nx 1\r\npsetex px 10000 v\r\nmsetnx m1 1 m2 2\r\n"),
    (0, b"config set notify-keyspace-events E$\r\nset t 1 ex 10\r\ngetdel t\r\n"),
    (0, b"config set notify-keyspace-events Kg\r\nset t 1 ex 10\r\ngetex t persist\r\ngetdel t\r\n"),
    (0, b"config set notify-keyspace-events KEA\r\nmulti\r\nset t 1\r\nincr t\r\nexec\r\nflushdb\r\n"),
    (0, b"config set notify-keyspace-events Kt\r\nxadd s 1-1 a 1\r\ndel s\r\n"),
    (0, b"config set notify-keyspace-events Eg\r\nxadd s 1-1 a 1\r\ndel s\r\n"),
    (0, b"config set notify-keyspace-events gn$E\r\nconfig get notify-keyspace-events\r\n"),
    (
        0,
        b"xadd s 1-1 a 1\r\ndel s\r\nconfig set notify-keyspace-events g\r\nxadd s 1-1 a 1\r\ndel s\r\n",
    ),
    (0, b"config set notify-keyspace-events Q\r\nconfig set notify-keyspace-events AKEnm\r\n"),
    (0, b"config get notify-keyspace-events\r\nconfig set notify-keyspace-events ''\r\n"),
    (0, b"select 3\r\nconfig set notify-keyspace-events KEA\r\nxadd a.b 1-1 x 1\r\n"),
    (0, b'xadd "a b" 1-1 x 1\r\nselect 0\r\nconfig set notify-keyspace-events ""\r\n'),
]
"""Every write command's events, in both kinds of channel, for each class letter."""


async def redis_node(nursery: trio.Nursery, **config: object) -> NodeHandle:
    return await start_node(
        nursery, Config(redis=RedisConfig(host="127.0.0.1", port=0)).evolve(**config)
    )


@pytest.mark.slow
@needs_redis_server
async def test_events_as_redis_server_sends_them(nursery: trio.Nursery, redis_port: int) -> None:
    node = await redis_node(nursery)

    def both() -> tuple[list[tuple[int, bytes, bytes]], list[tuple[int, bytes, bytes]]]:
        return list(play(redis_port, EVENTS)), list(play(node.redis_port or 0, EVENTS))

    theirs, ours = await trio.to_thread.run_sync(both)
    for expected, got in zip(theirs, ours, strict=True):
        assert got == expected


def test_flags_read_and_shown_as_redis_server() -> None:
    assert parse_flags(b"") == 0
    assert parse_flags(b"KEA") == parse_flags(b"AEK") == ALL | 3
    assert parse_flags(b"Et") == KEYEVENT | STREAM
    assert parse_flags(b"x y") is None
    assert parse_flags(b"K\0junk") == 1  # (redis-server reads the value as a C string)
    assert format_flags(ALL | NEW | 3) == b"AKE"  # (``n`` beside ``A`` is not shown)
    assert format_flags(parse_flags(b"mtnx$gK") or 0) == b"g$xtnKm"


def test_configuration_option_is_checked() -> None:
    assert read_redis({"notify_keyspace_events": "Ex"}, "redis").notify_keyspace_events == "Ex"
    with pytest.raises(ConfigError, match="Invalid event class character"):
        read_redis({"notify_keyspace_events": "Ew"}, "redis")


@pytest.fixture(scope="module")
def both_servers() -> Iterator[tuple[int, int]]:
    with redis_server() as theirs, live_node(redis=True) as ours:
        assert ours.redis_port is not None
        yield theirs, ours.redis_port


def ask(port: int, request: bytes) -> bytes:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(request)
        conn.shutdown(socket.SHUT_WR)
        got = b""
        while chunk := conn.recv(65536):
            got += chunk
        return got


@pytest.mark.slow
@needs_redis_server
@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(values=st.lists(st.text("Ag$lshzxeKEtmdnQ1 \0", max_size=12).map(str.encode), max_size=3))
def test_config_set_and_get_as_redis_server(both_servers: tuple[int, int], values: list[bytes]) -> None:
    theirs, ours = both_servers
    request = b"".join(
        command(b"CONFIG", b"SET", b"notify-keyspace-events", value)
        + command(b"CONFIG", b"GET", b"notify-keyspace-events")
        for value in values
    )
    request += command(b"CONFIG", b"SET", b"notify-keyspace-events", *values[:1], b"maxmemory", b"0")
    request += command(b"CONFIG", b"SET", b"notify-keyspace-events", b"")
    assert ask(ours, request) == ask(theirs, request)


def receive_until(conn: socket.socket, count: int) -> list[bytes]:
    """Lines until ``count`` of them have come."""
    got = b""
    deadline = time.monotonic() + 5
    while got.count(b"\r\n") < count:
        assert time.monotonic() < deadline, got
        got += conn.recv(4096)
    return got.split(b"\r\n")[:count]


async def test_expired_events_lazy_and_active(nursery: trio.Nursery) -> None:
    node = await redis_node(nursery)

    def scenario() -> None:
        client = redis.Redis(port=node.redis_port or 0)
        client.config_set("notify-keyspace-events", "Ex")
        pubsub = client.pubsub()
        pubsub.subscribe("__keyevent@0__:expired")
        assert pubsub.get_message(timeout=5)["type"] == "subscribe"
        client.xadd("lazy", {"f": "v"})
        client.pexpire("lazy", 1)
        time.sleep(0.01)
        assert client.xlen("lazy") == 0  # (found expired on reading)
        message = pubsub.get_message(timeout=5)
        assert message is not None
        assert message["data"] == b"lazy"
        client.xadd("active", {"f": "v"})
        client.pexpire("active", 1)  # (nobody reads it: the sweep finds it)
        message = pubsub.get_message(timeout=5)
        assert message is not None
        assert message["data"] == b"active"
        client.close()

    await trio.to_thread.run_sync(scenario)


async def test_captured_entries_are_announced_and_events_beget_no_events(nursery: trio.Nursery) -> None:
    # A stream capturing everything would capture its own events: each is captured once.
    streams = (StreamConfig("everything", (">",)),)
    node = await redis_node(nursery, streams=streams)

    def scenario() -> None:
        client = redis.Redis(port=node.redis_port or 0)
        client.config_set("notify-keyspace-events", "KEA")
        with socket.create_connection(("127.0.0.1", node.port), timeout=5) as nats:
            nats.sendall(b"CONNECT {}\r\nSUB __keyevent@0__:xadd 1\r\nPING\r\n")
            receive_until(nats, 2)  # (INFO, PONG)
            assert "id" in nats_request(node.port, b"orders.new", b"x")
            # The NATS subscriber gets the event on the channel's own subject.
            lines = receive_until(nats, 2)
            assert lines[0].startswith(b"MSG __keyevent@0__:xadd 1 ")
            assert lines[1] == b"everything"
        time.sleep(0.3)
        entries = cast(list[tuple[bytes, dict[bytes, bytes]]], client.xrange("everything"))
        subjects = [fields[b"subject"] for _, fields in entries]
        # The message, the events of its entry, the answer to its producer, and the events of
        # that answer's entry; the entries of events announce nothing.
        assert subjects[0] == b"orders.new"
        assert sorted(subjects) == sorted(
            [b"orders.new", b"inbox"] + [b"__keyspace@0__:everything", b"__keyevent@0__:xadd"] * 2
        )
        time.sleep(0.3)
        assert client.xlen("everything") == len(subjects)
        client.close()

    await trio.to_thread.run_sync(scenario)


async def test_events_are_published_in_the_keys_account(nursery: trio.Nursery) -> None:
    users = (
        UserConfig(user="a", password="pw", account="A"),
        UserConfig(user="b", password="pw", account="B"),
    )
    node = await redis_node(nursery, users=users, accounts=(AccountConfig("A"), AccountConfig("B")))

    def scenario() -> None:
        port = node.redis_port or 0
        a = redis.Redis(port=port, username="a", password="pw")
        b = redis.Redis(port=port, username="b", password="pw")
        a.config_set("notify-keyspace-events", "Et")
        listeners = {}
        for name, client in (("a", a), ("b", b)):
            pubsub = listeners[name] = client.pubsub()
            pubsub.subscribe("__keyevent@0__:xadd")
            assert pubsub.get_message(timeout=5)["type"] == "subscribe"
        b.xadd("in-b", {"f": "v"})
        a.xadd("in-a", {"f": "v"})
        for name in ("a", "b"):
            message = listeners[name].get_message(timeout=5)
            assert message is not None
            assert (message["channel"], message["data"]) == (
                b"__keyevent@0__:xadd",
                b"in-" + name.encode(),
            )
            assert listeners[name].get_message(timeout=0.2) is None
        a.config_set("notify-keyspace-events", "")
        a.xadd("in-a", {"f": "v"})
        assert listeners["a"].get_message(timeout=0.3) is None
        a.close()
        b.close()

    await trio.to_thread.run_sync(scenario)
