"""``pubmesh bench resp-set``, ``resp-get`` and ``resp-evalsha`` against pubmesh's Redis port and
redis-server: every command sent is answered as it should be (``+OK``, the value), and the key
holds the payload afterwards. Counts are asserted, never timings."""

from __future__ import annotations

import pytest
import redis as redispy
import trio

from node.bench import cli
from node.bench.compare import RESP_CASES, Block, render
from node.bench.scenarios import Spec, run
from node.bench.servers import ServerProcess
from node.bench.wire import BenchError, Endpoint
from tests.node.bench.test_bench import made_up, needs_redis
from tests.node.bench.test_bench import redis as redis  # (the redis-server fixture)
from tests.node.bench.test_bench_streams import endpoint, redis_node

pytestmark = pytest.mark.timeout(60)

MSGS = 3_000
SCENARIOS = ("resp-set", "resp-get", "resp-evalsha")


def check_all(target: Endpoint) -> None:
    for scenario in SCENARIOS:
        result = run(Spec(scenario, target, MSGS, 16, 0, 2, timeout=30))
        assert result.ok, result.failure()
        assert result.received == result.expected == MSGS
        assert sum(result.per_worker) == MSGS
    with redispy.Redis(host=target.host, port=target.port, socket_timeout=10) as client:
        keys = client.keys("bench.key.*")
        assert len(keys) == len(SCENARIOS)  # (a fresh key per run)
        assert {client.get(key) for key in keys} == {b"x" * 16}


@pytest.mark.slow
async def test_key_scenarios_on_pubmesh(nursery: trio.Nursery) -> None:
    node = await redis_node(nursery)
    await trio.to_thread.run_sync(check_all, endpoint(node))


@pytest.mark.slow
@needs_redis
def test_key_scenarios_on_redis_server(redis: ServerProcess) -> None:
    check_all(redis.endpoint)


@pytest.mark.slow
async def test_key_scenarios_from_the_command_line(
    nursery: trio.Nursery, capsys: pytest.CaptureFixture[str]
) -> None:
    url = endpoint(await redis_node(nursery)).url

    def scenario() -> None:
        assert cli.main(["resp-evalsha", "--url", url, "--msgs", "500"]) == 0
        out = capsys.readouterr().out
        assert "resp-evalsha: 1 client, 500 EVALSHAs of 16 B on 'bench'" in out
        assert "EVALSHA/s" in out
        assert "check: answered 500 == expected 500  OK" in out

    await trio.to_thread.run_sync(scenario)


def test_a_key_scenario_with_subscribers_is_refused() -> None:
    spec = Spec("resp-get", Endpoint("127.0.0.1", 1, scheme="redis"), 10, 16, 1, 1)
    with pytest.raises(BenchError, match="without subscribers"):
        run(spec)


def test_compare_shows_the_key_rows() -> None:
    results = {(case.label, "pubmesh"): [made_up(case, 1.0)] for case in RESP_CASES}
    results |= {(case.label, "redis-server"): [made_up(case, 0.5)] for case in RESP_CASES}
    versions = {"pubmesh": "0.1.0", "redis-server": "7.0.15"}
    table = render(results, [Block("RESP", RESP_CASES, versions, ())], 1, 1.0, 1.0)
    assert "| RESP SET, pipelined, 300,000 msgs: SET/s | 10 | 20 | 0.50 |" in table
    assert "| RESP GET, pipelined, 300,000 msgs: GET/s | 10 | 20 | 0.50 |" in table
    assert "| RESP EVALSHA (a script that SETs), pipelined, 50,000 msgs: EVALSHA/s |" in table
