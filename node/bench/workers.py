"""What runs in the load generator's processes: publishers, subscribers, requesters and responders.

Each role runs in a process of its own, so the load generator uses whatever CPU the server leaves
free and no role waits for another's GIL. A worker talks to the coordinator (``node.bench.scenarios``)
over a pipe: ``READY`` once it is connected and subscribed; publishers and requesters then wait for
``GO``; at the end every worker sends one ``Report``. Its running count goes into a shared array slot
as it works, which the coordinator reads for the progress bar (and for partial counts after a failure)
without interrupting anyone.

Every byte the server will send back is known in advance, because the load generator made it:
payloads are runs of ``x``, so a delivery is one ``MSG `` token and a reply one exact frame. After its
last message each publisher publishes one empty message to the run's ``done`` subject, which every
subscriber also holds: a connection receives one publisher's messages in the order sent, so when a
subscriber has seen every publisher's marker it has received all it is going to, even as a member of
a queue group that cannot know its share in advance.

When subscribers (or the responder) use another server than publishers, a SUB answered by its own
server has not yet reached the publishers' one: interest crosses the route a little later, and what is
published before that is dropped. So the coordinator publishes probes on every subject a worker
subscribes to, from the other server, with the run's ``probe`` subject as their reply; a worker sends
``READY`` only once a probe has arrived on each of its subscriptions. Probes still in flight when the
clock starts are told apart by that reply subject, so the counts stay exact.
"""

from __future__ import annotations

import ctypes
import signal
import time
from collections.abc import Callable
from multiprocessing.connection import Connection

import attrs

from node.bench.wire import BenchError, Endpoint, Reader, connect, flush, pub_lines
from node.nats.protocol import writer as w

__all__ = [
    "GO",
    "READY",
    "Job",
    "Progress",
    "Report",
    "Role",
    "publisher",
    "requester",
    "responder",
    "subscriber",
    "work",
]

READY = "ready"
GO = "go"
BATCH_BYTES = 256 * 1024
"""How many bytes of PUB lines one ``sendall`` hands the kernel."""
MSG = b"MSG "
FILLER = b"x"
"""Payload bytes: no token the workers count can occur in a payload made of them."""

Progress = ctypes.Array[ctypes.c_longlong]


@attrs.frozen
class Job:
    """One worker's orders; the fields a role does not use keep their defaults."""

    endpoint: Endpoint
    subject: bytes
    size: int
    done: bytes
    """The run's marker subject (see the module docstring); empty when nobody needs markers."""
    count: int = 0
    """Messages to publish, or requests to make."""
    queue: bytes | None = None
    publishers: int = 1
    """Markers a subscriber waits for."""
    inbox: bytes = b""
    """Where the requester takes replies."""
    probe: bytes = b""
    """The reply subject of probes (see the module docstring); empty when nothing needs probing."""
    patterns: int = 0
    """Patterns that never match a RESP subscriber holds besides its channel (``node.bench.resp``)."""
    readers: int = 0
    """Blocked reader connections a worker holds, or (the writer) in the whole run, in a
    blocked-readers run (``node.bench.streams``)."""

    @property
    def payload(self) -> bytes:
        return FILLER * self.size


@attrs.frozen
class Report:
    """What a worker did, sent once at its end. Times are ``time.perf_counter()`` readings, which
    are comparable across processes (one system-wide monotonic clock)."""

    count: int
    """Messages published, deliveries received, replies received or requests answered."""
    start: float = 0.0
    """When the first message went out (publishers and requesters)."""
    end: float = 0.0
    """When the last one was confirmed, delivered or answered."""
    error: str | None = None
    latencies: tuple[int, ...] = ()
    """Round trips in nanoseconds (requesters)."""


Role = Callable[[Connection, Job, Progress, int], Report]


def work(role: Role, conn: Connection, job: Job, progress: Progress, slot: int) -> None:
    """A worker process's entry point: play ``role`` and report, whatever happens."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the coordinator's to handle
    try:
        report = role(conn, job, progress, slot)
    except (BenchError, OSError) as exc:
        report = Report(progress[slot], error=_describe(exc))
    conn.send(report)
    conn.close()


def _describe(exc: BenchError | OSError) -> str:
    if isinstance(exc, BenchError):
        return str(exc)
    return f"connection lost: {exc.strerror or exc}"


def _probes(job: Job, *subscriptions: tuple[bytes, bytes]) -> tuple[bytes, ...]:
    """How a probe arrives on each of the worker's (subject, sid) subscriptions: none without probes."""
    if not job.probe:
        return ()
    return tuple(b"MSG %b %b %b " % (subject, sid, job.probe) for subject, sid in subscriptions)


def _await_probes(reader: Reader, probes: int) -> None:
    """Read until a probe has arrived on every subscription (the reader's last ``probes`` tokens);
    before ``GO``, probes are all that can arrive."""
    missing = [True] * probes
    while any(missing):
        counts = reader.read()[-probes:]
        missing = [m and not n for m, n in zip(missing, counts, strict=True)]


def _marker(done: bytes) -> bytes:
    """A publisher's end-of-run marker as delivered on sid 2: exactly, since probes on the same
    subject must not count as one."""
    return w.msg(done, b"2", None, b"")


def publisher(conn: Connection, job: Job, progress: Progress, slot: int) -> Report:
    line = len(w.pub(job.subject, job.payload))
    per_batch = max(1, BATCH_BYTES // line)
    batch = pub_lines(job.subject, job.payload, per_batch)
    with connect(job.endpoint) as sock:
        reader = Reader(sock)  # a server drops a client that leaves its PINGs unanswered for long
        conn.send(READY)
        conn.recv()  # GO
        sent = 0
        start = time.perf_counter()
        while sent < job.count:
            n = min(per_batch, job.count - sent)
            sock.sendall(batch if n == per_batch else batch[: n * line])
            sent += n
            progress[slot] = sent
            reader.poll()
        if job.done:
            sock.sendall(w.pub(job.done, b""))
        flush(sock)
        return Report(sent, start, time.perf_counter(), reader.error)


def subscriber(conn: Connection, job: Job, progress: Progress, slot: int) -> Report:
    with connect(job.endpoint) as sock:
        sock.sendall(w.sub(job.subject, b"1", job.queue) + w.sub(job.done, b"2"))
        flush(sock)
        probes = _probes(job, (job.subject, b"1"), (job.done, b"2"))
        reader = Reader(sock, MSG, _marker(job.done), *probes)
        _await_probes(reader, len(probes))
        conn.send(READY)
        received = markers = 0
        last = 0.0
        while markers < job.publishers:
            msgs, done, *probed = reader.read()
            msgs -= done + sum(probed)
            if msgs:
                last = time.perf_counter()
                received += msgs
                progress[slot] = received
            markers += done
        return Report(received, end=last, error=reader.error)


def requester(conn: Connection, job: Job, progress: Progress, slot: int) -> Report:
    """Sequential requests, one outstanding at a time: each round trip is one latency sample."""
    request = w.pub(job.subject, job.payload, job.inbox)
    with connect(job.endpoint) as sock:
        sock.sendall(w.sub(job.inbox, b"1"))
        flush(sock)
        probes = _probes(job, (job.inbox, b"1"))
        reader = Reader(sock, w.msg(job.inbox, b"1", None, job.payload), *probes)
        _await_probes(reader, len(probes))
        conn.send(READY)
        conn.recv()  # GO
        latencies: list[int] = []
        clock = time.perf_counter_ns
        replies = 0
        start = time.perf_counter()
        for _ in range(job.count):
            sent = clock()
            sock.sendall(request)
            expected = replies + 1
            while replies < expected:
                replies += reader.read()[0]
            latencies.append(clock() - sent)
            progress[slot] = replies
        end = time.perf_counter()
        sock.sendall(w.pub(job.done, b""))
        flush(sock)
        return Report(replies, start, end, reader.error, tuple(latencies))


def responder(conn: Connection, job: Job, progress: Progress, slot: int) -> Report:
    """Echoes the requester's payload to its inbox until the requester's marker arrives."""
    reply = w.pub(job.inbox, job.payload)
    with connect(job.endpoint) as sock:
        sock.sendall(w.sub(job.subject, b"1") + w.sub(job.done, b"2"))
        flush(sock)
        probes = _probes(job, (job.subject, b"1"), (job.done, b"2"))
        request = w.msg(job.subject, b"1", job.inbox, job.payload)
        reader = Reader(sock, request, _marker(job.done), *probes)
        _await_probes(reader, len(probes))
        conn.send(READY)
        answered = done = 0
        while not done:
            requests, done, *_ = reader.read()
            if requests:
                sock.sendall(reply * requests)
                answered += requests
                progress[slot] = answered
        return Report(answered, end=time.perf_counter(), error=reader.error)
