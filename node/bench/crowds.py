"""The ``pubmesh bench compare`` cases of many clients at once: request rates and latencies under
many connections (``node.bench.clients`` for NATS, ``redis-benchmark`` for RESP), and the memory a
server spends on each connection (``node.bench.footprint``).

A case may say something about its runs that belongs under the table rather than in a cell (how
much CPU the load generator itself used): its ``remark``, given each server's outcomes.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import attrs

from node.bench import clients, footprint, redis_benchmark
from node.bench.progress import ProgressBar
from node.bench.servers import Servers
from node.bench.target import Metric, Outcome, Target, scaled
from node.bench.wire import BenchError

__all__ = ["ClientsCase", "FootprintCase", "RespClientsCase", "remarks"]

RUN_TIMEOUT = 300.0
FOOTPRINT_TARGET = 3.0
"""What pubmesh's memory per client should stay within, as a multiple of the reference server's."""
CLIENTS = 50
"""Concurrent clients of the many-clients cases."""
RESPONDERS = 4
IDLE_CLIENTS = 2000
"""Clients of the memory cases."""
CLIENTS_NOTE = (
    f"Many requesters: {CLIENTS} connections, each sending its next request once its reply"
    f" arrived, to a queue group of {RESPONDERS} responders that echo the"
    f" {clients.Crowd().size} B payload; all of them in one load-generator thread (raw sockets,"
    " one selectors loop)."
)
MEMORY_NOTE = (
    "Memory: the server's RSS growth (VmRSS) while the clients are connected, divided by their"
    f" number; each run on a server started for it, after {footprint.WARMUP} clients of the same"
    f" kind came and went, RSS read once the clients have been idle {footprint.IDLE:g} s (blocked"
    " readers: since the server listed them all blocked; the figure includes their connection)."
    f" pubmesh's target: ≤ {FOOTPRINT_TARGET:g}x the reference server's."
)
RESP_CLIENTS_NOTE = (
    f"Many clients: redis-benchmark --csv, -c {CLIENTS}, one custom command per run (PING;"
    " PUBLISH to a channel nobody holds; XADD to a fresh stream; XADD-KEYS: XADD to one of"
    f" {redis_benchmark.MANY_KEYS:,} fresh streams at random; SET then GET of a fresh key;"
    f" {redis_benchmark.Load().size} B values), without and with -P 16. pubmesh's targets:"
    " ≥ 0.6x redis-server's req/s, p50 ≤ 2x, p99 ≤ 3x."
)


def _shares(outcomes: Mapping[str, Sequence[Any]], share: Callable[[Any], float]) -> str:
    """Each server's median ``share`` of a core over its runs that passed, as a phrase."""
    parts = []
    for server, runs in outcomes.items():
        passed = [share(r) for r in runs if r.ok]
        if passed:
            parts.append(f"{statistics.median(passed):.0%} against {server}")
    return ", ".join(parts) or "(no run passed)"


@attrs.frozen
class ClientsCase:
    """Requesters, each with one request in flight, against a queue group of responders."""

    label: str
    clients: int
    responders: int
    requests: int
    scenario: str = "clients"

    def amount(self, scale: float) -> str:
        return f"{scaled(self.requests, scale):,} requests"

    def measure(self, target: Target, scale: float, bar: ProgressBar) -> Outcome:
        load = clients.Crowd(
            self.clients, self.responders, scaled(self.requests, scale), timeout=RUN_TIMEOUT
        )
        return clients.crowd(target.node, load)

    def metrics(self) -> list[Metric]:
        return [
            ("req/s", ",.0f", lambda r: r.rate),
            ("latency p50 (µs)", ",.1f", lambda r: r.latency.p50),
            ("latency p99 (µs)", ",.1f", lambda r: r.latency.p99),
        ]

    def remark(self, outcomes: Mapping[str, Sequence[Any]]) -> str:
        share = _shares(outcomes, lambda r: r.generator_share)
        return (
            f"{self.label}: the load generator (the requesters and responders, one Python thread"
            f" on one selectors loop) used, of one core (median CPU time over wall time), {share}."
        )


def _figure(command: str, field: str) -> Callable[[Any], float]:
    def read(sweep: Any) -> float:
        value: float = getattr(sweep.get(command), field)
        return value

    return read


@attrs.frozen
class RespClientsCase:
    """``redis-benchmark``: each command of ``redis_benchmark.COMMANDS`` from many clients."""

    label: str
    clients: int
    pipeline: int
    requests: int
    scenario: str = "resp-clients"

    def amount(self, scale: float) -> str:
        return f"{scaled(self.requests, scale):,} requests each"

    def measure(self, target: Target, scale: float, bar: ProgressBar) -> Outcome:
        load = redis_benchmark.Load(self.clients, scaled(self.requests, scale), self.pipeline)
        return redis_benchmark.sweep(target.node, load)

    def metrics(self) -> list[Metric]:
        rows: list[Metric] = []
        for command in redis_benchmark.COMMANDS:
            rows += [
                (f"{command} req/s", ",.0f", _figure(command, "rps")),
                (f"{command} p50 (ms)", ",.3f", _figure(command, "p50_ms")),
                (f"{command} p99 (ms)", ",.3f", _figure(command, "p99_ms")),
            ]
        return rows

    def remark(self, outcomes: Mapping[str, Sequence[Any]]) -> str:
        share = _shares(outcomes, lambda r: r.tool_share)
        return f"{self.label}: redis-benchmark itself used, of one core, {share}."


@attrs.frozen
class FootprintCase:
    """RSS growth per client of one kind, on a server started afresh for each run."""

    label: str
    kind: footprint.Kind
    connections: int
    scenario: str = "memory"

    def amount(self, scale: float) -> str:
        return f"{scaled(self.connections, scale):,} clients"

    def measure(self, target: Target, scale: float, bar: ProgressBar) -> Outcome:
        footprint.raise_fd_limit()  # (before the server starts: it inherits the limit)
        with Servers() as servers:
            if self.kind == "nats-idle" and target.flavor is not None:
                server = servers.start(target.flavor)
            elif self.kind != "nats-idle" and target.resp_flavor is not None:
                server = servers.start_resp(target.resp_flavor)
            else:
                raise BenchError(f"{target.name} cannot be started afresh for {self.label}")
            count = scaled(self.connections, scale)
            return footprint.measure(server.endpoint, server.proc.pid, self.kind, count)

    def metrics(self) -> list[Metric]:
        what = f"bytes per client (pubmesh target ≤ {FOOTPRINT_TARGET:g}x)"
        return [(what, ",.0f", lambda f: f.per_connection)]


def remarks(
    cases: Sequence[Any], servers: Iterable[str], results: Mapping[tuple[str, str], Sequence[Any]]
) -> tuple[str, ...]:
    """The remarks of those ``cases`` that make one, from ``results`` by (case label, server)."""
    names = list(servers)
    return tuple(
        case.remark({s: results.get((case.label, s), ()) for s in names})
        for case in cases
        if isinstance(case, ClientsCase | RespClientsCase)
    )
