"""``pubmesh bench resp-stall`` against pubmesh's Redis port and redis-server: every PUBLISH is answered
0 while the hostile patterns are held, and the canary's PINGs are answered. Counts and answers are
asserted, never timings (the workload is scaled down to keep redis-server's run short)."""

from __future__ import annotations

import json

import pytest
import trio

from node.bench import cli, stall
from node.bench.compare import RESP_CASES, Block, StallCase, render
from node.bench.servers import ServerProcess
from node.bench.wire import BenchError, Endpoint
from routing import GlobPattern
from tests.node.bench.test_bench import made_up
from tests.node.bench.test_bench import redis as redis  # (the redis-server fixture)
from tests.node.bench.test_bench_streams import endpoint, redis_node

pytestmark = pytest.mark.timeout(60)


def small(target: Endpoint) -> stall.Stall:
    """A scaled-down run: 100 patterns, a 2,000-byte channel, publishing for 0.3 s."""
    return stall.stall(target, patterns=100, size=2_000, seconds=0.3)


def test_the_patterns_match_nothing_published_and_are_distinct() -> None:
    patterns = [stall.hostile_pattern(i) for i in range(stall.PATTERNS)]
    assert len(set(patterns)) == stall.PATTERNS
    channel = stall.hostile_channel(stall.SIZE)
    assert len(channel) == stall.SIZE
    assert not any(GlobPattern(p).match(channel) for p in patterns)
    assert all(GlobPattern(p).match(b"a" * 200 + b"b" + channel) for p in patterns[:50])


async def test_pubmesh_answers_every_publish_and_ping(nursery: trio.Nursery) -> None:
    node = await redis_node(nursery)
    outcome = await trio.to_thread.run_sync(small, endpoint(node))
    assert outcome.ok, outcome.failure()
    assert outcome.publish_ns
    assert outcome.canary_ns
    assert (outcome.patterns, outcome.size) == (100, 2_000)


@pytest.mark.slow
def test_redis_server_from_the_command_line(
    redis: ServerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["resp-stall", "--url", redis.endpoint.url, "--patterns", "50", "--size", "1000"]
    assert cli.main([*argv, "--seconds", "0.2"]) == 0
    out = capsys.readouterr().out
    assert "resp-stall: 50 patterns like '*' + 200 '?' + 'b*[a-z0][a-z0]'" in out
    assert f"PUBLISH on a 1,000 B channel at {redis.endpoint.url}" in out
    assert "PING canary on another connection meanwhile: p50" in out
    assert "check: every PUBLISH answered 0, every PING +PONG  OK" in out
    assert cli.main([*argv, "--seconds", "0", "--json"]) == 0
    result = json.loads(capsys.readouterr().out)
    assert result["ok"] is True
    assert result["publishes"] == 1  # at least one, however short the time
    assert result["canary_pings"] >= 1
    assert set(result["canary_ms"]) == {"p50", "p99", "max"}


def test_a_server_that_cannot_be_reached_is_a_one_line_error(
    capsys: pytest.CaptureFixture[str],
) -> None:
    with pytest.raises(BenchError):
        small(Endpoint("127.0.0.1", 1, scheme="redis"))
    assert cli.main(["resp-stall", "--url", "redis://127.0.0.1:1"]) == 2
    assert "cannot connect to redis://127.0.0.1:1" in capsys.readouterr().err


def test_compare_rows_and_only() -> None:
    case = next(c for c in RESP_CASES if isinstance(c, StallCase))
    results = {
        (case.label, "pubmesh"): [made_up(case, 0.002)],
        (case.label, "redis-server"): [made_up(case, 4.0)],
    }
    versions = {"pubmesh": "0.1.0", "redis-server": "7.0.15"}
    table = render(results, [Block("RESP", (case,), versions)], 1, 1.0, 10.0)
    row = "| RESP PUBLISH while hostile patterns are held, 1,000 patterns, 10 KB channel:"
    assert f"{row} PUBLISH median (ms) | 2.00 | 4,000.00 | 0.0005 |" in table
    assert f"{row} PING canary p99 (ms) | 2.00 | 4,000.00 | 0.0005 |" in table
    patterns_only = [c for c in RESP_CASES if "non-matching" in c.label]  # its baseline left out
    results = {(c.label, "pubmesh"): [made_up(c, 1.0)] for c in patterns_only}
    table = render(results, [Block("RESP", tuple(patterns_only), {"pubmesh": "0.1.0"})], 1, 1, 1)
    assert "msgs/s | 10 |" in table
    assert "÷ zero-pattern rate" not in table


def test_compare_only_a_case_that_does_not_exist(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["compare", "--resp", "--only", "no such case"]) == 2
    assert "no case's label contains 'no such case'" in capsys.readouterr().err
