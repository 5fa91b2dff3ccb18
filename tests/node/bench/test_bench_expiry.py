"""``pubmesh bench resp-expiry`` against pubmesh's Redis port and redis-server: every key made is
reclaimed unread, and the run says so. Counts are asserted, never timings."""

from __future__ import annotations

import json

import pytest
import redis as redispy
import trio

from node.bench import cli, expiry
from node.bench.compare import RESP_CASES, Block, render
from node.bench.servers import ServerProcess
from node.bench.wire import BenchError, Endpoint
from tests.node.bench.test_bench import made_up, needs_redis
from tests.node.bench.test_bench import redis as redis  # (the redis-server fixture)
from tests.node.bench.test_bench_streams import endpoint, redis_node

pytestmark = pytest.mark.timeout(60)

KEYS = 2_000


def check(target: Endpoint) -> expiry.Reclaim:
    outcome = expiry.reclaim(target, KEYS, 50)
    assert outcome.ok, outcome.failure()
    assert (outcome.keys, outcome.left, outcome.error) == (KEYS, 0, None)
    assert outcome.pings_ns
    client = redispy.Redis(host=target.host, port=target.port, db=expiry.DB, socket_timeout=10)
    assert client.info("keyspace") == {}
    client.close()
    return outcome


async def test_reclaim_on_pubmesh(nursery: trio.Nursery) -> None:
    node = await redis_node(nursery)
    await trio.to_thread.run_sync(check, endpoint(node))
    await trio.to_thread.run_sync(check, endpoint(node))  # (the database is empty again)


@pytest.mark.slow
@needs_redis
def test_reclaim_on_redis_server(redis: ServerProcess) -> None:
    check(redis.endpoint)


async def test_a_database_in_use_is_refused(nursery: trio.Nursery) -> None:
    node = await redis_node(nursery)
    target = endpoint(node)

    def scenario() -> None:
        client = redispy.Redis(host=target.host, port=target.port, db=expiry.DB, socket_timeout=10)
        client.xadd("there", {"f": "v"})
        client.close()
        with pytest.raises(BenchError, match=f"database {expiry.DB} holds 1 keys already"):
            expiry.reclaim(target, KEYS, 50)

    await trio.to_thread.run_sync(scenario)


async def test_from_the_command_line(nursery: trio.Nursery, capsys: pytest.CaptureFixture[str]) -> None:
    node = await redis_node(nursery)
    url = f"redis://127.0.0.1:{node.redis_port}"
    argv = ["resp-expiry", "--url", url, "--keys", "500", "--ttl", "20"]
    assert await trio.to_thread.run_sync(cli.main, argv) == 0
    out = capsys.readouterr().out
    assert f"resp-expiry: 500 keys with a TTL of 20 ms at {url}" in out
    assert "check: 0 of 500 keys left  OK" in out
    assert await trio.to_thread.run_sync(cli.main, [*argv, "--json"]) == 0
    got = json.loads(capsys.readouterr().out)
    assert (got["keys"], got["left"], got["ok"], got["errors"]) == (500, 0, True, [])


def test_bad_options_are_refused() -> None:
    with pytest.raises(BenchError, match="--keys and --ttl must be positive"):
        expiry.reclaim(Endpoint("127.0.0.1", 1, scheme="redis"), 0, 100)


def test_compare_shows_the_expiry_rows_with_their_target() -> None:
    results = {(case.label, "pubmesh"): [made_up(case, 1.5)] for case in RESP_CASES}
    results |= {(case.label, "redis-server"): [made_up(case, 0.5)] for case in RESP_CASES}
    versions = {"pubmesh": "0.1.0", "redis-server": "7.0.15"}
    table = render(results, [Block("RESP", RESP_CASES, versions, ("a note",))], 1, 1.0, 1.0)
    case = "| RESP keys expiring unread, TTL 100 ms, 100,000 keys:"
    assert f"{case} s until none left (pubmesh target < 2) | 1.50 | 0.50 | 3.00 |" in table
    assert f"{case} PING p99 meanwhile (ms) | 1.50 | 0.50 | 3.00 |" in table
