"""How long interest takes to cross a route: one new subscription, and a joining node's whole table.

Both are measured the only way a client can see them: by publishing on one server until the message
reaches a subscriber on another. A publish made before the interest has arrived is dropped, so the
first delivery marks the moment it had.

* **Convergence**: a client on server B subscribes to a fresh subject (SUB, then PING answered by
  PONG, as a client library's flush does) while a client on server A publishes to it every
  ``PROBE_GAP``; a sample is the time from the SUB to the first delivery. The subscription is then
  dropped (UNSUB, flushed), so the next sample starts on a quiet connection.
* **Resync**: a node B holds ``subs`` subscriptions (``sub.0`` ... ``sub.<subs - 1>``, one client)
  when a node A starts with B as its seed. Probes on A go to the last subject subscribed, then to a
  sample spread over the rest, until B's client has received each: the time is counted from A's first
  route connection (by its log) to then. A table sent in order (pubmesh's is) is complete when its
  last entry arrives; one sent in another order (nats-server's) is, within about one sample interval,
  when the sample's last does. A sweep then publishes once on A to every subject, and all must
  arrive: that proves the whole table had crossed by the time A had read the sweep, which is reported
  too, as an upper bound.
"""

from __future__ import annotations

import re
import secrets
import select
import socket
import time
from collections.abc import Callable, Sequence
from typing import Any

import attrs

from node.bench.scenarios import Latency
from node.bench.servers import Flavor, Servers
from node.bench.wire import PING, PONG, BenchError, Endpoint, Reader, connect, flush
from node.nats.protocol import writer as w

__all__ = ["Convergence", "Resync", "converge", "resync"]

PROBE_GAP = 0.0002
"""Seconds between a convergence sample's publishes: its resolution."""
RESYNC_PROBE_GAP = 0.002
"""Seconds between rounds of resync probes: few enough not to slow the node that is catching up."""
SAMPLE_TIMEOUT = 10.0
RESYNC_TIMEOUT = 60.0
SAMPLE_SHARE = 1000
"""Resync probes one subject in this many, besides the last."""
SWEEP_BATCH = 10_000
SWEEP_PAYLOAD = b"sweep"
SWEEP = b" %d\r\n%b\r\n" % (len(SWEEP_PAYLOAD), SWEEP_PAYLOAD)
"""The end of a sweep delivery's MSG frame, which no probe delivery (empty payload) has."""
SUBJECT = re.compile(rb"MSG sub\.(\d+) ")

Progress = Callable[[int, int], None]


@attrs.frozen
class Convergence:
    """Samples of the time a subscription on ``sub`` took to be served by a publish on ``pub``."""

    pub: Endpoint
    sub: Endpoint
    requested: int
    samples_ns: tuple[int, ...]
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and len(self.samples_ns) == self.requested

    @property
    def latency(self) -> Latency:
        """In microseconds, as request/reply latency is."""
        return Latency.of(self.samples_ns)

    def failure(self) -> str:
        return f"{len(self.samples_ns):,} of {self.requested:,} samples" + _because(self.error)

    def as_dict(self) -> dict[str, Any]:
        lat = self.latency
        return {
            "scenario": "convergence",
            "url": self.pub.url,
            "sub_url": self.sub.url,
            "samples": len(self.samples_ns),
            "requested": self.requested,
            "ms": {"p50": lat.p50 / 1000, "p99": lat.p99 / 1000, "mean": lat.mean / 1000},
            "ok": self.ok,
            "errors": [self.error] if self.error else [],
        }


def converge(
    pub: Endpoint, sub: Endpoint, samples: int, on_progress: Progress | None = None
) -> Convergence:
    """Measure ``samples`` subscriptions on ``sub`` until a publish on ``pub`` reaches each.

    Raises:
        BenchError: a server cannot be reached.
    """
    if samples < 1:
        raise BenchError("--samples must be positive")
    run_id = secrets.token_hex(4)
    taken: list[int] = []
    with connect(pub) as publisher, connect(sub) as subscriber:
        probe = _Publisher(publisher)
        reader = Reader(subscriber, b"MSG ", PONG)
        try:
            for i in range(samples):
                subject = f"bench-converge.{run_id}.{i}".encode()
                taken.append(_sample(probe, reader, subscriber, subject, b"%d" % i))
                if on_progress is not None:
                    on_progress(i + 1, samples)
            flush(publisher, SAMPLE_TIMEOUT)
        except (BenchError, OSError) as exc:
            return Convergence(pub, sub, samples, tuple(taken), _describe(exc))
    return Convergence(pub, sub, samples, tuple(taken))


def _sample(probe: _Publisher, reader: Reader, sock: socket.socket, subject: bytes, sid: bytes) -> int:
    deadline = time.monotonic() + SAMPLE_TIMEOUT
    start = time.perf_counter_ns()
    sock.sendall(w.sub(subject, sid) + PING)
    _await_pong(reader, sock, deadline)  # deliveries cannot come first: nothing is published yet
    line = w.pub(subject, b"")
    while True:
        probe.send(line)
        if _readable(sock, PROBE_GAP, deadline) and reader.read()[0]:
            end = time.perf_counter_ns()
            break
    # Once the UNSUB is answered, no delivery for this subject can follow on the connection.
    sock.sendall(w.unsub(sid) + PING)
    _await_pong(reader, sock, deadline)
    return end - start


def _await_pong(reader: Reader, sock: socket.socket, deadline: float) -> None:
    while not (_readable(sock, deadline - time.monotonic(), deadline) and reader.read()[1]):
        pass


def _readable(sock: socket.socket, wait: float, deadline: float) -> bool:
    """Whether ``sock`` has input within ``wait`` seconds; past ``deadline``, an error."""
    if time.monotonic() >= deadline:
        raise BenchError(f"a sample took longer than {SAMPLE_TIMEOUT:g} s")
    return bool(select.select([sock], [], [], max(0.0, wait))[0])


class _Publisher:
    """A connection that only publishes, answering the server's PINGs as it goes."""

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self._reader = Reader(sock)

    def send(self, data: bytes) -> None:
        self.sock.sendall(data)
        self._reader.poll()


@attrs.frozen
class Resync:
    """How long a node joining the cluster took to learn another node's ``subs`` subscriptions."""

    server: str
    subs: int
    seconds: float
    """From the joining node's first route connection until it knew the probed sample."""
    confirmed: float
    """From its first route connection until it had read the sweep (so knew every subject)."""
    since_start: float
    """``seconds``, counted from the moment its process was started."""
    swept: int
    """Subjects a publish on the joining node reached afterwards (all of them, if nothing is lost)."""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.swept == self.subs

    def failure(self) -> str:
        return f"{self.swept:,} of {self.subs:,} subjects reached" + _because(self.error)

    def as_dict(self) -> dict[str, Any]:
        return {
            "scenario": "resync",
            "server": self.server,
            "subs": self.subs,
            "seconds": self.seconds,
            "confirmed": self.confirmed,
            "since_start": self.since_start,
            "swept": self.swept,
            "ok": self.ok,
            "errors": [self.error] if self.error else [],
        }


def resync(flavor: Flavor, subs: int, on_progress: Progress | None = None) -> Resync:
    """Start node B with ``subs`` subscriptions, then node A with B as its seed, and time A's catch-up.

    Raises:
        BenchError: a server cannot be started or reached.
    """
    if subs < 1:
        raise BenchError("--subs must be positive")
    deadline = time.monotonic() + RESYNC_TIMEOUT
    with Servers() as servers:
        b = servers.start(flavor, "b")
        with connect(b.endpoint) as subscriber:
            subscriber.sendall(b"".join(w.sub(b"sub.%d" % i, b"%d" % i) for i in range(subs)))
            flush(subscriber, RESYNC_TIMEOUT)
            started = time.time()
            a = servers.start(flavor, "a", b.route_url)
            with connect(a.endpoint) as publisher:
                probe = _Publisher(publisher)
                try:
                    known = _await_known(probe, subscriber, _sample_of(subs), deadline, on_progress)
                    swept, confirmed = _sweep(probe, subscriber, subs, deadline, on_progress)
                except (BenchError, OSError) as exc:
                    return Resync(flavor.name, subs, 0.0, 0.0, 0.0, 0, _describe(exc))
        routes = a.routes_created()
    if not routes:
        raise BenchError(f"{flavor.name} logged no route connection on the joining node")
    joined = min(routes)
    return Resync(flavor.name, subs, known - joined, confirmed - joined, known - started, swept)


def _sample_of(subs: int) -> list[int]:
    """The subjects probed, in order: the last one subscribed first (a table sent in order arrives
    with it last), then one in ``SAMPLE_SHARE`` of the others."""
    return [subs - 1, *range(0, subs - 1, SAMPLE_SHARE)]


def _await_known(
    probe: _Publisher,
    sock: socket.socket,
    sample: Sequence[int],
    deadline: float,
    on_progress: Progress | None,
) -> float:
    """Probe the sample, the first subject alone until it arrives, then whatever has not arrived;
    when (``time.time()``) the last one did."""
    missing = list(sample)
    buf = b""
    while True:
        if time.monotonic() >= deadline:
            raise BenchError(
                f"{len(missing):,} probed subjects still unknown after {RESYNC_TIMEOUT:g} s"
            )
        targets = missing if missing[0] != sample[0] else missing[:1]
        probe.send(b"".join(w.pub(b"sub.%d" % i, b"") for i in targets))
        if not select.select([sock], [], [], RESYNC_PROBE_GAP)[0]:
            continue
        data = sock.recv(1 << 16)
        if not data:
            raise BenchError("server closed the connection")
        buf += data
        complete = buf.rfind(b"\n") + 1
        lines, buf = buf[:complete], buf[complete:]
        if lines.count(PING):
            sock.sendall(PONG * lines.count(PING))
        arrived = {int(n) for n in SUBJECT.findall(lines)}
        missing = [i for i in missing if i not in arrived]
        if on_progress is not None:
            on_progress(len(sample) - len(missing), len(sample))
        if not missing:
            return time.time()


def _sweep(
    probe: _Publisher, sock: socket.socket, subs: int, deadline: float, on_progress: Progress | None
) -> tuple[int, float]:
    """Publish once to every subject on the joining node: how many of them reached the subscriber,
    and when (``time.time()``) the node had read them all."""
    reader = Reader(sock, SWEEP)
    swept = 0
    for first in range(0, subs, SWEEP_BATCH):
        batch = range(first, min(subs, first + SWEEP_BATCH))
        probe.send(b"".join(w.pub(b"sub.%d" % i, SWEEP_PAYLOAD) for i in batch))
        while (counts := reader.poll()) is not None:
            swept += counts[0]
    flush(probe.sock, RESYNC_TIMEOUT)
    confirmed = time.time()
    while swept < subs and time.monotonic() < deadline:
        if select.select([sock], [], [], min(0.1, max(0.0, deadline - time.monotonic())))[0]:
            swept += reader.read()[0]
            if on_progress is not None:
                on_progress(swept, subs)
    return swept, confirmed


def _describe(exc: BenchError | OSError) -> str:
    return str(exc) if isinstance(exc, BenchError) else f"connection lost: {exc.strerror or exc}"


def _because(error: str | None) -> str:
    return f" ({error})" if error else ""
