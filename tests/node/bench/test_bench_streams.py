"""``pubmesh bench resp-xadd``, ``resp-consume`` and ``resp-blocked`` against pubmesh's Redis port
and redis-server: every entry added is confirmed, every entry consumed is acknowledged, and every
entry written to blocked readers is given to one, exactly. Counts are asserted, never timings."""

from __future__ import annotations

import json

import pytest
import redis as redispy
import trio

from node.bench import cli
from node.bench import streams as bench_streams
from node.bench.compare import RESP_CASES, Block, render
from node.bench.scenarios import Result, Spec, run
from node.bench.servers import ServerProcess
from node.bench.wire import BenchError, Endpoint
from node.config.options import Config, RedisConfig
from node.run.launch import NodeHandle
from tests.node.bench.test_bench import made_up, needs_redis
from tests.node.bench.test_bench import redis as redis  # (the redis-server fixture)
from tests.support import start_node

pytestmark = pytest.mark.timeout(60)

MSGS = 3_000


def endpoint(node: NodeHandle) -> Endpoint:
    return Endpoint("127.0.0.1", node.redis_port or 0, scheme="redis")


async def redis_node(nursery: trio.Nursery) -> NodeHandle:
    return await start_node(nursery, Config(redis=RedisConfig(host="127.0.0.1", port=0)))


def streams(target: Endpoint) -> dict[bytes, tuple[int, int]]:
    """Each bench stream's length, and its group's pending entries (-1 without a group)."""
    client = redispy.Redis(host=target.host, port=target.port, socket_timeout=10)
    found: dict[bytes, tuple[int, int]] = {}
    keys: list[bytes] = client.keys("bench.stream.*")  # type: ignore[assignment]
    for key in keys:
        groups = client.xinfo_groups(key)
        found[key] = (client.xlen(key), groups[0]["pending"] if groups else -1)
    client.close()
    return found


def check(target: Endpoint, scenario: str, subs: int, pubs: int) -> Result:
    result = run(Spec(scenario, target, MSGS, 16, subs, pubs, timeout=30))
    assert result.ok, result.failure()
    assert result.received == result.expected == MSGS
    assert sum(result.per_worker) == MSGS
    return result


@pytest.mark.slow
async def test_stream_scenarios_on_pubmesh(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    node = await redis_node(nursery)
    target = endpoint(node)
    monkeypatch.setattr(bench_streams, "READERS_PER_WORKER", 2)  # (5 readers in 3 processes)

    def scenario() -> None:
        check(target, "resp-xadd", 0, 2)
        assert list(streams(target).values()) == [(MSGS, -1)]
        result = check(target, "resp-consume", 3, 1)
        assert len(result.per_worker) == 3
        assert sorted(streams(target).values()) == [(MSGS, -1), (MSGS, 0)]  # every entry acked
        result = check(target, "resp-blocked", 5, 1)
        assert len(result.per_worker) == 3
        given = (MSGS + 5, MSGS + 5)  # (and an end marker for each reader; none acked)
        assert sorted(streams(target).values()) == [(MSGS, -1), (MSGS, 0), given]

    await trio.to_thread.run_sync(scenario)


@pytest.mark.slow
@needs_redis
def test_stream_scenarios_on_redis_server(redis: ServerProcess) -> None:
    check(redis.endpoint, "resp-xadd", 0, 1)
    check(redis.endpoint, "resp-consume", 1, 1)
    check(redis.endpoint, "resp-blocked", 3, 1)
    given = (MSGS + 3, MSGS + 3)
    assert sorted(streams(redis.endpoint).values()) == [(MSGS, -1), (MSGS, 0), given]


@pytest.mark.slow
async def test_stream_scenarios_from_the_command_line(
    nursery: trio.Nursery, capsys: pytest.CaptureFixture[str]
) -> None:
    node = await redis_node(nursery)
    url = endpoint(node).url

    def scenario() -> None:
        assert cli.main(["resp-xadd", "--url", url, "--msgs", "500"]) == 0
        out = capsys.readouterr().out
        assert "resp-xadd: 1 adder, 500 entries of 16 B on 'bench'" in out
        assert "entries added/s" in out
        assert "check: added 500 == expected 500  OK" in out
        assert cli.main(["resp-consume", "--url", url, "--msgs", "500", "--subs", "2", "--json"]) == 0
        doc = json.loads(capsys.readouterr().out)
        assert (doc["ok"], doc["received"], sum(doc["per_worker"])) == (True, 500, 500)
        assert cli.main(["resp-blocked", "--url", url, "--msgs", "200", "--subs", "3"]) == 0
        out = capsys.readouterr().out
        assert "resp-blocked: 1 writer -> 3 blocked readers of one group, 200 entries" in out
        assert "XADD/s, each given to a blocked reader" in out
        assert "check: given 200 == expected 200  OK" in out

    await trio.to_thread.run_sync(scenario)


@pytest.mark.parametrize(
    ("scenario", "subs", "pubs", "error"),
    [
        ("resp-xadd", 1, 1, "without consumers"),
        ("resp-consume", 0, 1, "at least one consumer"),
        ("resp-consume", 1, 2, "no --pubs"),
        ("resp-blocked", 0, 1, "at least one reader"),
        ("resp-blocked", 2, 2, "no --pubs"),
    ],
)
def test_stream_specs_that_cannot_run_are_refused(
    scenario: str, subs: int, pubs: int, error: str
) -> None:
    spec = Spec(scenario, Endpoint("127.0.0.1", 1, scheme="redis"), 10, 16, subs, pubs)
    with pytest.raises(BenchError, match=error):
        run(spec)


def test_compare_shows_the_stream_rows_with_their_target() -> None:
    results = {(case.label, "pubmesh"): [made_up(case, 1.0)] for case in RESP_CASES}
    results |= {(case.label, "redis-server"): [made_up(case, 0.25)] for case in RESP_CASES}
    versions = {"pubmesh": "0.1.0", "redis-server": "7.0.15"}
    table = render(results, [Block("RESP", RESP_CASES, versions, ("a note",))], 1, 1.0, 1.0)
    assert "| RESP XADD, pipelined, 300,000 msgs: entries added/s | 10 | 40 | 0.25 |" in table
    consume = "| RESP XREADGROUP+XACK, 1 consumer, 300,000 msgs: entries acked/s | 10 | 40 | 0.25 |"
    assert consume in table
    blocked = "to 1,000 blocked XREADGROUP readers, 20,000 msgs: XADD/s | 10 | 40 | 0.25 |"
    assert blocked in table
