"""``pubmesh bench resp-stall``: what hostile PSUBSCRIBE patterns cost a PUBLISH, and everyone else.

One connection holds ``patterns`` patterns, each ``*``, 200 ``?``, ``b*`` and two sets (distinct,
none matching what is published). Another publishes on a channel of ``size`` bytes with no ``b``,
once after another for ``seconds`` (at least once): a backtracking matcher tries 201 places after
every byte of it, for every pattern. A third, the canary, sends a ``PING`` every millisecond
meanwhile and times each answer, as any other client of the server would wait. Every publish must
be answered ``0`` (no pattern matches) and every ``PING`` ``+PONG``.
"""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import attrs

from node.bench.resp import PATTERNS_PER_COMMAND, PSUBSCRIBED, command, connect
from node.bench.scenarios import Latency
from node.bench.wire import BenchError, Endpoint

__all__ = [
    "CANARY_INTERVAL",
    "PATTERNS",
    "QUESTION_MARKS",
    "SECONDS",
    "SIZE",
    "Stall",
    "describe",
    "hostile_channel",
    "hostile_pattern",
    "stall",
]

PATTERNS = 1000
SIZE = 10_240
"""Bytes of the channel published on."""
SECONDS = 2.0
"""How long to go on publishing (after the first PUBLISH, however long that one takes)."""
QUESTION_MARKS = 200
CANARY_INTERVAL = 0.001
"""Seconds between one canary PONG and the next PING."""
REPLY_TIMEOUT = 300.0
"""How long one reply may take (redis-server takes seconds per PUBLISH here)."""
PONG = b"+PONG\r\n"


def hostile_pattern(i: int) -> bytes:
    """The ``i``-th pattern: ``*``, 200 ``?``, ``b*[a-z<i>][a-z<i>]``."""
    return b"*" + b"?" * QUESTION_MARKS + b"b*[a-z%d][a-z%d]" % (i, i)


def hostile_channel(size: int) -> bytes:
    """``size`` bytes (at least 2) with no ``b``, ending as every pattern's two sets allow."""
    return b"a" * max(0, size - 2) + b"zz"


@attrs.frozen
class Stall:
    """How long each PUBLISH took with the patterns held, and the canary's round trips meanwhile."""

    url: str
    patterns: int
    size: int
    publish_ns: tuple[int, ...]
    canary_ns: tuple[int, ...]
    seconds: float
    """From the first PUBLISH sent to the last one answered."""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and bool(self.publish_ns) and bool(self.canary_ns)

    @property
    def publish(self) -> Latency:
        """Per PUBLISH, in microseconds."""
        return Latency.of(self.publish_ns)

    @property
    def canary(self) -> Latency:
        """Per PING, in microseconds."""
        return Latency.of(self.canary_ns)

    @property
    def canary_max_ms(self) -> float:
        return max(self.canary_ns, default=0) / 1e6

    def failure(self) -> str:
        what = f"{len(self.publish_ns):,} publishes, {len(self.canary_ns):,} canary PINGs"
        return what + (f" ({self.error})" if self.error else "")

    def as_dict(self) -> dict[str, Any]:
        publish, canary = self.publish, self.canary
        return {
            "scenario": "resp-stall",
            "url": self.url,
            "patterns": self.patterns,
            "size": self.size,
            "publishes": len(self.publish_ns),
            "seconds": self.seconds,
            "publish_ms": {"p50": publish.p50 / 1000, "max": max(self.publish_ns, default=0) / 1e6},
            "canary_pings": len(self.canary_ns),
            "canary_ms": {"p50": canary.p50 / 1000, "p99": canary.p99 / 1000, "max": self.canary_max_ms},
            "ok": self.ok,
            "errors": [self.error] if self.error else [],
        }


def stall(
    endpoint: Endpoint, *, patterns: int = PATTERNS, size: int = SIZE, seconds: float = SECONDS
) -> Stall:
    """Subscribe the patterns, then publish for ``seconds`` while the canary pings.

    Raises:
        BenchError: the server cannot be reached or refuses the patterns.
    """
    if patterns < 1 or size < 2:
        raise BenchError("--patterns must be positive and --size at least 2")
    with connect(endpoint) as holder, connect(endpoint) as publisher, connect(endpoint) as pinger:
        _subscribe(holder, [hostile_pattern(i) for i in range(patterns)])
        canary = _Canary(pinger)
        thread = threading.Thread(target=canary.run, name="canary", daemon=True)
        thread.start()
        taken: list[int] = []
        error: str | None = None
        one = command(b"PUBLISH", hostile_channel(size), b"x")
        start = time.perf_counter()
        deadline = time.monotonic() + seconds
        try:
            while not taken or time.monotonic() < deadline:
                sent = time.perf_counter_ns()
                publisher.sendall(one)
                reply = _line(publisher)
                taken.append(time.perf_counter_ns() - sent)
                if reply != b":0":
                    error = f"PUBLISH answered {reply.decode(errors='replace')!r}, not 0"
                    break
        except (OSError, BenchError) as exc:
            error = str(exc) if isinstance(exc, BenchError) else f"connection lost: {exc}"
        elapsed = time.perf_counter() - start
        canary.stop.set()
        thread.join(REPLY_TIMEOUT)
    return Stall(
        url=endpoint.url,
        patterns=patterns,
        size=size,
        publish_ns=tuple(taken),
        canary_ns=tuple(canary.samples),
        seconds=elapsed,
        error=error or canary.error,
    )


def _subscribe(sock: socket.socket, patterns: list[bytes]) -> None:
    for i in range(0, len(patterns), PATTERNS_PER_COMMAND):
        sock.sendall(command(b"PSUBSCRIBE", *patterns[i : i + PATTERNS_PER_COMMAND]))
    sock.settimeout(REPLY_TIMEOUT)
    received = b""
    while received.count(PSUBSCRIBED) < len(patterns):
        chunk = sock.recv(1 << 16)
        if not chunk:
            raise BenchError("server closed the connection while subscribing")
        if chunk.startswith(b"-") or b"\r\n-" in chunk:
            raise BenchError(f"PSUBSCRIBE refused: {chunk.decode(errors='replace')[:200]}")
        received += chunk


def _line(sock: socket.socket) -> bytes:
    """One reply line (a PUBLISH reply is a single line), without its CRLF."""
    sock.settimeout(REPLY_TIMEOUT)
    got = b""
    while not got.endswith(b"\r\n"):
        chunk = sock.recv(4096)
        if not chunk:
            raise BenchError("server closed the connection")
        got += chunk
    return got[:-2]


class _Canary:
    """PINGs one at a time on its own connection until told to stop, timing each answer."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.stop = threading.Event()
        self.samples: list[int] = []
        self.error: str | None = None

    def run(self) -> None:
        ping = command(b"PING")
        try:
            while not self.stop.is_set():
                sent = time.perf_counter_ns()
                self.sock.sendall(ping)
                reply = _line(self.sock) + b"\r\n"
                self.samples.append(time.perf_counter_ns() - sent)
                if reply != PONG:
                    self.error = f"PING answered {reply.decode(errors='replace')!r}"
                    return
                self.stop.wait(CANARY_INTERVAL)
        except (OSError, BenchError) as exc:
            self.error = f"canary: {exc}"


def describe(outcome: Stall) -> str:
    """The human-readable report of one run."""
    publish, canary = outcome.publish, outcome.canary
    lines = [
        f"resp-stall: {outcome.patterns:,} patterns like '*' + {QUESTION_MARKS} '?' +"
        f" 'b*[a-z0][a-z0]', PUBLISH on a {outcome.size:,} B channel at {outcome.url}",
        f"  PUBLISH: median {publish.p50 / 1000:,.2f} ms  max"
        f" {max(outcome.publish_ns, default=0) / 1e6:,.2f} ms"
        f"  ({len(outcome.publish_ns):,} in {outcome.seconds:.3f} s)",
        f"  PING canary on another connection meanwhile: p50 {canary.p50 / 1000:,.2f} ms"
        f"  p99 {canary.p99 / 1000:,.2f} ms  max {outcome.canary_max_ms:,.2f} ms"
        f"  ({len(outcome.canary_ns):,} PINGs)",
        f"  check: every PUBLISH answered 0, every PING +PONG  {'OK' if outcome.ok else 'FAILED'}",
    ]
    if outcome.error:
        lines.append(f"  error: {outcome.error}")
    return "\n".join(lines)
