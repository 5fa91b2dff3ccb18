"""The many-clients measurements: ``pubmesh bench clients``, ``resp-clients`` and ``memory``, their
parsers (redis-benchmark's CSV, a responder's stream of requests, ``/proc`` status), and their rows
in ``pubmesh bench compare``. Live runs are scaled down and assert counts, never timings."""

from __future__ import annotations

import csv
import io
import itertools
import json
import os
import resource
import shutil
from pathlib import Path

import pytest
import redis as redispy
import trio
from hypothesis import given
from hypothesis import strategies as st

from node.bench import cli, clients, crowds, footprint, redis_benchmark
from node.bench.clients import Crowd, Requests
from node.bench.compare import CASES, RESP_CASES, Block, render, resp_block
from node.bench.crowds import ClientsCase, FootprintCase, RespClientsCase
from node.bench.redis_benchmark import COMMANDS, Figures, Load, parse_csv
from node.bench.servers import Servers
from node.bench.target import Outcome
from node.bench.wire import BenchError, Endpoint
from node.config.options import Config, RedisConfig
from node.nats.protocol import writer as w
from node.run.launch import NodeHandle
from tests.node.bench.test_bench import BOTH, made_up
from tests.support import start_node, start_redis_node

pytestmark = pytest.mark.timeout(60)

REDIS_BENCHMARK = redis_benchmark.program()
needs_redis_benchmark = pytest.mark.skipif(
    REDIS_BENCHMARK is None, reason="redis-benchmark is not on PATH"
)
CSV = (
    '"test","rps","avg_latency_ms","min_latency_ms","p50_latency_ms","p95_latency_ms",'
    '"p99_latency_ms","max_latency_ms"\n'
    '"XADD s * f v","30120.48","1.025","0.048","0.895","2.071","4.111","19.183"\n'
)


def test_redis_benchmark_csv_is_read_by_its_header() -> None:
    assert parse_csv(CSV) == [Figures("XADD s * f v", 30120.48, 1.025, 0.048, 0.895, 4.111)]
    two = CSV + '"PING","10","1","0.5","0.9","1.1","1.2","2"\n'
    assert [f.test for f in parse_csv(two)] == ["XADD s * f v", "PING"]


@pytest.mark.parametrize(
    ("text", "says"),
    [
        ("", "printed nothing"),
        ("Could not connect to Redis at 127.0.0.1:1: Connection refused\n", "no CSV header"),
        ('"test","rps"\n"PING","1"\n', "lacks a column"),
        (CSV.splitlines()[0] + "\n", "no test"),
        (CSV + '"PING","1"\n', "malformed line"),
        (CSV.replace("30120.48", "fast"), "non-number"),
        (CSV.replace("30120.48", "nan"), "impossible figure"),
        (CSV.replace("30120.48", "inf"), "too short to time"),
        (CSV.replace("0.895", "-1"), "impossible figure"),
    ],
)
def test_redis_benchmark_output_that_is_not_figures_is_refused(text: str, says: str) -> None:
    with pytest.raises(BenchError, match=says):
        parse_csv(text)


@given(st.text(max_size=400))
def test_any_output_parses_or_is_one_bench_error(text: str) -> None:
    try:
        figures = parse_csv(text)
    except BenchError:
        return
    assert figures
    assert all(f.rps >= 0 and f.p99_ms >= 0 for f in figures)


@given(
    st.lists(
        st.tuples(
            st.text(st.characters(min_codepoint=32, max_codepoint=126), min_size=1, max_size=20),
            st.lists(st.floats(0, 1e9, allow_nan=False), min_size=7, max_size=7),
        ),
        min_size=1,
        max_size=5,
    )
)
def test_well_formed_csv_gives_back_every_line(lines: list[tuple[str, list[float]]]) -> None:
    out = io.StringIO()
    writer = csv.writer(out, quoting=csv.QUOTE_ALL)
    columns = ["avg_latency_ms", "min_latency_ms", "p50_latency_ms", "p95_latency_ms"]
    writer.writerow(["test", "rps", *columns, "p99_latency_ms", "max_latency_ms"])
    for name, values in lines:
        writer.writerow([name, *(repr(v) for v in values)])
    figures = parse_csv(out.getvalue())
    assert [(f.test, f.rps, f.p50_ms, f.p99_ms) for f in figures] == [
        (name, v[0], v[3], v[5]) for name, v in lines
    ]


def test_commands_and_the_tool_line() -> None:
    words = dict(redis_benchmark.commands(["ping", "XADD"], 2, "r1"))
    assert words == {"PING": ["PING"], "XADD": ["XADD", "bench.clients.stream.r1", "*", "f", "xx"]}
    (keys,) = redis_benchmark.commands(["xadd-keys"], 1, "r1")
    assert keys == (
        "XADD-KEYS",
        ["-r", "100000", "XADD", "bench.clients.streams.r1.__rand_int__", "*", "f", "x"],
    )
    with pytest.raises(BenchError, match="cannot measure 'DEL'"):
        redis_benchmark.commands(["DEL"], 2, "r1")
    secret = Endpoint("h", 7, user="u", password="p", scheme="redis")
    argv = redis_benchmark.argv("rb", secret, 50, 1000, 16)
    assert " ".join(argv) == ("rb -h h -p 7 -c 50 -n 1000 -P 16 --csv -a p --no-auth-warning --user u")


def frames() -> st.SearchStrategy[tuple[bytes, list[bytes], int]]:
    """A stream a responder may receive: its bytes, the reply subjects in it, its PINGs."""
    token = st.binary(min_size=1, max_size=12).filter(lambda b: not set(b) & set(b" \r\n\t"))
    request = st.tuples(token, token, st.binary(max_size=40)).map(
        lambda t: (w.msg(t[0], b"1", t[1], t[2]), [t[1]], 0)
    )
    other: st.SearchStrategy[tuple[bytes, list[bytes], int]] = st.sampled_from(
        [(w.PING, [], 1), (w.PONG, [], 0), (b"+OK\r\n", [], 0)]
    )
    return st.lists(st.one_of(request, other), max_size=20).map(
        lambda parts: (
            b"".join(p[0] for p in parts),
            [r for p in parts for r in p[1]],
            sum(p[2] for p in parts),
        )
    )


@given(frames(), st.lists(st.integers(0, 2000), max_size=10))
def test_requests_are_split_out_of_any_chunking(
    stream: tuple[bytes, list[bytes], int], cuts: list[int]
) -> None:
    data, replies, pings = stream
    bounds = sorted({0, len(data), *(c % (len(data) + 1) for c in cuts)})
    requests = Requests()
    got: list[bytes] = []
    seen = 0
    for start, end in itertools.pairwise(bounds):
        more, n = requests.feed(data[start:end])
        got += more
        seen += n
    assert (got, seen) == (replies, pings)


@pytest.mark.parametrize(
    ("data", "says"),
    [
        (b"-ERR 'Authorization Violation'\r\n", "Authorization Violation"),
        (b"MSG subject 1 5\r\nhello\r\n", "without a reply subject"),
        (b"MSG subject 1 reply 2\r\nhello\r\n", "overran"),
        (b"HELLO\r\n", "unexpected"),
    ],
)
def test_a_responder_refuses_what_it_cannot_answer(data: bytes, says: str) -> None:
    with pytest.raises(BenchError, match=says):
        Requests().feed(data)


def test_vm_rss_is_read_in_bytes() -> None:
    status = "Name:\tpython\nVmPeak:\t  300 kB\nVmRSS:\t   12345 kB\nThreads:\t1\n"
    assert footprint.vm_rss(status) == 12345 * 1024
    with pytest.raises(BenchError, match="no VmRSS"):
        footprint.vm_rss("Name:\tzombie\n")
    with pytest.raises(BenchError, match="no VmRSS"):
        footprint.vm_rss("VmRSS:\t12 MB\n")
    assert footprint.vm_rss(Path("/proc/self/status").read_text()) > 0


def test_the_fd_limit_is_raised_to_the_hard_one() -> None:
    soft = footprint.raise_fd_limit()
    assert soft == resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    assert soft == hard or hard == resource.RLIM_INFINITY


def nats(node: NodeHandle) -> Endpoint:
    return Endpoint("127.0.0.1", node.port)


def resp(node: NodeHandle) -> Endpoint:
    return Endpoint("127.0.0.1", node.redis_port or 0, scheme="redis")


def lengths(node: NodeHandle, pattern: str) -> list[int]:
    """The length of each stream whose key matches ``pattern`` (from a worker thread)."""
    with redispy.Redis(port=node.redis_port or 0, socket_timeout=10) as client:
        keys: list[bytes] = client.keys(pattern)
        return [client.xlen(key) for key in keys]


async def test_clients_get_every_reply(nursery: trio.Nursery) -> None:
    node = await start_redis_node(nursery)
    load = Crowd(clients=7, responders=3, requests=300, timeout=30)
    run = await trio.to_thread.run_sync(clients.crowd, nats(node), load)
    assert run.ok, run.failure()
    assert run.answered == 300 == sum(run.per_responder) == len(run.latencies_ns)
    assert len(run.per_responder) == 3
    assert run.generator_share > 0
    assert "check: answered 300 of 300  OK" in clients.describe(run)


@needs_redis_benchmark
async def test_resp_clients_measure_every_command(nursery: trio.Nursery) -> None:
    node = await start_redis_node(nursery)
    load = Load(clients=4, requests=2000, pipeline=4)  # (a run of under 1 ms cannot be timed)
    sweep = await trio.to_thread.run_sync(redis_benchmark.sweep, resp(node), load)
    assert sweep.ok, sweep.failure()
    assert [name for name, _ in sweep.figures] == list(COMMANDS)
    (length,) = await trio.to_thread.run_sync(lengths, node, "bench.clients.stream.*")
    assert length == 2000  # every XADD was answered, none more
    spread = await trio.to_thread.run_sync(lengths, node, "bench.clients.streams.*")
    assert sum(spread) == 2000
    assert len(spread) > 1000  # (2,000 picks of 100,000 keys: about 1,980 distinct)


@needs_redis_benchmark
async def test_resp_clients_stop_at_an_error(nursery: trio.Nursery) -> None:
    """A command the server refuses (a write beyond maxmemory) ends the sweep with its error."""
    config = Config(redis=RedisConfig(host="127.0.0.1", port=0, maxmemory=1))
    node = await start_node(nursery, config)
    load = Load(clients=2, requests=2000)  # (a run of under 1 ms cannot be timed)
    sweep = await trio.to_thread.run_sync(redis_benchmark.sweep, resp(node), load, ["PING", "SET"])
    assert not sweep.ok
    assert [name for name, _ in sweep.figures] == ["PING"], sweep.failure()
    assert sweep.failure().startswith("SET: redis-benchmark exited with 1")
    assert "OOM" in sweep.failure()


async def test_memory_of_each_kind_of_client(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch
) -> None:
    """In-process node, so the RSS is this process's: the figures mean little, the counts are real."""
    monkeypatch.setattr(footprint, "IDLE", 0.0)
    monkeypatch.setattr(footprint, "SETTLE", 0.0)
    node = await start_redis_node(nursery)
    kinds: list[tuple[Endpoint, footprint.Kind]] = [
        (nats(node), "nats-idle"), (resp(node), "resp-idle"), (resp(node), "resp-blocked")
    ]  # fmt: skip
    for endpoint, kind in kinds:
        measured = await trio.to_thread.run_sync(footprint.measure, endpoint, os.getpid(), kind, 30)
        assert measured.ok
        assert (measured.kind, measured.connections) == (kind, 30)
        assert min(measured.before, measured.after) > 0
    assert await trio.to_thread.run_sync(lengths, node, "bench.memory.*") == []  # (stream gone)
    with pytest.raises(BenchError, match="needs a redis:// URL"):
        footprint.measure(nats(node), os.getpid(), "resp-idle", 1)


async def test_clients_and_memory_from_the_command_line(
    nursery: trio.Nursery, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(footprint, "IDLE", 0.0)
    monkeypatch.setattr(footprint, "SETTLE", 0.0)
    node = await start_redis_node(nursery)
    argv = ["clients", "--url", nats(node).url, "--clients", "3", "--requests", "30", "--json"]
    assert await trio.to_thread.run_sync(cli.main, argv) == 0
    assert json.loads(capsys.readouterr().out)["answered"] == 30
    argv = ["memory", "--url", resp(node).url, "--pid", str(os.getpid()), "--connections", "5"]
    assert await trio.to_thread.run_sync(cli.main, [*argv, "--blocked"]) == 0
    assert "5 resp-blocked clients" in capsys.readouterr().out
    argv = ["memory", "--url", nats(node).url, "--pid", "1", "--blocked"]
    assert await trio.to_thread.run_sync(cli.main, argv) == 2
    assert "--blocked needs a redis:// URL" in capsys.readouterr().err


def crowd_results(
    cases: tuple[object, ...], servers: dict[str, float]
) -> dict[tuple[str, str], list[Outcome]]:
    return {
        (case.label, server): [made_up(case, seconds)]  # type: ignore[attr-defined]
        for case in cases
        for server, seconds in servers.items()
    }


def test_compare_rows_of_many_clients_and_memory() -> None:
    results = crowd_results(CASES, {"pubmesh": 2.0, "nats-server": 1.0})
    results |= crowd_results(RESP_CASES, {"pubmesh": 2.0, "redis-server": 1.0})
    resp_versions = {"pubmesh": "0.1.0", "redis-server": "7.0.15"}
    blocks = [Block("NATS", CASES, BOTH), Block("RESP", RESP_CASES, resp_versions)]
    blocks = [
        Block(b.title, b.cases, b.versions, crowds.remarks(b.cases, b.versions, results)) for b in blocks
    ]
    table = render(results, blocks, 1, 1.0, 1.0)
    requesters = "| request/reply, 50 requesters at once → queue group of 4, 50,000 requests:"
    assert f"{requesters} req/s | 5 | 10 | 0.50 |" in table
    assert f"{requesters} latency p99 (µs) | 2.0 | 1.0 | 2.00 |" in table
    idle = "| memory of idle clients (after CONNECT and PING), 2,000 clients:"
    assert f"{idle} bytes per client (pubmesh target ≤ 3x) | 2,000 | 1,000 | 2.00 |" in table
    pipelined = "| RESP 50 clients, 16 commands in flight each (-P 16), 100,000 requests each:"
    assert f"{pipelined} XADD req/s | 5 | 10 | 0.50 |" in table
    assert f"{pipelined} GET p99 (ms) | 2.000 | 1.000 | 2.00 |" in table
    blocked = "| RESP memory of readers blocked in XREADGROUP … BLOCK 0, 2,000 clients:"
    assert blocked in table
    assert (
        "the load generator (the requesters and responders, one Python thread on one selectors"
        " loop) used, of one core (median CPU time over wall time), 50% against pubmesh, 50% against"
        " nats-server."
    ) in table
    assert (
        "redis-benchmark itself used, of one core, 50% against pubmesh, 50% against redis-server."
        in table
    )
    assert sum(isinstance(c, ClientsCase | FootprintCase) for c in CASES) == 2
    assert sum(isinstance(c, RespClientsCase | FootprintCase) for c in RESP_CASES) == 4
    patterns = next(i for i, c in enumerate(RESP_CASES) if "non-matching" in c.label)
    assert all(
        i < patterns for i, c in enumerate(RESP_CASES) if isinstance(c, RespClientsCase)
    )  # (before the patterns spoil redis-server)


@pytest.mark.slow
@pytest.mark.timeout(90)
def test_compare_leaves_the_many_clients_rows_out_without_redis_benchmark(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With redis-server on PATH but not redis-benchmark, the rows are left out and a note says so."""
    server = shutil.which("redis-server")
    if server is None:
        pytest.skip("redis-server is not on PATH")
    (tmp_path / "redis-server").symlink_to(server)
    monkeypatch.setenv("PATH", str(tmp_path))
    with Servers() as servers:
        block, targets = resp_block(servers)
    assert [t.name for t in targets] == ["pubmesh", "redis-server"]
    assert all(t.resp_flavor is not None for t in targets)
    assert not any(isinstance(c, RespClientsCase) for c in block.cases)
    assert any(isinstance(c, FootprintCase) for c in block.cases)
    assert "redis-benchmark was not found on PATH: the many-clients rows are left out." in block.notes
