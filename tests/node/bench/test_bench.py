"""``pubmesh bench`` against live nodes: every scenario counts exactly what it must.

Nodes run in the test's trio nursery (a cluster of two, joined over real routes, for the runs that
cross a route); the load generator (which blocks, and starts worker processes) runs in a worker
thread. The measurements that start servers of their own start them as processes. Counts are
asserted, never timings: how fast a run is depends on the machine, whether it lost a message does not.
"""

from __future__ import annotations

import itertools
import json
import socket
from collections.abc import Iterator
from typing import Any

import attrs
import pytest
import trio
from hypothesis import given
from hypothesis import strategies as st

from cluster.config import ClusterConfig
from node.bench import cli, resp
from node.bench.clients import Crowd, CrowdRun
from node.bench.compare import (
    CASES,
    RESP_CASES,
    Block,
    LoadCase,
    Outcome,
    StallCase,
    Target,
    render,
    resp_block,
)
from node.bench.crowds import ClientsCase, FootprintCase, RespClientsCase
from node.bench.expiry import Reclaim
from node.bench.footprint import Footprint
from node.bench.interest import Convergence, Resync, converge, resync
from node.bench.ports import free_port
from node.bench.redis_benchmark import COMMANDS, Figures, Sweep
from node.bench.scenarios import Result, Spec, run
from node.bench.servers import PUBMESH, Flavor, ServerProcess, Servers, nats_server, redis_server
from node.bench.stall import Stall
from node.bench.wire import BenchError, Endpoint, Reader, Tally, parse_url
from node.config.options import Config
from node.run.launch import NodeHandle
from tests.support import start_node

pytestmark = pytest.mark.timeout(60)

MSGS = 2_000


NATS_SERVER = nats_server()
FLAVORS = [
    pytest.param(PUBMESH, id="pubmesh"),
    pytest.param(
        NATS_SERVER,
        marks=pytest.mark.skipif(NATS_SERVER is None, reason="nats-server is not on PATH"),
        id="nats-server",
    ),
]


REDIS_SERVER = redis_server()
REDIS = Endpoint("127.0.0.1", 6379, scheme="redis")
needs_redis = pytest.mark.skipif(REDIS_SERVER is None, reason="redis-server is not on PATH")


def endpoint(node: NodeHandle) -> Endpoint:
    return Endpoint(node.host, node.port)


async def bench(
    node: NodeHandle,
    scenario: str,
    *,
    msgs: int = MSGS,
    size: int = 16,
    subs: int = 1,
    pubs: int = 1,
    far: NodeHandle | None = None,
) -> Result:
    sub_endpoint = endpoint(far) if far is not None else None
    spec = Spec(scenario, endpoint(node), msgs, size, subs, pubs, timeout=30, sub_endpoint=sub_endpoint)
    result: Result = await trio.to_thread.run_sync(run, spec)
    assert not result.errors
    return result


@pytest.fixture
async def pair(nursery: trio.Nursery) -> tuple[NodeHandle, NodeHandle]:
    """Two nodes of one cluster, every pooled route connection between them up."""
    config = ClusterConfig(name="bench", host="127.0.0.1", port=0)
    first = await start_node(nursery, Config(cluster=config))
    seed = f"nats://127.0.0.1:{first.cluster_port}"
    second = await start_node(nursery, Config(cluster=attrs.evolve(config, seeds=(seed,))))
    with trio.fail_after(20):
        while True:
            if _meshed(first) and _meshed(second):
                return first, second
            await trio.sleep(0.01)


def _meshed(node: NodeHandle) -> bool:
    assert node.routes is not None
    peers = list(node.routes.peers.values())
    return len(peers) == 1 and all(len(p.slots) == len(p.all_slots()) for p in peers)


@pytest.mark.slow
async def test_publish_only_is_confirmed_by_the_server(node: NodeHandle) -> None:
    result = await bench(node, "pub", subs=0, pubs=2)
    assert result.ok
    assert result.received == result.expected == MSGS
    assert result.per_worker == (MSGS // 2, MSGS // 2)


@pytest.mark.slow
async def test_pubsub_counts_every_message(node: NodeHandle) -> None:
    result = await bench(node, "pubsub", size=100)
    assert result.ok
    assert result.received == result.expected == MSGS


@pytest.mark.slow
async def test_fanout_delivers_every_message_to_every_subscriber(node: NodeHandle) -> None:
    result = await bench(node, "fanout", subs=3, pubs=2)
    assert result.ok
    assert result.expected == MSGS * 3
    assert result.per_worker == (MSGS, MSGS, MSGS)


@pytest.mark.slow
async def test_queue_group_delivers_each_message_exactly_once(node: NodeHandle) -> None:
    result = await bench(node, "queue", subs=3, pubs=2)
    assert result.ok
    assert sum(result.per_worker) == result.received == result.expected == MSGS


@pytest.mark.slow
async def test_request_reply_gets_every_reply(node: NodeHandle) -> None:
    result = await bench(node, "reqrep", msgs=200)
    assert result.ok
    assert result.received == result.expected == 200
    assert result.latency is not None


@pytest.mark.slow
@pytest.mark.parametrize(
    ("scenario", "subs"), [("pubsub", 1), ("fanout", 2), ("queue", 3), ("reqrep", 1)]
)
async def test_runs_across_a_route_count_exactly(
    pair: tuple[NodeHandle, NodeHandle], scenario: str, subs: int
) -> None:
    near, far = pair
    msgs = 200 if scenario == "reqrep" else MSGS
    result = await bench(near, scenario, msgs=msgs, subs=subs, far=far)
    assert result.ok
    once = scenario in ("queue", "reqrep")
    assert result.received == result.expected == (msgs if once else msgs * subs)


@pytest.mark.slow
async def test_across_a_route_from_the_command_line(
    pair: tuple[NodeHandle, NodeHandle], capsys: pytest.CaptureFixture[str]
) -> None:
    near, far = pair
    argv = ["pubsub", "--url", near.url, "--sub-url", far.url, "--msgs", "300"]
    status = await trio.to_thread.run_sync(cli.main, argv)
    out = capsys.readouterr().out
    assert status == 0
    assert f"at {near.url} -> {far.url}" in out
    assert "check: received 300 == expected 300  OK" in out


async def test_convergence_takes_every_sample(pair: tuple[NodeHandle, NodeHandle]) -> None:
    near, far = pair
    outcome = await trio.to_thread.run_sync(converge, endpoint(near), endpoint(far), 25)
    assert outcome.ok
    assert len(outcome.samples_ns) == outcome.requested == 25


async def test_convergence_json(
    pair: tuple[NodeHandle, NodeHandle], capsys: pytest.CaptureFixture[str]
) -> None:
    near, far = pair
    argv = ["convergence", "--url", near.url, "--sub-url", far.url, "--samples", "10", "--json"]
    status = await trio.to_thread.run_sync(cli.main, argv)
    out = json.loads(capsys.readouterr().out)
    assert status == 0
    assert out["ok"] is True
    assert out["samples"] == out["requested"] == 10


@pytest.mark.slow
@pytest.mark.parametrize("flavor", FLAVORS)
def test_resync_sweeps_every_subscription(flavor: Flavor) -> None:
    outcome = resync(flavor, 300)
    assert outcome.ok
    assert outcome.swept == outcome.subs == 300


@pytest.mark.slow
@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_started_cluster_carries_runs_across_its_routes(flavor: Flavor) -> None:
    with Servers() as servers:
        first, second, third = servers.cluster(flavor, 3)
        spec = Spec("pubsub", first.endpoint, 1000, timeout=30, sub_endpoint=third.endpoint)
        result = run(spec)
        assert result.ok
        assert result.received == 1000
        assert converge(second.endpoint, third.endpoint, 5).ok


@pytest.mark.slow
@pytest.mark.parametrize("flavor", FLAVORS)
def test_a_started_supercluster_carries_runs_across_its_gateway(flavor: Flavor) -> None:
    with Servers() as servers:
        a, b = servers.supercluster(flavor)
        assert a.gateway_url is not None
        assert b.gateway_url is not None
        for scenario, msgs in (("pubsub", 1000), ("reqrep", 100)):
            result = run(Spec(scenario, a.endpoint, msgs, timeout=30, sub_endpoint=b.endpoint))
            assert result.ok, result.failure()
            assert result.received == msgs


@pytest.mark.slow
async def test_json_output_parses(node: NodeHandle, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["queue", "--url", node.url, "--msgs", "500", "--subs", "2", "--json"]
    status = await trio.to_thread.run_sync(cli.main, argv)
    out = json.loads(capsys.readouterr().out)
    assert status == 0
    assert out["ok"] is True
    assert out["received"] == out["expected"] == 500
    assert sum(out["per_worker"]) == 500


@pytest.mark.slow
async def test_human_output_has_the_check_line(
    node: NodeHandle, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["reqrep", "--url", node.url, "--msgs", "50"]
    status = await trio.to_thread.run_sync(cli.main, argv)
    out = capsys.readouterr().out
    assert status == 0
    assert "check: replies 50 == expected 50  OK" in out


@pytest.mark.slow
async def test_a_failed_run_says_so_instead_of_hanging(nursery: trio.Nursery) -> None:
    node = await start_node(nursery, Config(max_payload=64))
    spec = Spec("pubsub", Endpoint(node.host, node.port), msgs=100, size=100, timeout=30)
    result = await trio.to_thread.run_sync(run, spec)
    assert not result.ok
    assert result.errors


@pytest.mark.timeout(15)
def test_unreachable_server_is_a_one_line_error(capsys: pytest.CaptureFixture[str]) -> None:
    port = free_port()  # (nothing listens there)
    assert cli.main(["pubsub", "--url", f"nats://127.0.0.1:{port}", "--msgs", "10"]) == 2
    assert "cannot connect to nats://127.0.0.1:" in capsys.readouterr().err


@pytest.fixture
def redis() -> Iterator[ServerProcess]:
    """A redis-server of the test's own, on a free port of 127.0.0.1."""
    if REDIS_SERVER is None:
        pytest.skip("redis-server is not on PATH")
    with Servers() as servers:
        yield servers.start_resp(REDIS_SERVER)


@pytest.mark.slow
@needs_redis
@pytest.mark.parametrize(
    ("scenario", "subs", "pubs", "patterns"),
    [("resp-pubsub", 1, 1, 0), ("resp-fanout", 3, 2, 0), ("resp-patterns", 1, 1, 300)],
)
def test_resp_scenarios_count_every_delivery(
    redis: ServerProcess, scenario: str, subs: int, pubs: int, patterns: int
) -> None:
    spec = Spec(scenario, redis.endpoint, MSGS, 100, subs, pubs, timeout=30, patterns=patterns)
    result = run(spec)
    assert result.ok, result.failure()
    assert result.received == result.expected == MSGS * subs
    assert result.per_worker == (MSGS,) * subs


@pytest.mark.slow
@needs_redis
def test_resp_patterns_from_the_command_line(
    redis: ServerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    argv = ["resp-patterns", "--url", redis.endpoint.url, "--msgs", "300", "--patterns", "50"]
    assert cli.main(argv) == 0
    out = capsys.readouterr().out
    assert "1 subscriber holding 50 patterns that never match, 300 msgs" in out
    assert f"at {redis.endpoint.url}" in out
    assert "check: received 300 == expected 300  OK" in out


@pytest.mark.slow
@needs_redis
def test_resp_json_output_parses(redis: ServerProcess, capsys: pytest.CaptureFixture[str]) -> None:
    argv = ["resp-fanout", "--url", redis.endpoint.url, "--msgs", "400", "--subs", "2", "--json"]
    assert cli.main(argv) == 0
    out = json.loads(capsys.readouterr().out)
    assert out["ok"] is True
    assert (out["url"], out["patterns"]) == (redis.endpoint.url, 0)
    assert out["received"] == out["expected"] == 800
    assert out["per_worker"] == [400, 400]


@pytest.mark.slow
@needs_redis
def test_resp_run_fails_its_check_when_the_server_stops_mid_run(redis: ServerProcess) -> None:
    """The server is stopped at the first progress report that shows deliveries under way."""

    def stop_once_under_way(done: int, total: int) -> None:
        if 0 < done < total:
            redis.proc.terminate()

    spec = Spec("resp-fanout", redis.endpoint, msgs=50_000_000, subs=2, timeout=30)
    result = run(spec, stop_once_under_way)
    assert redis.proc.poll() is not None
    assert not result.ok
    assert 0 < result.received < result.expected
    assert "server closed the connection" in result.errors


@pytest.mark.slow
@needs_redis
def test_resp_password_is_sent_and_its_absence_refused(
    redis: ServerProcess, capsys: pytest.CaptureFixture[str]
) -> None:
    with resp.connect(redis.endpoint) as sock:
        sock.sendall(resp.command(b"CONFIG", b"SET", b"requirepass", b"s3cret"))
        assert sock.recv(100) == b"+OK\r\n"
    url = f"redis://:s3cret@127.0.0.1:{redis.endpoint.port}"
    assert cli.main(["resp-pubsub", "--url", url, "--msgs", "100"]) == 0
    assert cli.main(["resp-pubsub", "--url", redis.endpoint.url, "--msgs", "100"]) == 2
    assert "server refused the handshake: -NOAUTH" in capsys.readouterr().err


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_compare_starts_what_serves_resp_and_notes_what_does_not() -> None:
    """pubmesh is started with --redis_port either way: it serves RESP there, or it is noted as
    skipped (a pubmesh without the listener refuses the flag)."""
    with Servers() as servers:
        block, targets = resp_block(servers)
        for target in targets:
            spec = Spec("resp-pubsub", target.node, msgs=200, timeout=30)
            assert run(spec).ok
    served = [t.name for t in targets]
    assert list(block.versions) == served
    skipped = [n for n in block.notes if n.startswith("pubmesh did not serve RESP")]
    assert ("pubmesh" in served) != bool(skipped)
    assert ("redis-server" in served) == (REDIS_SERVER is not None)
    if REDIS_SERVER is not None:
        assert block.versions["redis-server"]


@pytest.mark.parametrize(
    ("scenario", "options"),
    [
        ("pubsub", {"subject": "a.*"}),
        ("pubsub", {"subject": "a..b"}),
        ("pubsub", {"subject": "orders.MSG"}),
        ("pubsub", {"subject": "x-ERR"}),
        ("pubsub", {"subs": 0}),
        ("pub", {"subs": 2}),
        ("pub", {"sub_endpoint": Endpoint("127.0.0.1", 4223)}),
        ("reqrep", {"pubs": 2}),
        ("fanout", {"msgs": 0}),
        ("nosuch", {}),
        ("pubsub", {"endpoint": REDIS}),
        ("pubsub", {"patterns": 3}),
        ("resp-pubsub", {"endpoint": Endpoint("127.0.0.1", 4222)}),
        ("resp-pubsub", {"patterns": 3}),
        ("resp-pubsub", {"subject": "message"}),
        ("resp-pubsub", {"subject": "a b"}),
        ("resp-pubsub", {"sub_endpoint": REDIS}),
        ("resp-fanout", {"subs": 0}),
        ("resp-patterns", {"patterns": -1}),
    ],
)
def test_specs_that_cannot_be_measured_are_refused(scenario: str, options: dict[str, Any]) -> None:
    where = REDIS if scenario.startswith("resp-") else Endpoint("127.0.0.1", 4222)
    spec = attrs.evolve(Spec(scenario, where, msgs=10), **options)
    with pytest.raises(BenchError):
        spec.check()


def test_resp_options_and_their_defaults() -> None:
    parser = cli._parser()
    args = parser.parse_args(["resp-patterns"])
    assert (args.url, args.patterns, args.subs, args.subject) == (
        "redis://127.0.0.1:6379",
        10_000,
        1,
        "bench",
    )
    args = parser.parse_args(["resp-fanout", "--channel", "news", "--subs", "4", "--json"])
    assert (args.subject, args.subs, args.json) == ("news", 4, True)
    with pytest.raises(SystemExit):
        parser.parse_args(["resp-pubsub", "--patterns", "5"])  # only resp-patterns holds any
    with pytest.raises(SystemExit):
        parser.parse_args(["resp-pubsub", "--sub-url", "redis://127.0.0.1:1"])
    assert parser.parse_args(["compare", "--resp"]).resp


@pytest.mark.parametrize(
    ("url", "endpoint"),
    [
        ("nats://127.0.0.1:4333", Endpoint("127.0.0.1", 4333)),
        ("127.0.0.1", Endpoint("127.0.0.1", 4222)),
        ("nats://al:s%40cret@127.0.0.1:1", Endpoint("127.0.0.1", 1, user="al", password="s@cret")),
        ("nats://t0ken@127.0.0.1", Endpoint("127.0.0.1", 4222, token="t0ken")),
        ("redis://127.0.0.1", REDIS),
        ("redis://:pw@127.0.0.1:6379", attrs.evolve(REDIS, password="pw")),
        ("redis://al:pw@127.0.0.1:6379", attrs.evolve(REDIS, user="al", password="pw")),
    ],
)
def test_urls(url: str, endpoint: Endpoint) -> None:
    assert parse_url(url) == endpoint


def test_bad_url_is_refused() -> None:
    with pytest.raises(BenchError):
        parse_url("http://127.0.0.1:4222")


def test_scheme_less_url_takes_the_scenarios_protocol() -> None:
    assert parse_url("127.0.0.1:7000", "redis") == attrs.evolve(REDIS, port=7000)


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


@pytest.mark.timeout(5)
def test_resp_reader_counts_replies_and_keeps_the_first_error() -> None:
    """Replies are counted as they complete; an error is found even as the stream's first reply
    (the handshake's CRLF leads it)."""
    ours, server = socket.socketpair()
    with ours, server:
        reader = Reader(ours, b"\r\n", dialect=resp.RESP)
        server.sendall(b"-NOPERM no rights\r\n:0\r")
        assert reader.read() == [1]
        server.sendall(b"\n:1\r\n-ERR later\r\n")
        assert reader.read() == [3]
        assert reader.error == "server error: NOPERM no rights"


def test_resp_commands_and_patterns() -> None:
    assert resp.command(b"PUBLISH", b"ch", b"") == b"*3\r\n$7\r\nPUBLISH\r\n$2\r\nch\r\n$0\r\n\r\n"
    patterns = list(resp.never_matching(b"bench", 3))
    assert patterns == [b"bench.never.0.*", b"bench.never.1.*", b"bench.never.2.*"]


NEAR, FAR = Endpoint("127.0.0.1", 4223), Endpoint("127.0.0.1", 4224)
A, B = Endpoint("127.0.0.1", 4225), Endpoint("127.0.0.1", 4226)
TARGET = Target("pubmesh", "0.1.0", PUBMESH, Endpoint("127.0.0.1", 4222), (NEAR, FAR), (A, B))
RESP_TARGET = Target("pubmesh", "0.1.0", None, REDIS)


BOTH = {"pubmesh": "0.1.0", "nats-server": "2.9.10"}


def made_up(case: Any, seconds: float) -> Outcome:
    """A run of ``case`` that passed its check, its figures all derived from ``seconds``."""
    if isinstance(case, LoadCase):
        target = RESP_TARGET if case.scenario.startswith("resp-") else TARGET
        return Result(
            case.spec(target, 1.0), expected=10, received=10, seconds=seconds, per_worker=(10,)
        )
    if case.scenario == "convergence":
        return Convergence(NEAR, FAR, requested=1, samples_ns=(round(seconds * 1e6),))
    if case.scenario == "resp-expiry":
        pings = (round(seconds * 1e6),) * 3
        return Reclaim(REDIS, case.keys, case.ttl_ms, seconds, seconds, pings, left=0)
    if isinstance(case, ClientsCase | RespClientsCase | FootprintCase):
        return made_up_crowd(case, seconds)
    if isinstance(case, StallCase):
        ns = (round(seconds * 1e9),)
        return Stall(
            url=REDIS.url,
            patterns=case.patterns,
            size=case.size,
            publish_ns=ns,
            canary_ns=ns,
            seconds=seconds,
        )
    return Resync("pubmesh", case.subs, seconds, seconds, seconds, swept=case.subs)


def made_up_crowd(case: ClientsCase | RespClientsCase | FootprintCase, seconds: float) -> Outcome:
    """A passed run of a many-clients case: ``10 / seconds`` requests a second, latencies and bytes
    per client of ``seconds`` (in ms, µs and thousands), its load generator busy half the time."""
    if isinstance(case, ClientsCase):
        load = Crowd(case.clients, case.responders, requests=10)
        latencies = (round(seconds * 1000),) * 3
        return CrowdRun(TARGET.node.url, load, 10, seconds, latencies, seconds / 2, per_responder=(10,))
    if isinstance(case, RespClientsCase):
        figures = tuple(
            (name, Figures(name, 10 / seconds, seconds, seconds, seconds, seconds)) for name in COMMANDS
        )
        return Sweep(REDIS.url, case.clients, 10, case.pipeline, figures, seconds, seconds / 2)
    return Footprint(REDIS.url, case.kind, 1000, before=0, after=round(seconds * 1_000_000))


def test_compare_table_shows_both_servers_and_the_ratio() -> None:
    results: dict[tuple[str, str], list[Outcome]] = {}
    for case in CASES:
        results[case.label, "pubmesh"] = [made_up(case, 2.0)]
        results[case.label, "nats-server"] = [made_up(case, 1.0)]
    fanout = next(c for c in CASES if isinstance(c, LoadCase) and c.scenario == "fanout")
    spec = fanout.spec(TARGET, 1.0)
    lost = Result(spec, expected=10, received=9, seconds=2.0, per_worker=(9,), errors=("lost",))
    results["fan-out 1→10", "pubmesh"] = [lost]
    late = Convergence(NEAR, FAR, requested=3, samples_ns=(5,), error="too slow")
    results["interest convergence across a route", "pubmesh"] = [late]
    table = render(results, [Block("NATS", CASES, BOTH)], 1, 1.0, 10.0)
    assert "NATS: pubmesh 0.1.0 vs nats-server 2.9.10" in table
    assert "| scenario | pubmesh | nats-server | pubmesh / nats-server |" in table
    assert "| pub/sub 1:1, 800,000 msgs: msgs/s | 5 | 10 | 0.50 |" in table
    assert "| fan-out 1→10, 200,000 msgs: deliveries/s | failed | 10 | — |" in table
    assert "| pub/sub 1:1 through a route, 800,000 msgs: msgs/s | 5 | 10 | 0.50 |" in table
    assert (
        "| pub/sub 1:1 through a route, 800,000 msgs: ÷ pub/sub 1:1 (pubmesh target ≥ 0.5)"
        " | 1.00 | 1.00 | — |"
    ) in table
    assert (
        "| interest convergence across a route, 200 subscriptions: p99 (ms) | failed | 1.00 | — |"
        in table
    )
    assert (
        "| route resync of a joining node, 100,000 subscriptions: s from first route"
        " (pubmesh target < 2) | 2.00 | 1.00 | 2.00 |"
    ) in table
    assert "| pub/sub 1:1 across a gateway, 800,000 msgs: msgs/s | 5 | 10 | 0.50 |" in table
    assert "| request/reply across a gateway, 5,000 requests: latency p50 (µs) |" in table
    assert "- pubmesh, fan-out 1→10: received 9 of 10 (lost)" in table
    assert "- pubmesh, interest convergence across a route: 1 of 3 samples (too slow)" in table


def test_compare_table_without_nats_server() -> None:
    results = {(case.label, "pubmesh"): [made_up(case, 1.0)] for case in CASES}
    table = render(results, [Block("NATS", CASES, {"pubmesh": "0.1.0"})], 1, 1.0, 1.0)
    assert "| scenario | pubmesh |\n|---|---:|" in table
    assert "| route resync of a joining node, 100,000 subscriptions" in table
    assert "nats-server" not in table
    assert "Ratio above 1" not in table


def test_compare_resp_table_shows_both_servers_the_ratio_and_the_pattern_cost() -> None:
    """pubmesh's RESP runs take 1 s each; redis-server's 1:1 and fan-out 0.5 s, its patterns run 20 s."""
    results: dict[tuple[str, str], list[Outcome]] = {}
    for case in RESP_CASES:
        results[case.label, "pubmesh"] = [made_up(case, 1.0)]
        slow = case.scenario == "resp-patterns"
        results[case.label, "redis-server"] = [made_up(case, 20.0 if slow else 0.5)]
    versions = {"pubmesh": "0.1.0", "redis-server": "7.0.15"}
    blocks = [Block("NATS", CASES, BOTH), Block("RESP", RESP_CASES, versions, ("a note",))]
    for case in CASES:
        results[case.label, "pubmesh"] = [made_up(case, 1.0)]
        results[case.label, "nats-server"] = [made_up(case, 1.0)]
    table = render(results, blocks, 1, 1.0, 10.0)
    assert "RESP: pubmesh 0.1.0 vs redis-server 7.0.15" in table
    assert "| scenario | pubmesh | redis-server | pubmesh / redis-server |" in table
    assert "| RESP pub/sub 1:1, 800,000 msgs: msgs/s | 10 | 20 | 0.50 |" in table
    assert "| RESP fan-out 1→10, 200,000 msgs: deliveries/s | 10 | 20 | 0.50 |" in table
    patterns = "| RESP publish with 10,000 non-matching patterns, 10,000 msgs:"
    assert f"{patterns} msgs/s | 10 | 0 | 20.00 |" in table
    assert f"{patterns} ÷ zero-pattern rate, same size | 1.0000 | 0.0250 | — |" in table
    assert "| RESP pub/sub 1:1, no patterns, 10,000 msgs: msgs/s |" in table
    assert "\na note\n" in table
    assert table.index("| pub/sub 1:1, 800,000") < table.index("RESP: pubmesh")


def test_compare_resp_table_with_one_server_or_none() -> None:
    results: dict[tuple[str, str], list[Outcome]] = {
        (case.label, "redis-server"): [made_up(case, 1.0)] for case in RESP_CASES
    }
    skipped = "pubmesh did not serve RESP when started with --redis_port: its RESP rows are skipped"
    only_redis = Block("RESP", RESP_CASES, {"redis-server": "7.0.15"}, (skipped,))
    table = render(results, [only_redis], 1, 1.0, 1.0)
    assert "| scenario | redis-server |\n|---|---:|" in table
    assert "| RESP pub/sub 1:1, 800,000 msgs: msgs/s | 10 |" in table
    assert skipped in table
    missing = "redis-server was not found on PATH: its RESP rows are skipped."
    table = render({}, [Block("RESP", (), {}, (skipped, missing))], 1, 1.0, 1.0)
    assert "RESP: no server could be measured" in table
    assert skipped in table
    assert missing in table
    assert "| scenario |" not in table
