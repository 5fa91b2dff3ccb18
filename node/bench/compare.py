"""``pubmesh bench compare``: pubmesh and nats-server side by side, under the same load.

Each server is started here on 127.0.0.1 with its default settings, as a single node, as a 3-node
cluster, and as two one-node clusters joined by gateways, and stopped here (see
``node.bench.servers``). Runs alternate between the servers, so
whatever else the machine is doing weighs on both alike, and each figure is the median of several
runs, which a single slow run cannot move. The result is a markdown table, ready to paste into a
README or an issue.

With ``resp``, a second table compares pubmesh's Redis-protocol listener with redis-server the same
way. Either server may be missing from it (redis-server not installed, or a pubmesh that does not
take ``--redis_port``): its column is left out and a note says why, and the rest still runs. With
``replicated``, the tables of ``node.bench.replicated_cases`` follow.
"""

from __future__ import annotations

import functools
import json
import statistics
import time
from collections.abc import Callable, Iterator
from typing import Any, Literal, Protocol, TypeVar

import attrs

from node.bench import crowds, expiry, footprint, interest, redis_benchmark, replicated_cases, stall
from node.bench.crowds import (
    CLIENTS,
    IDLE_CLIENTS,
    RESPONDERS,
    ClientsCase,
    FootprintCase,
    RespClientsCase,
)
from node.bench.progress import ProgressBar
from node.bench.scenarios import Spec, run
from node.bench.servers import PUBMESH, PUBMESH_RESP, Flavor, Servers, nats_server, redis_server
from node.bench.streams import READ_COUNT
from node.bench.target import Metric, Outcome, Target, scaled
from node.bench.wire import BenchError

__all__ = [
    "CASES",
    "RESP_CASES",
    "Block",
    "ConvergenceCase",
    "ExpiryCase",
    "LoadCase",
    "Outcome",
    "ResyncCase",
    "StallCase",
    "Target",
    "compare",
    "render",
    "resp_block",
]

RUN_TIMEOUT = 120.0
SIZE = 16
CLUSTER_SIZE = 3


Via = Literal["node", "route", "gateway"]


_UNITS = {
    "fanout": "deliveries/s",
    "resp-fanout": "deliveries/s",
    "resp-xadd": "entries added/s",
    "resp-consume": "entries acked/s",
    "resp-blocked": "XADD/s",
    "resp-set": "SET/s",
    "resp-get": "GET/s",
    "resp-evalsha": "EVALSHA/s",
}


@attrs.frozen
class LoadCase:
    """A ``pubmesh bench`` scenario: on one node, from one cluster node to another (``via`` a
    route), or from one cluster to another (``via`` a gateway)."""

    label: str
    scenario: str
    msgs: int
    subs: int
    via: Via = "node"
    """Where publishers (requesters) and subscribers (the responder) are: together on a single
    node, on the cluster's first and second nodes, or in clusters A and B."""
    baseline: str | None = None
    """The label of a case this one is also shown as a fraction of."""
    share: str | None = None
    """What the fraction's row says, when not just the baseline's label."""
    share_format: str = ".2f"
    patterns: int = 0

    def amount(self, scale: float) -> str:
        noun = "requests" if self.scenario == "reqrep" else "msgs"
        return f"{scaled(self.msgs, scale):,} {noun}"

    def spec(self, target: Target, scale: float) -> Spec:
        if self.via == "node":
            pub, sub = target.node, None
        else:
            pub, sub = (target.cluster if self.via == "route" else target.supercluster)[:2]
        msgs = scaled(self.msgs, scale)
        return Spec(
            self.scenario,
            pub,
            msgs,
            SIZE,
            self.subs,
            timeout=RUN_TIMEOUT,
            sub_endpoint=sub,
            patterns=self.patterns,
        )

    def measure(self, target: Target, scale: float, bar: ProgressBar) -> Outcome:
        return run(self.spec(target, scale), bar)

    def metrics(self) -> list[Metric]:
        if self.scenario == "reqrep":
            return [
                ("latency p50 (µs)", ",.1f", lambda r: r.latency.p50 if r.latency else 0.0),
                ("latency p99 (µs)", ",.1f", lambda r: r.latency.p99 if r.latency else 0.0),
                ("req/s", ",.0f", lambda r: r.rate),
            ]
        unit = _UNITS.get(self.scenario, "msgs/s")
        return [(unit, ",.0f", lambda r: r.rate)]


@attrs.frozen
class ConvergenceCase:
    """Interest convergence between the cluster's first two nodes (``node.bench.interest``)."""

    label: str
    samples: int
    scenario: str = "convergence"

    def amount(self, scale: float) -> str:
        return f"{scaled(self.samples, scale):,} subscriptions"

    def measure(self, target: Target, scale: float, bar: ProgressBar) -> Outcome:
        pub, sub = target.cluster[:2]
        return interest.converge(pub, sub, scaled(self.samples, scale), bar)

    def metrics(self) -> list[Metric]:
        return [
            ("p50 (ms)", ",.2f", lambda c: c.latency.p50 / 1000),
            ("p99 (ms)", ",.2f", lambda c: c.latency.p99 / 1000),
        ]


@attrs.frozen
class ResyncCase:
    """A node joining a node that holds many subscriptions (``node.bench.interest``); the servers
    for it are started afresh each run."""

    label: str
    subs: int
    scenario: str = "resync"

    def amount(self, scale: float) -> str:
        return f"{scaled(self.subs, scale):,} subscriptions"

    def measure(self, target: Target, scale: float, bar: ProgressBar) -> Outcome:
        if target.flavor is None:
            raise BenchError(f"{target.name} cannot be started afresh for {self.label}")
        return interest.resync(target.flavor, scaled(self.subs, scale), bar)

    def metrics(self) -> list[Metric]:
        return [("s from first route (pubmesh target < 2)", ",.2f", lambda r: r.seconds)]


@attrs.frozen
class ExpiryCase:
    """Keys that expire unread, reclaimed by the server's active expiry (``node.bench.expiry``)."""

    label: str
    keys: int
    ttl_ms: int
    scenario: str = "resp-expiry"

    def amount(self, scale: float) -> str:
        return f"{scaled(self.keys, scale):,} keys"

    def measure(self, target: Target, scale: float, bar: ProgressBar) -> Outcome:
        return expiry.reclaim(target.node, scaled(self.keys, scale), self.ttl_ms, bar)

    def metrics(self) -> list[Metric]:
        return [
            (f"s until none left (pubmesh target < {EXPIRY_TARGET:g})", ",.2f", lambda r: r.seconds),
            ("PING p99 meanwhile (ms)", ",.2f", lambda r: r.latency.p99 / 1000),
        ]


@attrs.frozen
class StallCase:
    """A PUBLISH on a long channel while hostile patterns are held, and a PING canary meanwhile
    (``node.bench.stall``)."""

    label: str
    patterns: int
    size: int
    seconds: float
    scenario: str = "resp-stall"

    def amount(self, scale: float) -> str:
        return f"{self.patterns:,} patterns, {self.size // 1024:,} KB channel"

    def measure(self, target: Target, scale: float, bar: ProgressBar) -> Outcome:
        return stall.stall(
            target.node, patterns=self.patterns, size=self.size, seconds=self.seconds * scale
        )

    def metrics(self) -> list[Metric]:
        return [
            ("PUBLISH median (ms)", ",.2f", lambda s: s.publish.p50 / 1000),
            ("PING canary p50 (ms)", ",.2f", lambda s: s.canary.p50 / 1000),
            ("PING canary p99 (ms)", ",.2f", lambda s: s.canary.p99 / 1000),
        ]


Case = (
    LoadCase
    | ConvergenceCase
    | ResyncCase
    | ExpiryCase
    | StallCase
    | ClientsCase
    | RespClientsCase
    | FootprintCase
    | replicated_cases.ReplicatedCase
)

CASES: tuple[Case, ...] = (
    LoadCase("publish only", "pub", 1_500_000, subs=0),
    LoadCase("pub/sub 1:1", "pubsub", 800_000, subs=1),
    LoadCase("fan-out 1→10", "fanout", 200_000, subs=10),
    LoadCase("queue group of 4", "queue", 400_000, subs=4),
    LoadCase("request/reply", "reqrep", 5_000, subs=1),
    ClientsCase(
        f"request/reply, {CLIENTS} requesters at once → queue group of {RESPONDERS}",
        clients=CLIENTS,
        responders=RESPONDERS,
        requests=50_000,
    ),
    LoadCase(
        "pub/sub 1:1 through a route", "pubsub", 800_000, subs=1, via="route", baseline="pub/sub 1:1"
    ),
    LoadCase(
        "pub/sub 1:1 across a gateway",
        "pubsub",
        800_000,
        subs=1,
        via="gateway",
        baseline="pub/sub 1:1",
    ),
    LoadCase("request/reply across a gateway", "reqrep", 5_000, subs=1, via="gateway"),
    ConvergenceCase("interest convergence across a route", samples=200),
    ResyncCase("route resync of a joining node", subs=100_000),
    FootprintCase("memory of idle clients (after CONNECT and PING)", "nats-idle", IDLE_CLIENTS),
)
"""Sized so a pubmesh run takes one to two seconds and a nats-server run still a few tenths."""
PATTERNS = 10_000
PATTERN_MSGS = 10_000
"""Messages of the patterns case, and of the zero-pattern run it is divided by (runs of one size,
so that start-up costs weigh the same in both)."""
BLOCKED_READERS = 1000
"""Readers of one group blocked on the stream of the blocked-readers case."""
RESP_CASES: tuple[Case, ...] = (
    LoadCase("RESP pub/sub 1:1", "resp-pubsub", 800_000, subs=1),
    LoadCase("RESP fan-out 1→10", "resp-fanout", 200_000, subs=10),
    LoadCase("RESP SET, pipelined", "resp-set", 300_000, subs=0),
    LoadCase("RESP GET, pipelined", "resp-get", 300_000, subs=0),
    LoadCase("RESP EVALSHA (a script that SETs), pipelined", "resp-evalsha", 50_000, subs=0),
    LoadCase("RESP XADD, pipelined", "resp-xadd", 300_000, subs=0),
    LoadCase("RESP XREADGROUP+XACK, 1 consumer", "resp-consume", 300_000, subs=1),
    LoadCase(
        f"RESP XADD, one at a time, to {BLOCKED_READERS:,} blocked XREADGROUP readers",
        "resp-blocked",
        20_000,
        subs=BLOCKED_READERS,
    ),
    ExpiryCase("RESP keys expiring unread, TTL 100 ms", keys=100_000, ttl_ms=100),
    RespClientsCase(f"RESP {CLIENTS} clients, one command in flight each", CLIENTS, 1, requests=100_000),
    RespClientsCase(
        f"RESP {CLIENTS} clients, 16 commands in flight each (-P 16)", CLIENTS, 16, requests=100_000
    ),
    FootprintCase("RESP memory of idle clients (after one PING)", "resp-idle", IDLE_CLIENTS),
    FootprintCase(
        "RESP memory of readers blocked in XREADGROUP … BLOCK 0", "resp-blocked", IDLE_CLIENTS
    ),
    LoadCase("RESP pub/sub 1:1, no patterns", "resp-pubsub", PATTERN_MSGS, subs=1),
    LoadCase(
        f"RESP publish with {PATTERNS:,} non-matching patterns",
        "resp-patterns",
        PATTERN_MSGS,
        subs=1,
        patterns=PATTERNS,
        baseline="RESP pub/sub 1:1, no patterns",
        share="÷ zero-pattern rate, same size",
        share_format=".4f",
    ),
    StallCase(
        "RESP PUBLISH while hostile patterns are held",
        patterns=stall.PATTERNS,
        size=stall.SIZE,
        seconds=stall.SECONDS,
    ),
)
"""The patterns cases come last: once a client has held that many patterns, redis-server 7.0
publishes many times slower even after it has gone (the emptied pattern table keeps its size and is
walked on every PUBLISH), which would spoil any case run after them. The first is sized for
redis-server, which tries every pattern on each PUBLISH: a few thousand messages a second. In the
second, one PUBLISH takes redis-server seconds, during which it answers nobody."""
STREAMS_TARGET = 0.3
"""What the stream rows should reach, as a fraction of redis-server's (pubmesh's target)."""
EXPIRY_TARGET = 2.0
"""Seconds within which pubmesh should have reclaimed the expiry case's keys."""
BLOCKED_TARGET = 0.5
"""What the blocked-readers row should reach, as a fraction of redis-server's (pubmesh's target)."""
BASELINE_TARGET = 0.5
"""What a case with a baseline should reach, as a fraction of it (pubmesh's target)."""
ROUTES_NOTE = (
    f"Through a route: publisher on one node of a {CLUSTER_SIZE}-node cluster, subscriber on"
    " another. Across a gateway: publisher (requester) in one single-node cluster, subscriber"
    " (responder) in another."
)
RESP_NOTE = (
    f"RESP2 over one connection per client; the subscriber of the patterns case holds {PATTERNS:,}"
    " PSUBSCRIBE patterns that never match the channel, besides its SUBSCRIBE. SET, GET and"
    " EVALSHA (of a loaded script that SETs the key) work one fresh key per run, pipelined as"
    " PUBLISH and XADD are (256 KiB of commands per write, at most 8 such unanswered)."
    " Streams: a fresh"
    " stream per run; the consumer drains one filled before the clock starts, reading"
    f" {READ_COUNT:,} entries per XREADGROUP and acknowledging them in the next round trip. In the"
    f" blocked-readers case, {BLOCKED_READERS:,} connections loop on XREADGROUP COUNT 1 BLOCK 0 (each"
    " waits again once given an entry) while one writer sends XADDs, each after the last one's"
    f" reply; pubmesh's target there is ≥ {BLOCKED_TARGET} of redis-server's rate. Both"
    " servers keep keys in memory only (redis-server with appendonly no, pubmesh without a journal);"
    f" pubmesh's target for the stream rows is ≥ {STREAMS_TARGET} of redis-server's rate. Expiry:"
    " the keys are made, then given their TTL in one MULTI/EXEC; the time runs from EXEC's reply"
    " until INFO keyspace shows none, while a canary connection PINGs about once a millisecond."
    f" Hostile patterns: {stall.PATTERNS:,} patterns '*' + {stall.QUESTION_MARKS} '?' +"
    " 'b*[a-z<i>][a-z<i>]' held by one client, PUBLISH on a channel without 'b' by another, one"
    f" after the other for {stall.SECONDS:g} s (at least one), while a third sends PING every"
    f" {stall.CANARY_INTERVAL * 1000:g} ms."
)

Results = dict[tuple[str, str], list[Outcome]]


@attrs.frozen
class Block:
    """One table of the comparison: its cases, the servers that ran them, and notes on it (such as
    why a server is missing)."""

    title: str
    cases: tuple[Case, ...]
    versions: dict[str, str]
    """Each server's name and version, in the order of the table's columns (pubmesh first)."""
    notes: tuple[str, ...] = ()


def compare(
    *,
    runs: int = 3,
    scale: float = 1.0,
    as_json: bool = False,
    resp: bool = False,
    only: str | None = None,
    replicated: bool = False,
) -> int:
    """Run every case against pubmesh (and nats-server, when it is on PATH); with ``resp``, the RESP
    cases against pubmesh's RESP listener and redis-server too; with ``replicated``, the replicated
    keys' cases. Print the tables. With ``only``,
    just the cases whose label contains it (ignoring case), and only the servers they need.

    Returns the exit status: 1 if any run failed its check.
    """
    if runs < 1 or scale <= 0:
        raise BenchError("--runs and --scale must be positive")
    footprint.raise_fd_limit()  # (before any server starts: they inherit it)
    nats_cases, resp_cases = _chosen(CASES, only), _chosen(RESP_CASES, only) if resp else ()
    replicated_chosen = _chosen(replicated_cases.CASES, only) if replicated else ()
    if not nats_cases and not resp_cases and not replicated_chosen:
        raise BenchError(f"no case's label contains {only!r}")
    started = time.monotonic()
    results: Results = {}
    with Servers() as servers:
        plans = [_nats_block(servers)] if nats_cases else []
        if resp_cases:
            plans.append(resp_block(servers))
        plans = [(attrs.evolve(block, cases=_chosen(block.cases, only)), t) for block, t in plans]
        if replicated_chosen:
            chosen = functools.partial(_chosen, only=only)
            for title, cases, targets, notes in replicated_cases.plans(servers, chosen):
                versions = {t.name: t.version for t in targets}
                plans.append((Block(title, cases, versions, notes), targets))
        for block, targets in plans:
            for case in block.cases:
                for i in range(runs):
                    for target in targets:
                        label = f"{case.label} on {target.name} ({i + 1}/{runs})"
                        with ProgressBar.on_terminal(label) as bar:
                            outcome = case.measure(target, scale, bar)
                        results.setdefault((case.label, target.name), []).append(outcome)
    blocks = [
        attrs.evolve(block, notes=block.notes + crowds.remarks(block.cases, block.versions, results))
        for block, _ in plans
    ]
    elapsed = time.monotonic() - started
    if as_json:
        print(json.dumps(_as_json(results, blocks, runs, scale)))
    else:
        print(render(results, blocks, runs, scale, elapsed))
    return 0 if all(r.ok for rs in results.values() for r in rs) else 1


class _Labelled(Protocol):
    @property
    def label(self) -> str: ...


_C = TypeVar("_C", bound=_Labelled)


def _chosen(cases: tuple[_C, ...], only: str | None) -> tuple[_C, ...]:
    if only is None:
        return cases
    return tuple(case for case in cases if only.lower() in case.label.lower())


def _nats_block(servers: Servers) -> tuple[Block, list[Target]]:
    nats = nats_server()
    flavors = [PUBMESH] if nats is None else [PUBMESH, nats]
    targets = [_target(servers, flavor) for flavor in flavors]
    notes = [ROUTES_NOTE, crowds.CLIENTS_NOTE, crowds.MEMORY_NOTE]
    if nats is None:
        notes.append("nats-server was not found on PATH: only pubmesh was measured.")
    versions = {t.name: t.version for t in targets}
    return Block("NATS", CASES, versions, tuple(notes)), targets


def resp_block(servers: Servers) -> tuple[Block, list[Target]]:
    """The RESP servers that could be started; a note for each that could not."""
    targets: list[Target] = []
    notes = [RESP_NOTE, crowds.RESP_CLIENTS_NOTE, crowds.MEMORY_NOTE]
    cases = RESP_CASES
    if redis_benchmark.program() is None:
        notes.append("redis-benchmark was not found on PATH: the many-clients rows are left out.")
        cases = tuple(case for case in cases if not isinstance(case, RespClientsCase))
    redis = redis_server()
    for flavor in (PUBMESH_RESP, redis):
        if flavor is None:
            notes.append("redis-server was not found on PATH: its RESP rows are skipped.")
            continue
        try:
            server = servers.start_resp(flavor)
        except BenchError as exc:
            notes.append(
                f"{flavor.name} did not serve RESP when started with {flavor.port_flag}:"
                f" its RESP rows are skipped ({exc})."
            )
            continue
        targets.append(Target(flavor.name, server.version, None, server.endpoint, resp_flavor=flavor))
    versions = {t.name: t.version for t in targets}
    return Block("RESP", cases if targets else (), versions, tuple(notes)), targets


def _target(servers: Servers, flavor: Flavor) -> Target:
    node = servers.start(flavor)
    cluster = servers.cluster(flavor, CLUSTER_SIZE)
    endpoints = tuple(n.endpoint for n in cluster)
    clusters = tuple(n.endpoint for n in servers.supercluster(flavor))
    return Target(flavor.name, node.version, flavor, node.endpoint, endpoints, clusters)


def _median(outcomes: list[Outcome], metric: Callable[[Any], float]) -> float | None:
    """The median over the runs, or None when any run failed its check (its figure means nothing)."""
    if not all(r.ok for r in outcomes):
        return None
    return statistics.median(metric(r) for r in outcomes)


@attrs.frozen
class _Row:
    case: Case
    what: str
    fmt: str
    values: list[float | None]
    """One per server, in the order of the table's columns."""
    comparable: bool = True
    """Whether the servers' figures measure the same thing (a ratio between them means something)."""


def _rows(results: Results, block: Block) -> Iterator[_Row]:
    first: dict[str, list[float | None]] = {}
    for case in block.cases:
        for what, fmt, metric in case.metrics():
            values = [_median(results[case.label, s], metric) for s in block.versions]
            first.setdefault(case.label, values)
            yield _Row(case, what, fmt, values)
        if isinstance(case, LoadCase) and case.baseline in first:
            base_values = first[case.baseline]
            shares = [
                mine / base if mine is not None and base else None
                for mine, base in zip(first[case.label], base_values, strict=True)
            ]
            what = case.share or f"÷ {case.baseline} (pubmesh target ≥ {BASELINE_TARGET})"
            yield _Row(case, what, case.share_format, shares, comparable=False)


def render(
    results: Results,
    blocks: list[Block],
    runs: int,
    scale: float,
    elapsed: float,
) -> str:
    """The markdown tables, one per block."""
    lines = [
        f"On 127.0.0.1: {SIZE} B payloads, median of {runs} run{'s' * (runs != 1)} each"
        f" ({elapsed:.0f} s in all)."
    ]
    ratios = False
    for block in blocks:
        lines += ["", *_table(results, block, scale)]
        ratios = ratios or len(block.versions) == 2
    if ratios:
        lines += [
            "",
            "Ratio above 1: pubmesh has more throughput, or (latency and time rows) takes longer.",
        ]
    failures = [
        f"- {server}, {label}: {r.failure()}"
        for (label, server), rs in results.items()
        for r in rs
        if not r.ok
    ]
    if failures:
        lines += ["", "Runs that failed their check (shown as “failed”):", *failures]
    elif results:
        lines += ["", "Check: every run received exactly the messages it expected."]
    return "\n".join(lines)


def _table(results: Results, block: Block, scale: float) -> list[str]:
    servers = list(block.versions)
    both = len(servers) == 2
    names = " vs ".join(f"{name} {version}".strip() for name, version in block.versions.items())
    lines = [f"{block.title}: {names or 'no server could be measured'}"]
    if block.cases:
        lines += [
            "",
            "| scenario | " + " | ".join(servers) + (f" | {' / '.join(servers)} |" if both else " |"),
            "|---|" + "---:|" * (len(servers) + both),
        ]
    for row in _rows(results, block):
        cells = ["failed" if v is None else format(v, row.fmt) for v in row.values]
        if both:
            mine, theirs = row.values
            cells.append(
                _ratio(mine / theirs) if row.comparable and mine is not None and theirs else "—"
            )
        label = f"{row.case.label}, {row.case.amount(scale)}: {row.what}"
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return [*lines, "", *block.notes]


def _ratio(ratio: float) -> str:
    """Two decimals, or one significant digit below 0.01 (so that a ratio never reads 0.00)."""
    return f"{ratio:.2f}" if ratio >= 0.01 or ratio == 0 else f"{ratio:.1g}"


def _as_json(results: Results, blocks: list[Block], runs: int, scale: float) -> dict[str, Any]:
    rows = []
    for block in blocks:
        for row in _rows(results, block):
            out: dict[str, Any] = {
                "block": block.title,
                "case": row.case.label,
                "scenario": row.case.scenario,
                "metric": row.what,
            }
            out.update(zip(block.versions, row.values, strict=True))
            rows.append(out)
    runs_out = [{"server": server, **r.as_dict()} for (_, server), rs in results.items() for r in rs]
    return {
        "servers": {block.title: block.versions for block in blocks},
        "notes": {block.title: list(block.notes) for block in blocks},
        "runs": runs,
        "scale": scale,
        "ok": all(r["ok"] for r in runs_out),
        "rows": rows,
        "results": runs_out,
    }
