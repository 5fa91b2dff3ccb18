"""``pubmesh bench clients``: many NATS requesters at once, each waiting for its reply before it sends
the next request, against a queue group of responders.

Every connection lives in this one process, on one ``selectors`` loop over blocking sockets (a socket
is read only once the loop says it is readable, and every write is a few hundred bytes at most), so
the load generator is cheap enough to load a server from one core. Each requester subscribes to an
inbox of its own and sends ``PUB <subject> <inbox> <size>``; the server gives each request to one
member of the responders' queue group, which publishes the payload back to the inbox. A requester
counts its replies as ``MSG `` tokens (``node.bench.wire.Tally``) and times each round trip; a
responder needs each request's reply subject, which ``Requests`` splits out of its stream.

How much of a core the loop itself used (its thread's CPU time over the run's wall time) is part of
the result: near one, the figures measure the load generator as much as the server.
"""

from __future__ import annotations

import resource
import secrets
import selectors
import socket
import time
from typing import Any

import attrs

from node.bench.scenarios import Latency
from node.bench.wire import (
    ERR,
    PING,
    PONG,
    BenchError,
    Endpoint,
    Tally,
    connect,
    flush,
    server_error,
)
from node.nats.protocol import writer as w

__all__ = ["Crowd", "CrowdRun", "Requests", "crowd", "describe"]

QUEUE = b"responders"
MSG = b"MSG "
FILLER = b"x"
READ_SIZE = 1 << 16
SETUP_TIMEOUT = 10.0
"""Seconds the setup's flushes may take (every subscription registered before the clock starts)."""
_SKIPPED = (b"PONG", b"+OK", b"INFO ")


@attrs.frozen
class Crowd:
    """How many requesters make how many requests in all, against how many responders."""

    clients: int = 50
    responders: int = 4
    requests: int = 50_000
    size: int = 16
    timeout: float = 300.0


class Requests:
    """A responder's incoming stream, split into the reply subjects of the requests it holds.

    Sans I/O: ``feed`` takes whatever bytes arrived and returns the reply subjects of the requests
    they complete and how many PINGs the server sent; an incomplete frame waits for the next chunk.
    A ``-ERR``, a request without a reply subject, or anything a server does not send a subscriber
    is a ``BenchError``.
    """

    __slots__ = ("_buf",)

    def __init__(self) -> None:
        self._buf = bytearray()

    def feed(self, data: bytes | bytearray) -> tuple[list[bytes], int]:
        buf = self._buf
        buf += data
        replies: list[bytes] = []
        pings = pos = 0
        while (end := buf.find(b"\r\n", pos)) >= 0:
            if buf.startswith(MSG, pos):
                parts = bytes(buf[pos + 4 : end]).split(b" ")
                if len(parts) != 4 or not parts[3].isdigit():
                    raise BenchError(f"a request without a reply subject: {bytes(buf[pos:end])!r}")
                stop = end + 2 + int(parts[3]) + 2
                if stop > len(buf):
                    break
                if buf[stop - 2 : stop] != b"\r\n":
                    raise BenchError(f"a request's payload overran its size: {parts[3].decode()}")
                replies.append(parts[2])
                pos = stop
                continue
            line = bytes(buf[pos : end + 2])
            if line == PING:
                pings += 1
            elif line.startswith(ERR):
                raise BenchError(server_error(line) or "server sent an error")
            elif not line.startswith(_SKIPPED):
                raise BenchError(f"unexpected from the server: {line[:80]!r}")
            pos = end + 2
        del buf[:pos]
        return replies, pings


@attrs.frozen
class CrowdRun:
    """What a crowd run measured."""

    url: str
    load: Crowd
    answered: int
    """Replies the requesters received."""
    seconds: float
    latencies_ns: tuple[int, ...]
    cpu_seconds: float
    """CPU time of the load generator's thread over the run."""
    per_responder: tuple[int, ...]
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.answered == self.load.requests

    @property
    def rate(self) -> float:
        return self.answered / self.seconds if self.seconds > 0 else 0.0

    @property
    def latency(self) -> Latency:
        return Latency.of(self.latencies_ns)

    @property
    def generator_share(self) -> float:
        """The load generator's CPU as a share of one core."""
        return self.cpu_seconds / self.seconds if self.seconds > 0 else 0.0

    def failure(self) -> str:
        text = f"answered {self.answered:,} of {self.load.requests:,}"
        return text + (f" ({self.error})" if self.error else "")

    def as_dict(self) -> dict[str, Any]:
        return {
            "url": self.url,
            **attrs.asdict(self.load),
            "answered": self.answered,
            "seconds": self.seconds,
            "req_per_sec": self.rate,
            "latency_us": attrs.asdict(self.latency),
            "generator_cpu_share": self.generator_share,
            "per_responder": list(self.per_responder),
            "ok": self.ok,
            "error": self.error,
        }


class _Requester:
    __slots__ = ("inbox", "latencies", "left", "request", "sent", "sock", "tally")

    def __init__(self, sock: socket.socket, request: bytes, count: int) -> None:
        self.sock = sock
        self.request = request
        self.left = count
        self.sent = 0
        self.latencies: list[int] = []
        self.tally = Tally(MSG, PING, ERR)

    def send(self) -> None:
        self.sent = time.perf_counter_ns()
        self.sock.sendall(self.request)

    def readable(self, data: bytearray, size: int, now: int) -> int:
        """Replies completed by the chunk (one at most: there is one request in flight)."""
        replies, pings, errors = self.tally.feed(data, size)
        if errors:
            raise BenchError(server_error(data[:size]) or "server sent an error")
        if pings:
            self.sock.sendall(PONG * pings)
        if replies > 1:
            raise BenchError(f"{replies} replies to one request")
        if replies:
            self.latencies.append(now - self.sent)
            self.left -= 1
            if self.left:
                self.send()
        return replies


class _Responder:
    __slots__ = ("answered", "payload", "requests", "sock")

    def __init__(self, sock: socket.socket, payload: bytes) -> None:
        self.sock = sock
        self.payload = payload
        self.requests = Requests()
        self.answered = 0

    def readable(self, data: bytearray, size: int, now: int) -> int:
        replies, pings = self.requests.feed(data[:size])
        payload = self.payload
        out = b"".join([w.pub(reply, payload) for reply in replies]) + PONG * pings
        if out:
            self.sock.sendall(out)
        self.answered += len(replies)
        return 0


def crowd(endpoint: Endpoint, load: Crowd) -> CrowdRun:
    """One run (see the module docstring); its error, if any, is in the result."""
    if min(load.clients, load.responders, load.requests) < 1 or load.size < 0:
        raise BenchError("--clients, --responders and --requests must be positive")
    run_id = secrets.token_hex(4).encode()
    subject = b"bench.clients." + run_id
    payload = FILLER * load.size
    socks: list[socket.socket] = []
    try:
        responders = []
        for _ in range(load.responders):
            socks.append(sock := connect(endpoint))
            sock.sendall(w.sub(subject, b"1", QUEUE))
            responders.append(_Responder(sock, payload))
        share, extra = divmod(load.requests, load.clients)
        requesters = []
        for i in range(load.clients):
            socks.append(sock := connect(endpoint))
            inbox = b"_INBOX.%b.%d" % (run_id, i)
            sock.sendall(w.sub(inbox, b"1"))
            requesters.append(_Requester(sock, w.pub(subject, payload, inbox), share + (i < extra)))
        for sock in socks:
            flush(sock, SETUP_TIMEOUT)
        return _loop(endpoint, load, responders, [r for r in requesters if r.left])
    finally:
        for sock in socks:
            sock.close()


def _loop(
    endpoint: Endpoint, load: Crowd, responders: list[_Responder], requesters: list[_Requester]
) -> CrowdRun:
    buf = bytearray(READ_SIZE)
    error = None
    answered = 0
    roles: list[_Requester | _Responder] = [*responders, *requesters]
    with selectors.DefaultSelector() as selector:
        for each in roles:
            selector.register(each.sock, selectors.EVENT_READ, each)
        cpu = _thread_cpu()
        start = time.perf_counter()
        deadline = start + load.timeout
        for requester in requesters:
            requester.send()
        try:
            while answered < load.requests:
                left = deadline - time.perf_counter()
                if left <= 0:
                    raise BenchError(f"timed out after {load.timeout:g} s")
                for key, _ in selector.select(left):
                    role: _Requester | _Responder = key.data
                    size = role.sock.recv_into(buf)
                    if not size:
                        raise BenchError("server closed the connection")
                    answered += role.readable(buf, size, time.perf_counter_ns())
        except BenchError as exc:
            error = str(exc)
        seconds = time.perf_counter() - start
        cpu = _thread_cpu() - cpu
    latencies = tuple(ns for r in requesters for ns in r.latencies)
    per_responder = tuple(r.answered for r in responders)
    return CrowdRun(endpoint.url, load, answered, seconds, latencies, cpu, per_responder, error)


def _thread_cpu() -> float:
    usage = resource.getrusage(resource.RUSAGE_THREAD)
    return usage.ru_utime + usage.ru_stime


def describe(run: CrowdRun) -> str:
    """The human-readable report of one run."""
    load, lat = run.load, run.latency
    lines = [
        f"clients: {load.clients} requesters, one request in flight each -> a queue group of"
        f" {load.responders} responders, {load.requests:,} requests of {load.size} B at {run.url}",
        f"  {run.rate:,.0f} req/s  latency p50 {lat.p50:,.1f} µs  p99 {lat.p99:,.1f} µs"
        f"  mean {lat.mean:,.1f} µs",
        f"  load generator: {run.generator_share:.0%} of one core;"
        f" responders answered {' / '.join(f'{n:,}' for n in run.per_responder)}",
        f"  check: answered {run.answered:,} of {load.requests:,}  {'OK' if run.ok else 'FAILED'}",
    ]
    return "\n".join(lines) + (f"\n  error: {run.error}" if run.error else "")
