"""``pubmesh bench SCENARIO [options]``, the cluster measurements, and ``pubmesh bench compare``.

The options follow ``nats bench`` where it has one (``--msgs``, ``--size``, ``--pubs``, ``--subs``),
so numbers from either tool are set up the same way; the ``resp-`` scenarios take the same options
against a Redis-protocol server (``resp-set``, ``resp-get`` and ``resp-evalsha`` work one key,
made unique per run, with ``--pubs`` clients; for ``resp-xadd``, ``resp-consume`` and ``resp-blocked``,
``--subject`` names the stream, made unique per run, and ``--pubs`` / ``--subs`` count adders /
consumers or blocked readers). ``clients``, ``resp-clients`` and ``memory`` measure many clients
at once: requesters against a queue group (``node.bench.clients``), ``redis-benchmark`` runs
(``node.bench.redis_benchmark``), and a server's memory per client (``node.bench.footprint``). Exit
status:
0 when every message was counted, 1 when the check failed, 2 when the run could not be made at all.
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

from node.bench import clients, expiry, footprint, keys, redis_benchmark, stall
from node.bench.compare import compare
from node.bench.interest import Convergence, Resync, converge, resync
from node.bench.progress import ProgressBar
from node.bench.scenarios import DEFAULT_TIMEOUT, SCENARIOS, Result, Scenario, Spec, run
from node.bench.servers import PUBMESH, nats_server
from node.bench.wire import BenchError, parse_url

__all__ = ["describe", "describe_convergence", "describe_reclaim", "describe_resync", "main"]

DEFAULT_URLS = {"nats": "nats://127.0.0.1:4222", "redis": "redis://127.0.0.1:6379"}
DEFAULT_URL = DEFAULT_URLS["nats"]


def _parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(
        prog="pubmesh bench",
        description="Load-test a NATS server (pubmesh or nats-server), or compare the two.",
    )
    commands = p.add_subparsers(dest="command", required=True)
    defaults = argparse.ArgumentDefaultsHelpFormatter
    for scenario in SCENARIOS.values():
        command = commands.add_parser(scenario.name, help=scenario.summary, formatter_class=defaults)
        _scenario_options(command, scenario)
    v = commands.add_parser(
        "convergence",
        help="how soon a subscription on one server is served by a publish on another",
        formatter_class=defaults,
    )
    v.add_argument("--url", "--server", dest="url", default=DEFAULT_URL, help="publishers' server URL")
    v.add_argument("--sub-url", required=True, help="subscriber's server URL (another cluster node)")
    v.add_argument("--samples", type=int, default=200, help="subscriptions, each on a fresh subject")
    v.add_argument("--json", action="store_true", help="print the result as JSON")
    r = commands.add_parser(
        "resync",
        help="start two nodes on 127.0.0.1; time how soon the second learns the first's subscriptions",
        formatter_class=defaults,
    )
    r.add_argument("--subs", type=int, default=100_000, help="subscriptions the first node holds")
    r.add_argument("--nats-server", action="store_true", help="measure nats-server (from PATH) instead")
    r.add_argument("--json", action="store_true", help="print the result as JSON")
    e = commands.add_parser(
        "resp-expiry",
        help="how soon a Redis-protocol server reclaims expired keys nobody reads",
        formatter_class=defaults,
    )
    e.description = (
        f"Make --keys streams in database {expiry.DB} (which must be empty), give them all a TTL of"
        " --ttl ms in one transaction, and time how long until INFO keyspace shows none, with a"
        " PING canary's round trips meanwhile."
    )
    e.add_argument("--url", "--server", dest="url", default=DEFAULT_URLS["redis"], help="server URL")
    e.add_argument("--keys", type=int, default=100_000, help="keys made")
    e.add_argument("--ttl", type=int, default=100, help="their TTL, in milliseconds")
    e.add_argument("--json", action="store_true", help="print the result as JSON")
    h = commands.add_parser(
        "resp-stall",
        help="RESP: PUBLISH on a long channel while hostile patterns are held, and a PING canary",
        formatter_class=defaults,
    )
    h.add_argument("--url", "--server", dest="url", default=DEFAULT_URLS["redis"], help="server URL")
    h.add_argument("--patterns", type=int, default=stall.PATTERNS, help="patterns held")
    h.add_argument("--size", type=int, default=stall.SIZE, help="bytes of the channel")
    h.add_argument(
        "--seconds", type=float, default=stall.SECONDS, help="go on publishing this long (≥ 1 PUBLISH)"
    )
    h.add_argument("--json", action="store_true", help="print the result as JSON")
    _crowd_parsers(commands, defaults)
    q = commands.add_parser(
        "resp-replicated",
        help="start 3-node pubmesh clusters with replicated keys (replicas 3 and 1) and measure XADD,"
        " failover and catch-up; JetStream R3 and R1 beside them if nats-server is on PATH",
        formatter_class=defaults,
    )
    q.add_argument("--runs", type=int, default=3, help="runs per measurement; the median is shown")
    q.add_argument("--scale", type=float, default=1.0, help="multiply every run's count (e.g. 0.1)")
    q.add_argument("--json", action="store_true", help="print the rows as JSON")
    q.add_argument("--only", metavar="WORDS", help="run only the cases whose label contains these words")
    c = commands.add_parser(
        "compare",
        help="start pubmesh and nats-server on 127.0.0.1 and run the same scenarios against both",
        formatter_class=defaults,
    )
    c.add_argument(
        "--resp",
        action="store_true",
        help="also start pubmesh with --redis_port and redis-server, and compare them over RESP",
    )
    c.add_argument(
        "--replicated",
        action="store_true",
        help="also start 3-node clusters with replicated keys (and JetStream's), as resp-replicated",
    )
    c.add_argument("--runs", type=int, default=3, help="runs per measurement; the median is shown")
    c.add_argument(
        "--scale", type=float, default=1.0, help="multiply every run's message count (e.g. 0.1)"
    )
    c.add_argument("--json", action="store_true", help="print the rows as JSON")
    c.add_argument(
        "--only",
        metavar="WORDS",
        help="run only the cases whose label contains these words (e.g. 'hostile patterns')",
    )
    return p


def _crowd_parsers(commands: Any, defaults: type[argparse.HelpFormatter]) -> None:
    """The many-clients measurements: ``clients``, ``resp-clients`` and ``memory``."""
    n = commands.add_parser(
        "clients",
        help="many NATS requesters at once, one request in flight each, against a queue group",
        formatter_class=defaults,
    )
    n.add_argument("--url", "--server", dest="url", default=DEFAULT_URLS["nats"], help="server URL")
    n.add_argument("--clients", type=int, default=50, help="requesters (connections)")
    n.add_argument("--responders", type=int, default=4, help="members of the responders' group")
    n.add_argument("--requests", type=int, default=50_000, help="requests in all")
    n.add_argument("--size", type=int, default=16, help="payload bytes")
    n.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds the run may take")
    n.add_argument("--json", action="store_true", help="print the result as JSON")
    r = commands.add_parser(
        "resp-clients",
        help="RESP: many clients at once, measured by redis-benchmark (which must be on PATH)",
        formatter_class=defaults,
    )
    r.add_argument("--url", "--server", dest="url", default=DEFAULT_URLS["redis"], help="server URL")
    r.add_argument("--clients", type=int, default=50, help="connections (-c)")
    r.add_argument("--requests", type=int, default=100_000, help="requests per command (-n)")
    r.add_argument("--pipeline", "-P", type=int, default=1, help="commands in flight per client")
    r.add_argument("--size", type=int, default=3, help="bytes of PUBLISH, XADD and SET values")
    r.add_argument(
        "--commands",
        default=",".join(redis_benchmark.COMMANDS),
        help="which to measure, comma-separated",
    )
    r.add_argument("--json", action="store_true", help="print the result as JSON")
    m = commands.add_parser(
        "memory",
        help="how much RSS a server on this machine gains per idle client (or blocked reader)",
        formatter_class=defaults,
    )
    m.add_argument("--url", "--server", dest="url", default=DEFAULT_URLS["nats"], help="server URL")
    m.add_argument("--pid", type=int, required=True, help="the server's process id")
    m.add_argument("--connections", type=int, default=2000, help="clients connected")
    m.add_argument(
        "--blocked",
        action="store_true",
        help="RESP: readers blocked in XREADGROUP ... BLOCK 0 instead of idle clients",
    )
    m.add_argument("--json", action="store_true", help="print the result as JSON")


def _crowd(args: argparse.Namespace) -> int:
    """Run ``clients``, ``resp-clients`` or ``memory``, print it, say whether it passed."""
    outcome: clients.CrowdRun | redis_benchmark.Sweep | footprint.Footprint
    if args.command == "clients":
        load = clients.Crowd(args.clients, args.responders, args.requests, args.size, args.timeout)
        outcome = clients.crowd(parse_url(args.url), load)
        text = clients.describe(outcome)
    elif args.command == "resp-clients":
        load_ = redis_benchmark.Load(args.clients, args.requests, args.pipeline, args.size)
        names = [n for n in args.commands.split(",") if n]
        outcome = redis_benchmark.sweep(parse_url(args.url, "redis"), load_, names)
        text = redis_benchmark.describe(outcome)
    else:
        endpoint = parse_url(args.url)
        kind: footprint.Kind = "nats-idle"
        if endpoint.scheme == "redis":
            kind = "resp-blocked" if args.blocked else "resp-idle"
        elif args.blocked:
            raise BenchError("--blocked needs a redis:// URL")
        outcome = footprint.measure(endpoint, args.pid, kind, args.connections)
        text = footprint.describe(outcome)
    print(json.dumps(outcome.as_dict()) if args.json else text)
    return 0 if outcome.ok else 1


def _scenario_options(p: argparse.ArgumentParser, scenario: Scenario) -> None:
    p.description = scenario.summary
    url = DEFAULT_URLS[scenario.protocol]
    p.add_argument("--url", "--server", dest="url", default=url, help="server URL")
    if scenario.protocol == "nats":
        p.add_argument(
            "--sub-url",
            help="the subscribers' (responder's) server, if not --url: another node of its cluster",
        )
    p.add_argument("--msgs", type=int, default=scenario.msgs, help="messages (requests) in total")
    p.add_argument("--size", type=int, default=16, help="payload bytes")
    p.add_argument("--subs", type=int, default=scenario.subs, help="subscribers")
    p.add_argument("--pubs", type=int, default=1, help="publishers; messages are split among them")
    p.add_argument("--subject", "--channel", default="bench", help="subject (channel) to publish on")
    if scenario.patterns:
        p.add_argument(
            "--patterns",
            type=int,
            default=scenario.patterns,
            help="patterns that never match, held by each subscriber besides the channel",
        )
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds the run may take")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "compare":
            return compare(
                runs=args.runs,
                scale=args.scale,
                as_json=args.json,
                resp=args.resp,
                only=args.only,
                replicated=args.replicated,
            )
        if args.command == "resp-replicated":
            only = args.only or "replicated"  # (every replicated case's label says so, no other)
            return compare(
                runs=args.runs, scale=args.scale, as_json=args.json, only=only, replicated=True
            )
        if args.command in ("convergence", "resync"):
            return _interest(args)
        if args.command == "resp-expiry":
            return _reclaim(args)
        if args.command == "resp-stall":
            return _stall(args)
        if args.command in ("clients", "resp-clients", "memory"):
            return _crowd(args)
        sub_url = getattr(args, "sub_url", None)
        spec = Spec(
            args.command,
            parse_url(args.url, SCENARIOS[args.command].protocol),
            msgs=args.msgs,
            size=args.size,
            subs=args.subs,
            pubs=args.pubs,
            subject=args.subject,
            timeout=args.timeout,
            sub_endpoint=parse_url(sub_url) if sub_url else None,
            patterns=getattr(args, "patterns", 0),
        )
        with ProgressBar.on_terminal(args.command) as bar:
            result = run(spec, bar)
    except BenchError as exc:
        print(f"pubmesh bench: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130  # workers and servers are already stopped by then
    print(json.dumps(result.as_dict()) if args.json else describe(result))
    return 0 if result.ok else 1


def _interest(args: argparse.Namespace) -> int:
    """Run the convergence or resync measurement, print it, and say whether it passed its check."""
    outcome: Convergence | Resync
    with ProgressBar.on_terminal(args.command) as bar:
        if args.command == "convergence":
            outcome = converge(parse_url(args.url), parse_url(args.sub_url), args.samples, bar)
        else:
            flavor = nats_server() if args.nats_server else PUBMESH
            if flavor is None:
                raise BenchError("nats-server was not found on PATH")
            outcome = resync(flavor, args.subs, bar)
    if args.json:
        print(json.dumps(outcome.as_dict()))
    elif isinstance(outcome, Convergence):
        print(describe_convergence(outcome))
    else:
        print(describe_resync(outcome))
    return 0 if outcome.ok else 1


def _reclaim(args: argparse.Namespace) -> int:
    with ProgressBar.on_terminal(args.command) as bar:
        outcome = expiry.reclaim(parse_url(args.url, "redis"), args.keys, args.ttl, bar)
    print(json.dumps(outcome.as_dict()) if args.json else describe_reclaim(outcome))
    return 0 if outcome.ok else 1


def _stall(args: argparse.Namespace) -> int:
    endpoint = parse_url(args.url, "redis")
    outcome = stall.stall(endpoint, patterns=args.patterns, size=args.size, seconds=args.seconds)
    print(json.dumps(outcome.as_dict()) if args.json else stall.describe(outcome))
    return 0 if outcome.ok else 1


_UNITS = {
    "resp-xadd": "entries added/s",
    "resp-consume": "entries acked/s",
    "resp-blocked": "XADD/s, each given to a blocked reader",
    "resp-set": "SET/s",
    "resp-get": "GET/s",
    "resp-evalsha": "EVALSHA/s",
}


def describe(result: Result) -> str:
    """The human-readable report of one run."""
    spec = result.spec
    queue = SCENARIOS[spec.scenario].queue
    if spec.scenario == "reqrep":
        who, what = "1 requester -> 1 responder", f"{spec.msgs:,} requests"
    elif spec.scenario == "resp-consume":
        who, what = _plural(spec.subs, "consumer") + " of one group", f"{spec.msgs:,} entries"
    elif spec.scenario == "resp-blocked":
        who = "1 writer -> " + _plural(spec.subs, "blocked reader") + " of one group"
        what = f"{spec.msgs:,} entries"
    elif spec.scenario == "resp-xadd":
        who, what = _plural(spec.pubs, "adder"), f"{spec.msgs:,} entries"
    elif spec.scenario in keys.KEY_SCENARIOS:
        verb = spec.scenario.removeprefix("resp-").upper()
        who, what = _plural(spec.pubs, "client"), f"{spec.msgs:,} {verb}s"
    else:
        who, what = _plural(spec.pubs, "publisher"), f"{spec.msgs:,} msgs"
        if spec.subs:
            who += " -> " + _plural(spec.subs, "queue member" if queue else "subscriber")
    if spec.patterns:
        who += f" holding {spec.patterns:,} patterns that never match"
    where = spec.endpoint.url
    if spec.across and spec.sub_endpoint is not None:
        where += f" -> {spec.sub_endpoint.url}"
    lines = [f"{spec.scenario}: {who}, {what} of {spec.size} B on {spec.subject!r} at {where}"]
    if result.latency is not None:
        lat = result.latency
        lines.append(
            f"  latency: p50 {lat.p50:,.1f} µs  p99 {lat.p99:,.1f} µs  mean {lat.mean:,.1f} µs"
            f"   {result.rate:,.0f} req/s"
        )
    else:
        unit = _UNITS.get(spec.scenario, "deliveries/s" if spec.subs > 1 and not queue else "msgs/s")
        lines.append(
            f"  {result.rate:,.0f} {unit}  {result.megabytes_per_second:,.2f} MB/s"
            f"  ({result.received:,} in {result.seconds:.3f} s)"
        )
        if queue:
            lines.append("  members: " + " / ".join(f"{n:,}" for n in result.per_worker))
    noun = {
        "reqrep": "replies",
        "pub": "confirmed",
        "resp-xadd": "added",
        "resp-consume": "acked",
        "resp-blocked": "given",
        "resp-set": "answered",
        "resp-get": "answered",
        "resp-evalsha": "answered",
    }.get(spec.scenario, "received")
    relation = "==" if result.received == result.expected else "!="
    verdict = "OK" if result.ok else "FAILED"
    check = f"  check: {noun} {result.received:,} {relation} expected {result.expected:,}  {verdict}"
    lines.append(check + "".join(f"\n  error: {e}" for e in result.errors))
    return "\n".join(lines)


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"


def describe_convergence(outcome: Convergence) -> str:
    lat = outcome.latency
    lines = [
        f"convergence: SUB at {outcome.sub.url}, publishes at {outcome.pub.url},"
        f" {outcome.requested:,} fresh subjects",
        f"  first delivery after the SUB: p50 {lat.p50 / 1000:,.2f} ms  p99 {lat.p99 / 1000:,.2f} ms"
        f"  mean {lat.mean / 1000:,.2f} ms",
    ]
    return "\n".join([*lines, _check(outcome.ok, f"{len(outcome.samples_ns):,} samples", outcome.error)])


def describe_resync(outcome: Resync) -> str:
    lines = [
        f"resync: a {outcome.server} node joins one holding {outcome.subs:,} subscriptions",
        f"  all known {outcome.seconds:.3f} s after its first route connection"
        f" ({outcome.since_start:.3f} s after it was started;"
        f" confirmed by the sweep at {outcome.confirmed:.3f} s)",
    ]
    swept = f"{outcome.swept:,} of {outcome.subs:,} subjects reached by a publish on the new node"
    return "\n".join([*lines, _check(outcome.ok, swept, outcome.error)])


def describe_reclaim(outcome: expiry.Reclaim) -> str:
    lat = outcome.latency
    lines = [
        f"resp-expiry: {outcome.keys:,} keys with a TTL of {outcome.ttl_ms:,} ms at"
        f" {outcome.endpoint.url} (made in {outcome.made_seconds:.3f} s)",
        f"  none left {outcome.seconds:.3f} s after their TTL was set",
        f"  PING meanwhile: p50 {lat.p50 / 1000:,.2f} ms  p99 {lat.p99 / 1000:,.2f} ms"
        f"  max {outcome.worst_ms:,.2f} ms ({len(outcome.pings_ns):,} PINGs)",
    ]
    left = f"{outcome.left:,} of {outcome.keys:,} keys left"
    return "\n".join([*lines, _check(outcome.ok, left, outcome.error)])


def _check(ok: bool, what: str, error: str | None) -> str:
    line = f"  check: {what}  {'OK' if ok else 'FAILED'}"
    return line + (f"\n  error: {error}" if error else "")
