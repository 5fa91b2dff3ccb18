"""``pubmesh bench`` against a live node: every scenario counts exactly what it must.

The node runs in the test's trio nursery; the load generator (which blocks, and starts worker
processes) runs in a worker thread. Counts are asserted, never timings: how fast a run is depends on
the machine, whether it lost a message does not.
"""

from __future__ import annotations

import itertools
import json
import socket
from typing import Any

import attrs
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from node.bench import cli
from node.bench.compare import CASES, render
from node.bench.scenarios import Result, Spec, run
from node.bench.wire import BenchError, Endpoint, Reader, Tally, parse_url
from node.config import Config
from node.launch import NodeHandle
from tests.node.conftest import start_node

pytestmark = pytest.mark.timeout(60)

MSGS = 2_000


async def bench(
    node: NodeHandle, scenario: str, *, msgs: int = MSGS, size: int = 16, subs: int = 1, pubs: int = 1
) -> Result:
    spec = Spec(scenario, Endpoint(node.host, node.port), msgs, size, subs, pubs, timeout=30)
    result: Result = await trio.to_thread.run_sync(run, spec)
    assert not result.errors
    return result


async def test_publish_only_is_confirmed_by_the_server(node: NodeHandle) -> None:
    result = await bench(node, "pub", subs=0, pubs=2)
    assert result.ok
    assert result.received == result.expected == MSGS
    assert result.per_worker == (MSGS // 2, MSGS // 2)


async def test_pubsub_counts_every_message(node: NodeHandle) -> None:
    result = await bench(node, "pubsub", size=100)
    assert result.ok
    assert result.received == result.expected == MSGS


async def test_fanout_delivers_every_message_to_every_subscriber(node: NodeHandle) -> None:
    result = await bench(node, "fanout", subs=3, pubs=2)
    assert result.ok
    assert result.expected == MSGS * 3
    assert result.per_worker == (MSGS, MSGS, MSGS)


async def test_queue_group_delivers_each_message_exactly_once(node: NodeHandle) -> None:
    result = await bench(node, "queue", subs=3, pubs=2)
    assert result.ok
    assert sum(result.per_worker) == result.received == result.expected == MSGS


async def test_request_reply_gets_every_reply(node: NodeHandle) -> None:
    result = await bench(node, "reqrep", msgs=200)
    assert result.ok
    assert result.received == result.expected == 200
    assert result.latency is not None


async def test_json_output_parses(node: NodeHandle, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["queue", "--url", node.url, "--msgs", "500", "--subs", "2", "--json"]
    status = await trio.to_thread.run_sync(cli.main, argv)
    out = json.loads(capsys.readouterr().out)
    assert status == 0
    assert out["ok"] is True
    assert out["received"] == out["expected"] == 500
    assert sum(out["per_worker"]) == 500


async def test_human_output_has_the_check_line(
    node: NodeHandle, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["reqrep", "--url", node.url, "--msgs", "50"]
    status = await trio.to_thread.run_sync(cli.main, argv)
    out = capsys.readouterr().out
    assert status == 0
    assert "check: replies 50 == expected 50  OK" in out


async def test_a_failed_run_says_so_instead_of_hanging(nursery: trio.Nursery) -> None:
    node = await start_node(nursery, Config(max_payload=64))
    spec = Spec("pubsub", Endpoint(node.host, node.port), msgs=100, size=100, timeout=30)
    result = await trio.to_thread.run_sync(run, spec)
    assert not result.ok
    assert result.errors


@pytest.mark.timeout(15)
def test_unreachable_server_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]  # nothing listens here once the probe is closed
    assert cli.main(["pubsub", "--url", f"nats://127.0.0.1:{port}", "--msgs", "10"]) == 2
    assert "cannot connect to nats://127.0.0.1:" in capsys.readouterr().err


@pytest.mark.parametrize(
    ("scenario", "options"),
    [
        ("pubsub", {"subject": "a.*"}),
        ("pubsub", {"subject": "a..b"}),
        ("pubsub", {"subject": "orders.MSG"}),
        ("pubsub", {"subject": "x-ERR"}),
        ("pubsub", {"subs": 0}),
        ("pub", {"subs": 2}),
        ("reqrep", {"pubs": 2}),
        ("fanout", {"msgs": 0}),
        ("nosuch", {}),
    ],
)
def test_specs_that_cannot_be_measured_are_refused(scenario: str, options: dict[str, Any]) -> None:
    spec = attrs.evolve(Spec(scenario, Endpoint("127.0.0.1", 4222), msgs=10), **options)
    with pytest.raises(BenchError):
        spec.check()


@pytest.mark.parametrize(
    ("url", "endpoint"),
    [
        ("nats://127.0.0.1:4333", Endpoint("127.0.0.1", 4333)),
        ("127.0.0.1", Endpoint("127.0.0.1", 4222)),
        ("nats://al:s%40cret@127.0.0.1:1", Endpoint("127.0.0.1", 1, user="al", password="s@cret")),
        ("nats://t0ken@127.0.0.1", Endpoint("127.0.0.1", 4222, token="t0ken")),
    ],
)
def test_urls(url: str, endpoint: Endpoint) -> None:
    assert parse_url(url) == endpoint


def test_bad_url_is_refused() -> None:
    with pytest.raises(BenchError):
        parse_url("http://127.0.0.1:4222")


TOKENS = (b"MSG ", b"MSG bench-done.1 ", b"PING\r\n", b"-ERR")


@given(
    st.lists(st.sampled_from([*TOKENS, b"x", b"M", b"SG", b" ", b"\r\n", b"PI"]), max_size=60),
    st.lists(st.integers(min_value=0, max_value=400), max_size=12),
)
def test_tally_counts_tokens_across_any_chunking(pieces: list[bytes], cuts: list[int]) -> None:
    stream = b"".join(pieces)
    bounds = sorted({min(c, len(stream)) for c in cuts} | {0, len(stream)})
    tally = Tally(*TOKENS)
    totals = [0] * len(TOKENS)
    for start, end in itertools.pairwise(bounds):
        chunk = bytearray(stream[start:end]) + b"MSG stale"  # bytes past the size are not data
        totals = [t + n for t, n in zip(totals, tally.feed(chunk, end - start), strict=True)]
    assert totals == [stream.count(token) for token in TOKENS]


@pytest.mark.timeout(5)
def test_reader_answers_pings_and_keeps_the_first_error() -> None:
    ours, server = socket.socketpair()
    with ours, server:
        reader = Reader(ours, b"MSG ")
        assert reader.poll() is None  # nothing has arrived: no waiting
        server.sendall(b"PI")
        assert reader.poll() == [0]
        server.sendall(b"NG\r\nMSG a 1 0\r\n\r\n-ERR 'Slow Consumer'\r\n")
        assert reader.read() == [1]
        assert server.recv(100) == b"PONG\r\n"
        assert reader.error == "server error: Slow Consumer"


def test_compare_table_shows_both_servers_and_the_ratio() -> None:
    endpoint = Endpoint("127.0.0.1", 4222)
    results = {}
    for case in CASES:
        spec = case.spec(endpoint, 1.0)
        mine = Result(spec, expected=10, received=10, seconds=2.0, per_worker=(10,))
        theirs = Result(spec, expected=10, received=10, seconds=1.0, per_worker=(10,))
        if case.scenario == "fanout":
            mine = Result(spec, expected=10, received=9, seconds=2.0, per_worker=(9,), errors=("lost",))
        results[case.label, "pubmesh"] = [mine]
        results[case.label, "nats-server"] = [theirs]
    table = render(results, {"pubmesh": "0.1.0", "nats-server": "2.9.10"}, 1, 1.0, 10.0)
    assert "| scenario | pubmesh | nats-server | pubmesh / nats-server |" in table
    assert "| pub/sub 1:1, 800,000 msgs: msgs/s | 5 | 10 | 0.50 |" in table
    assert "| fan-out 1→10, 200,000 msgs: deliveries/s | failed | 10 | — |" in table
    assert "- pubmesh, fan-out 1→10: received 9 of 10 (lost)" in table


def test_compare_table_without_nats_server() -> None:
    spec = CASES[0].spec(Endpoint("127.0.0.1", 4222), 1.0)
    results = {
        (case.label, "pubmesh"): [Result(spec, expected=1, received=1, seconds=1.0, per_worker=(1,))]
        for case in CASES
    }
    table = render(results, {"pubmesh": "0.1.0"}, 1, 1.0, 1.0)
    assert "| scenario | pubmesh |\n|---|---:|" in table
    assert "nats-server" not in table
