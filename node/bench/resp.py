"""The load generator's RESP side: publishers and subscribers for any Redis-protocol server, in RESP2.

They work as the NATS roles in ``node.bench.workers`` do, on the same coordinator and the same kind of
reading (``node.bench.wire``): a publisher sends pre-built pipelines of ``PUBLISH`` commands and counts
the integer replies, a subscriber counts ``message`` and ``pmessage`` frames by their type string
without parsing them, and both end on a marker: after its last message each publisher publishes an
empty message to the run's ``done`` channel, which every subscriber also holds, and a connection gets
one publisher's messages in the order sent.

A ``pmessage`` is counted as a delivery too. In a patterns run no pattern can match what is
published, so one arriving makes the count exceed what is expected and the run fail its check.
"""

from __future__ import annotations

import socket
import time
from collections.abc import Callable, Iterator
from functools import partial
from multiprocessing.connection import Connection

from node.bench.wire import CONNECT_TIMEOUT, BenchError, Dialect, Endpoint, Reader, dial
from node.bench.workers import READY, Job, Progress, Report

__all__ = [
    "FRAME_WORDS",
    "RESP",
    "command",
    "connect",
    "never_matching",
    "pipelined",
    "publisher",
    "resp_error",
    "subscriber",
]

CRLF = b"\r\n"
REPLY = CRLF
"""The end of a reply to PUBLISH: each is one line, the number of receivers (or an error)."""
MESSAGE = b"$7\r\nmessage\r\n"
PMESSAGE = b"$8\r\npmessage\r\n"
SUBSCRIBED = b"$9\r\nsubscribe\r\n"
PSUBSCRIBED = b"$10\r\npsubscribe\r\n"
FRAME_WORDS = frozenset({"message", "pmessage", "subscribe", "psubscribe"})
"""Channel names that would be counted as a frame's type."""
BATCH_BYTES = 256 * 1024
"""How many bytes of PUBLISH commands one ``sendall`` hands the kernel."""
WINDOW_BATCHES = 8
"""Batches a publisher may have unconfirmed before it waits for replies: the server's output
buffer for it stays bounded, whatever the server's limits."""
PATTERNS_PER_COMMAND = 1000
FILLER = b"x"


def resp_error(data: bytes | bytearray) -> str | None:
    """The first complete error reply (``-CODE text``) in ``data``, which starts where a frame does
    (the chunk where a reader's stream begins) or after a CRLF."""
    start = 0
    if data[:1] != b"-":
        found = data.find(b"\r\n-")
        if found < 0:
            return None
        start = found + 2
    end = data.find(CRLF, start)
    if end < 0:
        return None
    return "server error: " + data[start + 1 : end].decode(errors="replace")


RESP = Dialect(b"\r\n-", resp_error, lead=CRLF)
"""Errors are found after a CRLF, where a frame starts (payloads are filler and channels have no
CRLF); RESP2 servers send subscribers no keepalives."""


def command(*args: bytes) -> bytes:
    """One command as a RESP array of bulk strings."""
    return b"*%d\r\n" % len(args) + b"".join(b"$%d\r\n%b\r\n" % (len(a), a) for a in args)


def never_matching(channel: bytes, count: int) -> Iterator[bytes]:
    """Patterns that can match neither ``channel`` nor the run's marker channel: each needs the
    channel, then ``.never.``, then more."""
    return (b"%b.never.%d.*" % (channel, i) for i in range(count))


def connect(endpoint: Endpoint) -> socket.socket:
    """A RESP connection past AUTH (when the URL has a password) and a PING answered."""

    def handshake(sock: socket.socket) -> None:
        hello = b""
        if endpoint.password is not None:
            user = (endpoint.user.encode(),) if endpoint.user else ()
            hello = command(b"AUTH", *user, endpoint.password.encode())
        sock.sendall(hello + command(b"PING"))
        _await_pong(sock, bool(hello))

    return dial(endpoint, handshake)


def _await_pong(sock: socket.socket, authenticating: bool) -> None:
    """Read the handshake's replies: ``+OK`` to AUTH if it was sent, then ``+PONG``; an error
    among them is the server's refusal."""
    expected = b"+OK\r\n" * authenticating + b"+PONG\r\n"
    buf = b""
    try:
        while buf.count(CRLF) < 1 + authenticating:
            data = sock.recv(4096)
            if not data:
                raise BenchError("server closed the connection")
            buf += data
    except TimeoutError as exc:
        raise BenchError(f"no answer to PING within {CONNECT_TIMEOUT:g} s") from exc
    if buf != expected:
        lines = buf.split(CRLF)
        refusal = next((line for line in lines if line.startswith(b"-")), lines[0])
        raise BenchError(f"server refused the handshake: {refusal.decode(errors='replace')}")


def pipelined(
    sock: socket.socket, reader: Reader, one: bytes, count: int, on_confirmed: Callable[[int], None]
) -> int:
    """Send ``count`` copies of the command ``one`` in batches, with at most ``WINDOW_BATCHES``
    unconfirmed (the reader's first token counts replies); return how many were confirmed once
    all were sent, reporting the count to ``on_confirmed`` as it grows."""
    per_batch = max(1, BATCH_BYTES // len(one))
    batch = one * per_batch
    sent = confirmed = 0
    while sent < count and reader.error is None:
        n = min(per_batch, count - sent)
        sock.sendall(batch if n == per_batch else batch[: n * len(one)])
        sent += n
        polled = reader.poll()
        if polled:
            confirmed += polled[0]
        while sent - confirmed > WINDOW_BATCHES * per_batch and reader.error is None:
            confirmed += reader.read()[0]
        on_confirmed(confirmed)
    while confirmed < sent and reader.error is None:
        confirmed += reader.read()[0]
    return confirmed


def publisher(conn: Connection, job: Job, progress: Progress, slot: int) -> Report:
    with connect(job.endpoint) as sock:
        reader = Reader(sock, REPLY, dialect=RESP)
        conn.send(READY)
        conn.recv()  # GO
        start = time.perf_counter()
        one = command(b"PUBLISH", job.subject, FILLER * job.size)
        confirmed = pipelined(sock, reader, one, job.count, partial(progress.__setitem__, slot))
        if job.done and reader.error is None:
            sock.sendall(command(b"PUBLISH", job.done, b""))
            while not reader.read()[0] and reader.error is None:
                pass
        end = time.perf_counter()
        return Report(confirmed, start, end, reader.error)


def subscriber(conn: Connection, job: Job, progress: Progress, slot: int) -> Report:
    """Holds ``job.patterns`` patterns that never match, then the run's channel and its marker's."""
    marker = b"*3\r\n%b$%d\r\n%b\r\n$0\r\n\r\n" % (MESSAGE, len(job.done), job.done)
    with connect(job.endpoint) as sock:
        reader = Reader(sock, MESSAGE, PMESSAGE, marker, SUBSCRIBED, PSUBSCRIBED, dialect=RESP)
        patterns = list(never_matching(job.subject, job.patterns))
        for i in range(0, len(patterns), PATTERNS_PER_COMMAND):
            sock.sendall(command(b"PSUBSCRIBE", *patterns[i : i + PATTERNS_PER_COMMAND]))
        sock.sendall(command(b"SUBSCRIBE", job.subject, job.done))
        subscribed = 0
        while subscribed < job.patterns + 2:
            *_, channels, patterned = reader.read()
            subscribed += channels + patterned
            if reader.error is not None:
                raise BenchError(reader.error)
        conn.send(READY)
        received = markers = 0
        last = 0.0
        while markers < job.publishers:
            messages, pmessages, done, *_ = reader.read()
            messages += pmessages - done
            if messages:
                last = time.perf_counter()
                received += messages
                progress[slot] = received
            markers += done
        return Report(received, end=last, error=reader.error)
