"""``pubmesh bench compare``: pubmesh and nats-server side by side, under the same load.

Both servers are started here on 127.0.0.1 with their default settings (a free port each, read from
their startup log) and stopped here. Runs alternate between the servers, so whatever else the machine
is doing weighs on both alike, and each figure is the median of several runs, which a single slow
run cannot move. The result is a markdown table, ready to paste into a README or an issue.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from typing import IO, Any

import attrs

from node.bench.progress import ProgressBar
from node.bench.scenarios import Result, Spec, run
from node.bench.wire import BenchError, Endpoint

__all__ = ["CASES", "Case", "compare", "render"]

PUBMESH_ARGS = ["-m", "node.cli", "serve", "-a", "127.0.0.1", "-p", "0"]
NATS_ARGS = ["-a", "127.0.0.1", "-p", "-1"]  # nats-server's "-p -1" is our "-p 0": any free port
LISTENING = re.compile(rb"Listening for client connections on [\d.]+:(\d+)")
VERSION = re.compile(rb"(?:Starting pubmesh|Version:)\s+(\S+)")
START_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0
RUN_TIMEOUT = 120.0
SIZE = 16


@attrs.frozen
class Case:
    """One scenario as the comparison runs it, on both servers alike."""

    label: str
    scenario: str
    msgs: int
    subs: int

    def spec(self, endpoint: Endpoint, scale: float) -> Spec:
        msgs = max(1, round(self.msgs * scale))
        return Spec(self.scenario, endpoint, msgs, SIZE, self.subs, timeout=RUN_TIMEOUT)

    def metrics(self) -> list[tuple[str, Callable[[Result], float]]]:
        """The table rows this case fills: (what is measured, how to read it from a result)."""
        if self.scenario == "reqrep":
            return [
                ("latency p50 (µs)", lambda r: r.latency.p50 if r.latency else 0.0),
                ("latency p99 (µs)", lambda r: r.latency.p99 if r.latency else 0.0),
                ("req/s", lambda r: r.rate),
            ]
        unit = "deliveries/s" if self.scenario == "fanout" else "msgs/s"
        return [(unit, lambda r: r.rate)]


CASES = (
    Case("publish only", "pub", 1_500_000, subs=0),
    Case("pub/sub 1:1", "pubsub", 800_000, subs=1),
    Case("fan-out 1→10", "fanout", 200_000, subs=10),
    Case("queue group of 4", "queue", 400_000, subs=4),
    Case("request/reply", "reqrep", 5_000, subs=1),
)
"""Sized so a pubmesh run takes one to two seconds and a nats-server run still a few tenths."""


@attrs.frozen
class _Server:
    name: str
    version: str
    endpoint: Endpoint


def compare(*, runs: int = 3, scale: float = 1.0, as_json: bool = False) -> int:
    """Run every case against pubmesh (and nats-server, when it is on PATH); print the table.

    Returns the exit status: 1 if any run failed its check.
    """
    if runs < 1 or scale <= 0:
        raise BenchError("--runs and --scale must be positive")
    nats = shutil.which("nats-server")
    started = time.monotonic()
    results: dict[tuple[str, str], list[Result]] = {}
    with contextlib.ExitStack() as stack:
        servers = [stack.enter_context(_running("pubmesh", [sys.executable, *PUBMESH_ARGS]))]
        if nats:
            servers.append(stack.enter_context(_running("nats-server", [nats, *NATS_ARGS])))
        for case in CASES:
            for i in range(runs):
                for server in servers:
                    label = f"{case.label} on {server.name} ({i + 1}/{runs})"
                    with ProgressBar.on_terminal(label) as bar:
                        result = run(case.spec(server.endpoint, scale), bar)
                    results.setdefault((case.label, server.name), []).append(result)
    versions = {s.name: s.version for s in servers}
    elapsed = time.monotonic() - started
    if as_json:
        print(json.dumps(_as_json(results, versions, runs, scale)))
    else:
        print(render(results, versions, runs, scale, elapsed))
        if not nats:
            print("\nnats-server was not found on PATH: only pubmesh was measured.")
    return 0 if all(r.ok for rs in results.values() for r in rs) else 1


def _median(results: list[Result], metric: Callable[[Result], float]) -> float | None:
    """The median over the runs, or None when any run failed its check (its figure means nothing)."""
    if not all(r.ok for r in results):
        return None
    return statistics.median(metric(r) for r in results)


def _rows(
    results: dict[tuple[str, str], list[Result]], servers: list[str]
) -> Iterator[tuple[Case, str, list[float | None]]]:
    for case in CASES:
        for what, metric in case.metrics():
            yield case, what, [_median(results[case.label, s], metric) for s in servers]


def render(
    results: dict[tuple[str, str], list[Result]],
    versions: dict[str, str],
    runs: int,
    scale: float,
    elapsed: float,
) -> str:
    """The markdown table; ``versions`` maps each server's name to its version, pubmesh first."""
    servers = list(versions)
    both = len(servers) == 2
    names = " vs ".join(f"{name} {version}".strip() for name, version in versions.items())
    lines = [
        f"{names} on 127.0.0.1: {SIZE} B payloads, median of {runs} "
        f"run{'s' * (runs != 1)} each ({elapsed:.0f} s in all)",
        "",
        "| scenario | " + " | ".join(servers) + (" | pubmesh / nats-server |" if both else " |"),
        "|---|" + "---:|" * (len(servers) + both),
    ]
    for case, what, values in _rows(results, servers):
        count = max(1, round(case.msgs * scale))
        noun = "requests" if case.scenario == "reqrep" else "msgs"
        cells = [_number(v, what) for v in values]
        if both:
            mine, theirs = values
            cells.append(f"{mine / theirs:.2f}" if mine is not None and theirs else "—")
        lines.append(f"| {case.label}, {count:,} {noun}: {what} | " + " | ".join(cells) + " |")
    if both:
        lines += ["", "Ratio above 1: pubmesh has more throughput, or (latency rows) takes longer."]
    failures = [
        f"- {server}, {label}: received {r.received:,} of {r.expected:,}"
        + "".join(f" ({e})" for e in r.errors)
        for (label, server), rs in results.items()
        for r in rs
        if not r.ok
    ]
    if failures:
        lines += ["", "Runs that failed their check (shown as “failed”):", *failures]
    else:
        lines += ["", "Check: every run received exactly the messages it expected."]
    return "\n".join(lines)


def _number(value: float | None, what: str) -> str:
    if value is None:
        return "failed"
    return f"{value:,.1f}" if "µs" in what else f"{value:,.0f}"


def _as_json(
    results: dict[tuple[str, str], list[Result]], versions: dict[str, str], runs: int, scale: float
) -> dict[str, Any]:
    servers = list(versions)
    rows = []
    for case, what, values in _rows(results, servers):
        row: dict[str, Any] = {"case": case.label, "scenario": case.scenario, "metric": what}
        row.update(zip(servers, values, strict=True))
        rows.append(row)
    runs_out = [{"server": server, **r.as_dict()} for (_, server), rs in results.items() for r in rs]
    ok = all(r["ok"] for r in runs_out)
    return {
        "servers": versions,
        "runs": runs,
        "scale": scale,
        "ok": ok,
        "rows": rows,
        "results": runs_out,
    }


@contextlib.contextmanager
def _running(name: str, argv: list[str]) -> Iterator[_Server]:
    """A server process for the length of the ``with``, stopped with SIGTERM (killed if it hangs)."""
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        try:
            yield _started(name, proc, log)
        finally:
            _stop(name, proc, log)


def _started(name: str, proc: subprocess.Popen[bytes], log: IO[bytes]) -> _Server:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        text = _read(log)
        listening = LISTENING.search(text)
        if listening:
            version = VERSION.search(text)
            return _Server(
                name,
                version.group(1).decode() if version else "",
                Endpoint("127.0.0.1", int(listening.group(1))),
            )
        if proc.poll() is not None:
            raise BenchError(f"{name} exited with status {proc.returncode}: {_tail(log)}")
        time.sleep(0.05)
    raise BenchError(f"{name} did not start listening within {START_TIMEOUT:.0f} s: {_tail(log)}")


def _stop(name: str, proc: subprocess.Popen[bytes], log: IO[bytes]) -> None:
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(STOP_TIMEOUT)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
        print(f"{name} ignored SIGTERM and was killed: {_tail(log)}", file=sys.stderr)


def _read(log: IO[bytes]) -> bytes:
    """The log so far, read without moving the offset the server writes at (it shares it)."""
    fd = log.fileno()
    return os.pread(fd, os.fstat(fd).st_size, 0)


def _tail(log: IO[bytes]) -> str:
    lines = _read(log).decode(errors="replace").strip().splitlines()
    return " | ".join(lines[-3:]) or "(no output)"
