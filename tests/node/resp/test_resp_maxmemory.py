"""``maxmemory`` with redis-server's ``noeviction``: past the limit, commands that would add data
are refused with redis-server's OOM error while reads and deletions go on; deleting makes room at
once; INFO memory and /varz report it. CONFIG SET/GET and the refusals are compared byte for byte
with redis-server (skipped where it is not installed), captured streams answer their producers
with the OOM error."""

from __future__ import annotations

import json
import shutil
import socket
import time
from typing import Any

import pytest
import redis
import trio

from node.config.options import Config, RedisConfig, StreamConfig
from node.resp.commands.memory import human, parse_memory
from node.run.launch import NodeHandle
from tests.node.resp.test_resp_conformance import Step, play
from tests.node.resp.test_resp_conformance import redis_port as redis_port  # (the redis-server fixture)
from tests.support import start_node

pytestmark = pytest.mark.timeout(60)

OOM = b"-OOM command not allowed when used memory > 'maxmemory'.\r\n"
needs_redis_server = pytest.mark.skipif(
    shutil.which("redis-server") is None, reason="needs redis-server"
)


def command(*args: bytes) -> bytes:
    """One request as a RESP array (so that empty and blank arguments go as they are)."""
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args)


def config_set(*args: bytes) -> bytes:
    return command(b"CONFIG", b"SET", *args)


MEMORY_VALUES = [
    b"100mb", b"1gb", b"100", b"abc", b"-1", b"1.5mb", b"100MB", b"1K", b"1kb", b"0", b" 5", b"5 ",
    b"5b", b"", b"mb", b"5mB", b"18446744073709551615", b"18446744073709551616", b"1tb", b"+5",
    b"05", b"1e3", b"18446744073709551615kb", b"99999999999999999999999999kb", b"17179869184gb",
    b"1" * 127, b"1" * 128,
]  # fmt: skip
GET_MAXMEMORY = command(b"CONFIG", b"GET", b"maxmemory")
CONFIG_SCENARIO: list[Step] = [
    *((0, config_set(b"maxmemory", value) + GET_MAXMEMORY) for value in MEMORY_VALUES),
    (0, config_set(b"MAXMEMORY", b"7") + config_set(b"MAXMEMORY", b"abc")),
    (0, config_set(b"foo", b"1") + config_set(b"FOO", b"1") + config_set(b"maxmemory")),
    (0, config_set(b"maxmemory", b"1", b"maxmemory-policy")),
    (0, config_set(b"foo", b"1", b"maxmemory", b"abc") + config_set(b"maxmemory", b"abc", b"foo", b"1")),
    (0, config_set(b"maxmemory", b"1", b"MAXMEMORY", b"2") + config_set(b"maxmemory", b"1", b"foo")),
    (0, config_set(b"maxmemory-policy", b"noeviction") + config_set(b"maxmemory-policy", b"NoEviction")),
    (0, config_set(b"maxmemory-policy", b"bogus") + config_set(b"maxmemory-policy", b"")),
    (0, config_set(b"maxmemory-policy", b"noeviction", b"maxmemory", b"abc")),
    (0, config_set(b"maxmemory-policy", b"noeviction", b"maxmemory", b"3mb")),
    (0, GET_MAXMEMORY + command(b"CONFIG", b"GET", b"maxmemory-policy")),
    (0, config_set(b"maxmemory", b"0") + GET_MAXMEMORY),
]  # fmt: skip
EMPTY_SCENARIO: list[Step] = [
    # With no key at all the node still holds some memory: a limit of one byte is passed.
    (0, b"flushall\r\n"),
    (1, b"config set maxmemory 1\r\n"),
    (0, b"set k v\r\nxadd s * f v\r\nget k\r\nexists k\r\ndel k\r\nping\r\n"),
    (1, b"config set maxmemory 0\r\n"),
    (0, b"set k v\r\ndel k\r\n"),
]
OOM_SCENARIO: list[Step] = [
    (0, b"flushall\r\nxadd s 1-1 f v\r\nxgroup create s g $\r\n"),
    (1, b"config set maxmemory 1\r\n"),
    # What would add data is refused (after arity errors); reads and other writes go on.
    (0, b"xadd s 2-1 f v\r\nxadd s\r\nxadd new * f v\r\nxsetid s 5-0\r\n"),
    (0, b"xgroup create s g2 $\r\nxgroup create s g2 $ junk\r\nxgroup createconsumer s g c\r\n"),
    (0, b"xlen s\r\nxrange s - +\r\nxread STREAMS s 0\r\nxinfo groups s\r\ntype s\r\n"),
    (0, b"xgroup setid s g 0\r\nxreadgroup GROUP g c STREAMS s >\r\nxpending s g\r\n"),
    (0, b"xack s g 1-1\r\nxtrim s MAXLEN 5\r\nexpire s 100\r\npersist s\r\nrename s s2\r\n"),
    (0, b"rename s2 s\r\npublish c x\r\nping\r\necho e\r\nconfig get maxmemory\r\n"),
    # Inside MULTI everything but EXEC, DISCARD, QUIT and RESET is refused.
    (0, b"multi\r\nping\r\nxlen s\r\nexec\r\n"),
    (0, b"multi\r\nxadd s * f v\r\nexec\r\nmulti\r\ndiscard\r\nmulti\r\nmulti\r\nwatch s\r\nexec\r\n"),
    # A RESP2 subscriber: the OOM check comes before the subscribed-mode one.
    (0, b"subscribe ch\r\nxadd s * f v\r\nxlen s\r\nping\r\nreset\r\n"),
    # Queued before the limit was passed: an EXEC that would add data ends the transaction.
    (1, b"config set maxmemory 0\r\n"),
    (0, b"multi\r\nxadd s 3-1 f v\r\nxlen s\r\n"),
    (1, b"config set maxmemory 1\r\n"),
    (0, b"exec\r\nexec\r\nxlen s\r\n"),
    (1, b"config set maxmemory 0\r\n"),
    (0, b"multi\r\nxlen s\r\n"),
    (1, b"config set maxmemory 1\r\n"),
    (0, b"exec\r\n"),  # (nothing in it adds data: it runs)
    (0, b"del s\r\n"),
    (1, b"config set maxmemory 0\r\n"),
]


async def redis_node(nursery: trio.Nursery, maxmemory: int = 0, **config: object) -> NodeHandle:
    redis_config = RedisConfig(host="127.0.0.1", port=0, maxmemory=maxmemory)
    return await start_node(nursery, Config(redis=redis_config).evolve(**config))


async def same_bytes(nursery: trio.Nursery, redis_port: int, steps: list[Step]) -> None:
    node = await redis_node(nursery)

    def both() -> tuple[list[tuple[int, bytes, bytes]], list[tuple[int, bytes, bytes]]]:
        return list(play(redis_port, steps)), list(play(node.redis_port or 0, steps))

    theirs, ours = await trio.to_thread.run_sync(both)
    for expected, got in zip(theirs, ours, strict=True):
        assert got == expected


@pytest.mark.slow
@needs_redis_server
async def test_config_set_and_get_as_redis_server(nursery: trio.Nursery, redis_port: int) -> None:
    await same_bytes(nursery, redis_port, CONFIG_SCENARIO)


@pytest.mark.slow
@needs_redis_server
async def test_past_maxmemory_as_redis_server(nursery: trio.Nursery, redis_port: int) -> None:
    await same_bytes(nursery, redis_port, OOM_SCENARIO)


@needs_redis_server
async def test_empty_node_past_one_byte_as_redis_server(nursery: trio.Nursery, redis_port: int) -> None:
    await same_bytes(nursery, redis_port, EMPTY_SCENARIO)


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (b"0", 0),
        (b"512MB", 512 * 1024**2),
        (b"2k", 2000),
        (b"2KB", 2048),
        (b"3g", 3 * 1000**3),
        (b"", 0),
        (b"18446744073709551616", 2**64 - 1),  # (saturated, as strtoull does)
        (b"18446744073709551615kb", (2**64 - 1) * 1024 % 2**64),  # (wrapped, as C does)
        (b"1tb", None),
        (b"-1", None),
        (b"1.5mb", None),
        (b"1" * 128, None),
    ],
)
def test_memory_values_read_as_redis_server_reads_them(value: bytes, expected: int | None) -> None:
    assert parse_memory(value) == expected


def test_human_sizes_as_redis_server_shows_them() -> None:
    assert [human(n) for n in (0, 1023, 1024, 1536, 2 * 1024**2, 5 * 1024**3)] == [
        "0B", "1023B", "1.00K", "1.50K", "2.00M", "5.00G",
    ]  # fmt: skip
    assert human(1024**6) == f"{1024**6}B"


def fill(client: redis.Redis, key: str, size: int, *, batch: int = 100) -> int:
    """XADD entries of ``size`` bytes in pipelined batches until one is refused (with the OOM
    error); how many went in."""
    added = 0
    for _ in range(10_000):
        pipe = client.pipeline(transaction=False)
        for _ in range(batch):
            pipe.xadd(key, {"data": b"x" * size})
        results = pipe.execute(raise_on_error=False)
        for result in results:
            if isinstance(result, Exception):
                assert isinstance(result, redis.exceptions.OutOfMemoryError), result
                return added
            added += 1
    raise AssertionError("never refused")


def client_of(node: NodeHandle) -> Any:
    """A redis-py client, typed loosely (its replies' declared types are wider than what comes)."""
    return redis.Redis(host="127.0.0.1", port=node.redis_port or 0, socket_timeout=5)


def info_memory(client: redis.Redis) -> dict[str, Any]:
    return dict(client.info("memory"))


async def test_writes_stop_at_maxmemory_reads_and_deletes_go_on(nursery: trio.Nursery) -> None:
    node = await redis_node(nursery, maxmemory=2 * 1024 * 1024)

    def scenario() -> None:
        client = client_of(node)
        before = info_memory(client)
        assert before["used_memory_dataset"] == 0
        baseline = before["used_memory"]  # (the node's fixed overhead: more than nothing)
        assert isinstance(baseline, int)
        assert 0 < baseline < 4096
        assert (before["maxmemory"], before["maxmemory_policy"]) == (2 * 1024 * 1024, "noeviction")
        assert before["maxmemory_human"] == "2.00M"
        assert isinstance(before["used_memory_rss"], int)
        assert before["used_memory_rss"] > 1024**2
        added = fill(client, "s", 100)
        assert 10_000 < added < 2 * 1024 * 1024 // 100  # (some 128 bytes an entry)
        full = info_memory(client)
        assert isinstance(full["used_memory"], int)
        # (past the limit by an entry at most; or short of it by the replies a pipeline had
        # pending when the node measured the output buffers)
        assert 2 * 1024 * 1024 - 16 * 1024 < full["used_memory"] < 2 * 1024 * 1024 + 100 * 200
        assert full["used_memory_peak"] >= full["used_memory"]
        # Reads and deletions go on; so does publishing.
        assert client.xlen("s") == added
        assert len(client.xrange("s", count=5)) == 5
        assert client.publish("c", "x") == 0
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            client.xgroup_create("s", "g", id="$")
        assert client.xtrim("s", maxlen=added // 2) > 0
        assert client.delete("s") == 1
        after = info_memory(client)
        assert after["used_memory"] == baseline
        assert after["used_memory_peak"] >= full["used_memory"]
        client.xadd("s", {"f": "v"})  # room again
        # CONFIG SET moves the limit at once, both ways.
        client.config_set("maxmemory", "1")
        with pytest.raises(redis.exceptions.OutOfMemoryError):
            client.xadd("s", {"f": "v"})
        client.config_set("maxmemory", "0")
        client.xadd("s", {"f": "v"})
        assert info_memory(client)["maxmemory"] == 0
        # The one policy: others redis-server knows are refused as not supported.
        with pytest.raises(redis.exceptions.ResponseError, match="only noeviction is supported"):
            client.config_set("maxmemory-policy", "allkeys-lru")
        assert client.config_get("maxmemory-policy") == {"maxmemory-policy": "noeviction"}

    await trio.to_thread.run_sync(scenario)


async def test_varz_reports_the_limit_and_what_it_counts(nursery: trio.Nursery) -> None:
    node = await redis_node(nursery, maxmemory=1024**2, http_port=0)

    def scenario() -> None:
        client = client_of(node)
        client.xadd("s", {"f": "v" * 1000})
        memory = info_memory(client)
        with socket.create_connection(("127.0.0.1", node.http_port or 0), timeout=5) as http:
            http.sendall(b"GET /varz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
            response = b""
            while chunk := http.recv(1 << 16):
                response += chunk
        block = json.loads(response.partition(b"\r\n\r\n")[2])["redis"]
        assert block["maxmemory"] == 1024**2
        overhead = node.node.broker.keyspaces.overhead
        assert block["used_memory"] == memory["used_memory_dataset"] + overhead
        assert block["used_memory"] > 1000

    await trio.to_thread.run_sync(scenario)


def nats_request(port: int, subject: bytes, payload: bytes) -> dict[str, str]:
    """Publish ``payload`` with a reply subject and return the JSON answered to it."""
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        request = b"PUB %b inbox %d\r\n%b\r\n" % (subject, len(payload), payload)
        conn.sendall(b"CONNECT {}\r\nSUB inbox 1\r\n" + request)
        got = b""
        deadline = time.monotonic() + 5
        while b"MSG inbox" not in got or not got.endswith(b"}\r\n"):
            assert time.monotonic() < deadline, got
            chunk = conn.recv(4096)
            assert chunk, got
            got += chunk
    answer: dict[str, str] = json.loads(got.rpartition(b"\r\n")[0].rpartition(b"\r\n")[2])
    return answer


async def test_capture_into_a_full_node_is_answered_with_the_oom_error(nursery: trio.Nursery) -> None:
    streams = (StreamConfig("events", ("orders.>",)),)
    node = await redis_node(nursery, maxmemory=50_000, streams=streams)

    def scenario() -> None:
        answers = [nats_request(node.port, b"orders.new", b"x" * 1000) for _ in range(100)]
        refused = [a for a in answers if "error" in a]
        assert refused
        assert all(a == {"stream": "events", "error": OOM[1:-2].decode()} for a in refused)
        assert answers[-1] in refused  # (the keys alone past the limit: refused from then on)
        client = client_of(node)
        assert client.xlen("events") == len(answers) - len(refused)
        client.delete("events")
        assert "id" in nats_request(node.port, b"orders.new", b"x")

    await trio.to_thread.run_sync(scenario)
