"""How soon a Redis-protocol server reclaims expired keys that nobody reads, and whether its clients
wait meanwhile.

``keys`` streams are made in a database of their own (``DB``, which must start empty) by pipelined
``XADD <key> * f x``, and then given their TTL all at once: ``PEXPIRE <key> <ttl_ms>`` for each,
in one ``MULTI`` ... ``EXEC`` (nothing can expire a key while the transaction runs, so none goes before
the last has its TTL, however long making them took). Nothing reads them again, so only the server's
active expiry can find them. The clock starts at EXEC's reply; from then on ``INFO keyspace`` is
asked every ``INFO_GAP`` until the database has no keys left (INFO counts keys without looking at
them, so it expires none itself). Meanwhile a canary connection sends a PING every ``CANARY_GAP``
and times its round trip: its p99 and worst case show whether the reclaiming holds clients up.
"""

from __future__ import annotations

import random
import re
import secrets
import socket
import time
from collections.abc import Callable
from typing import Any

import attrs

from node.bench.resp import RESP, command, connect
from node.bench.scenarios import Latency
from node.bench.wire import BenchError, Endpoint, Reader

__all__ = ["DB", "Reclaim", "reclaim"]

DB = 9
"""The database the keys are made in."""
BATCH = 1000
"""Commands that go out in one ``sendall``."""
WINDOW = 8
"""Batches that may be unconfirmed before the maker waits for replies."""
INFO_GAP = 0.01
CANARY_GAP = 0.001
"""The canary's mean pause between PINGs (each drawn at random, so that the PINGs do not fall in
step with anything the server does periodically)."""
TIMEOUT = 60.0
"""How long the keys may take to go before the run counts as failed."""
ADDED = b"$"
"""What each XADD reply holds once: the ``$`` of its bulk string (IDs have none)."""
QUEUED = b"+QUEUED\r\n"
EXPIRED = b":1\r\n"
"""PEXPIRE's reply when it set the time, one per key in EXEC's."""
PONG = b"+PONG\r\n"
_KEYS = re.compile(rb"db%d:keys=(\d+)" % DB)

Progress = Callable[[int, int], None]


@attrs.frozen
class Reclaim:
    """One run: how long making the keys took, how long they then took to go, and the canary's
    round trips meanwhile."""

    endpoint: Endpoint
    keys: int
    ttl_ms: int
    made_seconds: float
    """Making the keys and giving them their TTL."""
    seconds: float
    """From EXEC's reply until the database was empty (the TTL included)."""
    pings_ns: tuple[int, ...]
    left: int
    """Keys still there when the run ended (0 when it succeeded)."""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None and self.left == 0

    @property
    def latency(self) -> Latency:
        """The canary's round trips, in microseconds."""
        return Latency.of(self.pings_ns)

    @property
    def worst_ms(self) -> float:
        return max(self.pings_ns, default=0) / 1e6

    def failure(self) -> str:
        return f"{self.left:,} of {self.keys:,} keys left" + (f" ({self.error})" if self.error else "")

    def as_dict(self) -> dict[str, Any]:
        lat = self.latency
        return {
            "scenario": "resp-expiry",
            "url": self.endpoint.url,
            "keys": self.keys,
            "ttl_ms": self.ttl_ms,
            "made_seconds": self.made_seconds,
            "seconds": self.seconds,
            "left": self.left,
            "ping_ms": {"p50": lat.p50 / 1000, "p99": lat.p99 / 1000, "max": self.worst_ms},
            "pings": len(self.pings_ns),
            "ok": self.ok,
            "errors": [self.error] if self.error else [],
        }


def reclaim(endpoint: Endpoint, keys: int, ttl_ms: int, on_progress: Progress | None = None) -> Reclaim:
    """Make ``keys`` keys that expire after ``ttl_ms`` and time how long the server takes to drop them.

    Raises:
        BenchError: the server cannot be reached, or the database is not empty at the start.
    """
    if keys < 1 or ttl_ms < 1:
        raise BenchError("--keys and --ttl must be positive")
    with connect(endpoint) as maker, connect(endpoint) as canary:
        _select(maker)
        already = _keys_left(maker)
        if already:
            raise BenchError(f"database {DB} holds {already:,} keys already")
        start = time.perf_counter()
        error = _make(maker, keys, ttl_ms, on_progress)
        made = time.perf_counter()
        if error is not None:
            return Reclaim(endpoint, keys, ttl_ms, made - start, 0.0, (), _keys_left(maker), error)
        pings: list[int] = []
        left, checked = keys, made
        while left and checked - made < TIMEOUT:
            pings.append(_ping(canary))
            if time.perf_counter() - checked >= INFO_GAP:
                left, checked = _keys_left(maker), time.perf_counter()
            time.sleep(CANARY_GAP * random.uniform(0.5, 1.5))  # (not in step with the server)
        ended = checked if not left else time.perf_counter()
        error = None if not left else f"still there after {TIMEOUT:g} s"
        return Reclaim(endpoint, keys, ttl_ms, made - start, ended - made, tuple(pings), left, error)


def _make(sock: socket.socket, keys: int, ttl_ms: int, on_progress: Progress | None) -> str | None:
    """Make the keys, then give them their TTL in one transaction; the server's first error."""
    prefix = b"expiry:%s:" % secrets.token_hex(4).encode()
    names = [prefix + b"%d" % i for i in range(keys)]
    reader = Reader(sock, ADDED, QUEUED, EXPIRED, dialect=RESP)

    def progress(done: int) -> None:
        if on_progress is not None:
            on_progress(done, 2 * keys)

    added = _pipelined(sock, reader, 0, [command(b"XADD", n, b"*", b"f", b"x") for n in names])
    progress(added)
    sock.sendall(command(b"MULTI"))
    ttl = b"%d" % ttl_ms
    _pipelined(sock, reader, 1, [command(b"PEXPIRE", n, ttl) for n in names], progress, added)
    sock.sendall(command(b"EXEC"))
    expired = 0
    while expired < keys and reader.error is None:
        expired += reader.read()[2]
    return reader.error


def _pipelined(
    sock: socket.socket,
    reader: Reader,
    token: int,
    commands: list[bytes],
    progress: Callable[[int], None] = lambda done: None,
    before: int = 0,
) -> int:
    """Send ``commands`` in batches, at most ``WINDOW`` of them unconfirmed (each confirmed by one
    of the reader's ``token``); how many were confirmed."""
    sent = confirmed = 0
    while sent < len(commands) and reader.error is None:
        batch = commands[sent : sent + BATCH]
        sock.sendall(b"".join(batch))
        sent += len(batch)
        while sent - confirmed > WINDOW * BATCH and reader.error is None:
            confirmed += reader.read()[token]
        progress(before + confirmed)
    while confirmed < sent and reader.error is None:
        confirmed += reader.read()[token]
    return confirmed


def _select(sock: socket.socket) -> None:
    sock.sendall(command(b"SELECT", b"%d" % DB))
    reply = _line(sock)
    if reply != b"+OK":
        raise BenchError(f"SELECT {DB}: {reply.decode(errors='replace')}")


def _keys_left(sock: socket.socket) -> int:
    """The database's key count, as INFO keyspace tells it (no line: none)."""
    sock.sendall(command(b"INFO", b"keyspace"))
    header = _line(sock)
    if header[:1] != b"$":
        raise BenchError(f"INFO keyspace: {header.decode(errors='replace')}")
    size = int(header[1:]) + 2
    body = b""
    while len(body) < size:
        chunk = sock.recv(size - len(body))
        if not chunk:
            raise BenchError("server closed the connection")
        body += chunk
    found = _KEYS.search(body)
    return int(found[1]) if found else 0


def _ping(sock: socket.socket) -> int:
    """One PING's round trip, in nanoseconds."""
    start = time.perf_counter_ns()
    sock.sendall(command(b"PING"))
    reply = b""
    while len(reply) < len(PONG):
        chunk = sock.recv(len(PONG) - len(reply))
        if not chunk:
            raise BenchError("server closed the connection")
        reply += chunk
    if reply != PONG:
        raise BenchError("the canary's PING was not answered with PONG")
    return time.perf_counter_ns() - start


def _line(sock: socket.socket) -> bytes:
    """One reply line, without its CRLF (read byte by byte up to it: the replies are small)."""
    line = b""
    while not line.endswith(b"\r\n"):
        byte = sock.recv(1)
        if not byte:
            raise BenchError("server closed the connection")
        line += byte
    return line[:-2]
