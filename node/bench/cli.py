"""``pubmesh bench SCENARIO [options]`` and ``pubmesh bench compare``.

The options follow ``nats bench`` where it has one (``--msgs``, ``--size``, ``--pubs``, ``--subs``),
so numbers from either tool are set up the same way. Exit status: 0 when every message was counted,
1 when the check failed, 2 when the run could not be made at all.
"""

from __future__ import annotations

import argparse
import json
import sys

from node.bench.compare import compare
from node.bench.progress import ProgressBar
from node.bench.scenarios import DEFAULT_TIMEOUT, SCENARIOS, Result, Scenario, Spec, run
from node.bench.wire import BenchError, parse_url

__all__ = ["describe", "main"]

DEFAULT_URL = "nats://127.0.0.1:4222"


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
    c = commands.add_parser(
        "compare",
        help="start pubmesh and nats-server on 127.0.0.1 and run the same scenarios against both",
        formatter_class=defaults,
    )
    c.add_argument("--runs", type=int, default=3, help="runs per measurement; the median is shown")
    c.add_argument(
        "--scale", type=float, default=1.0, help="multiply every run's message count (e.g. 0.1)"
    )
    c.add_argument("--json", action="store_true", help="print the rows as JSON")
    return p


def _scenario_options(p: argparse.ArgumentParser, scenario: Scenario) -> None:
    p.description = scenario.summary
    p.add_argument("--url", "--server", dest="url", default=DEFAULT_URL, help="server URL")
    p.add_argument("--msgs", type=int, default=scenario.msgs, help="messages (requests) in total")
    p.add_argument("--size", type=int, default=16, help="payload bytes")
    p.add_argument("--subs", type=int, default=scenario.subs, help="subscribers")
    p.add_argument("--pubs", type=int, default=1, help="publishers; messages are split among them")
    p.add_argument("--subject", default="bench", help="subject to publish on")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT, help="seconds the run may take")
    p.add_argument("--json", action="store_true", help="print the result as JSON")


def main(argv: list[str]) -> int:
    args = _parser().parse_args(argv)
    try:
        if args.command == "compare":
            return compare(runs=args.runs, scale=args.scale, as_json=args.json)
        spec = Spec(
            args.command,
            parse_url(args.url),
            msgs=args.msgs,
            size=args.size,
            subs=args.subs,
            pubs=args.pubs,
            subject=args.subject,
            timeout=args.timeout,
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


def describe(result: Result) -> str:
    """The human-readable report of one run."""
    spec = result.spec
    queue = SCENARIOS[spec.scenario].queue
    if spec.scenario == "reqrep":
        who, what = "1 requester -> 1 responder", f"{spec.msgs:,} requests"
    else:
        who, what = _plural(spec.pubs, "publisher"), f"{spec.msgs:,} msgs"
        if spec.subs:
            who += " -> " + _plural(spec.subs, "queue member" if queue else "subscriber")
    lines = [
        f"{spec.scenario}: {who}, {what} of {spec.size} B on {spec.subject!r} at {spec.endpoint.url}"
    ]
    if result.latency is not None:
        lat = result.latency
        lines.append(
            f"  latency: p50 {lat.p50:,.1f} µs  p99 {lat.p99:,.1f} µs  mean {lat.mean:,.1f} µs"
            f"   {result.rate:,.0f} req/s"
        )
    else:
        unit = "deliveries/s" if spec.subs > 1 and not queue else "msgs/s"
        lines.append(
            f"  {result.rate:,.0f} {unit}  {result.megabytes_per_second:,.2f} MB/s"
            f"  ({result.received:,} in {result.seconds:.3f} s)"
        )
        if queue:
            lines.append("  members: " + " / ".join(f"{n:,}" for n in result.per_worker))
    noun = {"reqrep": "replies", "pub": "confirmed"}.get(spec.scenario, "received")
    relation = "==" if result.received == result.expected else "!="
    verdict = "OK" if result.ok else "FAILED"
    check = f"  check: {noun} {result.received:,} {relation} expected {result.expected:,}  {verdict}"
    lines.append(check + "".join(f"\n  error: {e}" for e in result.errors))
    return "\n".join(lines)


def _plural(n: int, noun: str) -> str:
    return f"{n} {noun}{'s' * (n != 1)}"
