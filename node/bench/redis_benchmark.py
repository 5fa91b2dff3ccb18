"""Many RESP clients at once, measured by the real ``redis-benchmark``: its figures are comparable
with anyone else's, and its C load generator leaves the server most of the machine.

Each command is one ``redis-benchmark --csv`` run of ``clients`` connections sending ``requests``
commands in all, ``pipeline`` in flight per connection. Commands are given as custom commands (the
same words for every server), so the ones ``-t`` lacks (``XADD``, ``PUBLISH`` to a channel of the
run) are measured exactly like those it has. Keys and channels carry a run id: each run works a
fresh stream and key, and nobody subscribes to the channel. ``XADD-KEYS`` is ``XADD`` to one of
``MANY_KEYS`` fresh streams picked at random for each request (the tool's ``-r``), as a server with
many keys sees its writes: each lands on a key the processor's caches have not seen lately.

``parse_csv`` reads the tool's output: a header line naming the columns, then one line per test of
quoted fields. Anything else (a changed format, an error the tool printed instead of figures) is a
``BenchError`` naming what was wrong, never a figure made up.
"""

from __future__ import annotations

import csv
import math
import resource
import secrets
import shutil
import subprocess
import time
from collections.abc import Sequence
from typing import Any

import attrs

from node.bench.wire import BenchError, Endpoint

__all__ = [
    "COMMANDS",
    "MANY_KEYS",
    "Figures",
    "Load",
    "Sweep",
    "argv",
    "commands",
    "describe",
    "parse_csv",
    "program",
    "sweep",
]

COLUMNS = ("rps", "avg_latency_ms", "min_latency_ms", "p50_latency_ms", "p99_latency_ms")
"""The columns read from the header (others, such as p95 and max, may come and go)."""
COMMANDS = ("PING", "PUBLISH", "XADD", "XADD-KEYS", "SET", "GET")
"""What a sweep measures by default, in this order (GET after SET, which made its key)."""
MANY_KEYS = 100_000
"""How many streams ``XADD-KEYS`` spreads its entries over."""
RUN_TIMEOUT = 600.0
"""Seconds one redis-benchmark run may take."""
FILLER = b"x"


@attrs.frozen
class Figures:
    """One test's line: requests a second and latencies in milliseconds."""

    test: str
    rps: float
    avg_ms: float
    min_ms: float
    p50_ms: float
    p99_ms: float


def parse_csv(text: str) -> list[Figures]:
    """The tests of ``redis-benchmark --csv`` output, in order (see the module docstring)."""
    rows = [row for row in csv.reader(text.splitlines()) if row]
    if not rows:
        raise BenchError("redis-benchmark printed nothing")
    header = rows[0]
    if not header or header[0] != "test":
        raise BenchError(f"redis-benchmark printed no CSV header: {','.join(header)[:200]!r}")
    try:
        where = [header.index(column) for column in COLUMNS]
    except ValueError as exc:
        raise BenchError(f"redis-benchmark's CSV lacks a column: {exc}") from exc
    figures = []
    for row in rows[1:]:
        if len(row) != len(header):
            raise BenchError(f"redis-benchmark printed a malformed line: {','.join(row)[:200]!r}")
        try:
            values = [float(row[i]) for i in where]
        except ValueError as exc:
            raise BenchError(f"redis-benchmark printed a non-number: {exc}") from exc
        if values[0] == math.inf:  # (it times a run in whole milliseconds: this one took none)
            raise BenchError(f"the run of {row[0]} was too short to time: ask for more --requests")
        if not all(math.isfinite(v) and v >= 0 for v in values):
            raise BenchError(f"redis-benchmark printed an impossible figure: {','.join(row)[:200]!r}")
        figures.append(Figures(row[0], *values))
    if not figures:
        raise BenchError("redis-benchmark printed a header but no test")
    return figures


def program() -> str | None:
    """redis-benchmark's path, if it is on PATH."""
    return shutil.which("redis-benchmark")


def commands(names: Sequence[str], size: int, run_id: str) -> list[tuple[str, list[str]]]:
    """Each named command (``COMMANDS``' spelling, any case) and its words for the run ``run_id``
    (with the options of the tool that only it needs in front)."""
    payload = (FILLER * size).decode()
    spread = f"bench.clients.streams.{run_id}"
    words = {
        "PING": ["PING"],
        "PUBLISH": ["PUBLISH", f"bench.clients.{run_id}", payload],
        "XADD": ["XADD", f"bench.clients.stream.{run_id}", "*", "f", payload],
        "XADD-KEYS": ["-r", str(MANY_KEYS), "XADD", f"{spread}.__rand_int__", "*", "f", payload],
        "SET": ["SET", f"bench.clients.key.{run_id}", payload],
        "GET": ["GET", f"bench.clients.key.{run_id}"],
    }
    out = []
    for name in names:
        if name.upper() not in words:
            raise BenchError(f"cannot measure {name!r} with many clients: one of {', '.join(COMMANDS)}")
        out.append((name.upper(), words[name.upper()]))
    return out


def argv(path: str, endpoint: Endpoint, clients: int, requests: int, pipeline: int) -> list[str]:
    """The tool's command line up to the command's words."""
    out = [path, "-h", endpoint.host, "-p", str(endpoint.port), "-c", str(clients)]
    out += ["-n", str(requests), "-P", str(pipeline), "--csv"]
    if endpoint.password is not None:
        out += ["-a", endpoint.password, "--no-auth-warning"]
        if endpoint.user:
            out += ["--user", endpoint.user]
    return out


@attrs.frozen
class Sweep:
    """What a sweep of commands measured: one line each, and how much CPU the tool took."""

    url: str
    clients: int
    requests: int
    pipeline: int
    figures: tuple[tuple[str, Figures], ...]
    """Each command's name (``COMMANDS``' spelling) and its line."""
    seconds: float
    tool_cpu: float
    """CPU seconds redis-benchmark used, over all the runs."""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.figures)

    @property
    def tool_share(self) -> float:
        """The tool's CPU as a share of one core over the sweep's wall time."""
        return self.tool_cpu / self.seconds if self.seconds > 0 else 0.0

    def get(self, name: str) -> Figures | None:
        return next((f for n, f in self.figures if n == name), None)

    def failure(self) -> str:
        return self.error or "no test measured"

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            "clients": self.clients,
            "requests": self.requests,
            "pipeline": self.pipeline,
            "figures": {name: attrs.asdict(f) for name, f in self.figures},
            "seconds": self.seconds,
            "tool_cpu_seconds": self.tool_cpu,
            "ok": self.ok,
            "error": self.error,
        }


@attrs.frozen
class Load:
    """How many clients send how many commands, and how many each has in flight."""

    clients: int = 50
    requests: int = 100_000
    pipeline: int = 1
    size: int = 3
    """Payload bytes of PUBLISH, XADD and SET (redis-benchmark's default is 3)."""


def sweep(endpoint: Endpoint, load: Load, names: Sequence[str] = COMMANDS) -> Sweep:
    """Run redis-benchmark once per command against ``endpoint``; a failed run ends the sweep,
    its error kept (what was measured before it stays)."""
    path = program()
    if path is None:
        raise BenchError("redis-benchmark was not found on PATH")
    if min(load.clients, load.requests, load.pipeline) < 1 or load.size < 0:
        raise BenchError("--clients, --requests and --pipeline must be positive")
    base = argv(path, endpoint, load.clients, load.requests, load.pipeline)
    figures: list[tuple[str, Figures]] = []
    error = None
    before = _children_cpu()
    started = time.perf_counter()
    for name, words in commands(names, load.size, secrets.token_hex(4)):
        try:
            figures.append((name, _one(base + words)))
        except BenchError as exc:
            error = f"{name}: {exc}"
            break
    seconds = time.perf_counter() - started
    cpu = _children_cpu() - before
    return Sweep(
        endpoint.url, load.clients, load.requests, load.pipeline, tuple(figures), seconds, cpu, error
    )


def _one(command: list[str]) -> Figures:
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=RUN_TIMEOUT, check=False)
    except subprocess.TimeoutExpired as exc:
        raise BenchError(f"redis-benchmark took over {RUN_TIMEOUT:g} s") from exc
    if done.returncode != 0:
        said = (done.stderr or done.stdout).strip().splitlines()
        raise BenchError(f"redis-benchmark exited with {done.returncode}: {' | '.join(said[-2:])}")
    lines = parse_csv(done.stdout)
    if len(lines) != 1:
        raise BenchError(f"redis-benchmark printed {len(lines)} tests for one command")
    return lines[0]


def _children_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def describe(sweep: Sweep) -> str:
    """The human-readable report of a sweep: one line per command."""
    lines = [
        f"resp-clients: redis-benchmark, {sweep.clients} clients, {sweep.pipeline} in flight each,"
        f" {sweep.requests:,} requests per command at {sweep.url}"
    ]
    lines += [
        f"  {name:<8} {f.rps:>12,.0f} req/s  p50 {f.p50_ms:,.3f} ms  p99 {f.p99_ms:,.3f} ms"
        for name, f in sweep.figures
    ]
    lines.append(f"  redis-benchmark used {sweep.tool_share:.0%} of one core")
    verdict = "OK" if sweep.ok else "FAILED"
    lines.append(f"  check: {len(sweep.figures)} commands measured  {verdict}")
    return "\n".join(lines) + (f"\n  error: {sweep.error}" if sweep.error else "")
