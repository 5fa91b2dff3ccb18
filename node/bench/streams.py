"""The load generator's stream roles, for any Redis-protocol server: adding and consuming entries.

An adder sends pipelined ``XADD key * f <payload>`` commands, as ``node.bench.resp``'s publisher sends
PUBLISH, and counts the replies: each is one bulk string (the new ID), so one ``$`` per reply (IDs
have none, and errors start with ``-``).

A consumption run starts from a stream filled before the clock starts (``fill``: the entries and a
consumer group at the start of the stream). Each consumer then loops: ``XACK`` what it read last,
``XREADGROUP ... COUNT n STREAMS key >`` and a ``PING``, sent together. The ``+PONG`` ends what
came back (no payload, ID or key can hold it); the IDs are the entries' first bulk strings, found by
one regular expression over the reply; the XACK's integer reply counts what was acknowledged. A
consumer stops at the first read that finds nothing new: the stream was full before it started, so
every entry has then gone to some consumer. Its count is the entries the server confirmed acked.

A blocked-readers run measures writes to a stream many clients wait on, as a pool of workers does:
each reader connection loops on ``XREADGROUP GROUP g <own name> COUNT 1 BLOCK 0 STREAMS key >``,
sending the next read as soon as an entry arrives, so all but the few being served are blocked. The
clock starts once the server lists them all blocked (``CLIENT LIST``, flag ``b``). The
writer then sends its XADDs one at a time, each after the previous one's reply, so each finds every
idle reader blocked and is taken by one of them. A reader counts the entries it is given by their
field (``f``). After the last, untimed, the writer adds one end marker per reader (field ``done``):
a reader given one stops reading, so every reader gets exactly one and every reader process ends.
"""

from __future__ import annotations

import re
import selectors
import socket
import time
from functools import partial
from multiprocessing.connection import Connection

from node.bench.resp import RESP, command, connect, pipelined, resp_error
from node.bench.wire import BenchError, Endpoint, Reader, Tally
from node.bench.workers import READY, Job, Progress, Report

__all__ = [
    "BULK",
    "READERS_PER_WORKER",
    "READ_COUNT",
    "adder",
    "await_blocked",
    "blocked_reader",
    "consumer",
    "create_group",
    "fill",
    "group_name",
    "writer",
]

BULK = b"$"
"""What each XADD reply holds once: the ``$`` of its bulk string."""
READ_COUNT = 1000
"""Entries one XREADGROUP asks for."""
FIELD = b"f"
FILLER = b"x"
PONG = b"+PONG\r\n"
_ENTRY_ID = re.compile(rb"\*2\r\n\$\d+\r\n(\d+-\d+)\r\n")
_ACKED = re.compile(rb":(\d+)\r\n")
READERS_PER_WORKER = 500
"""Blocked reader connections one worker process holds."""
DONE = b"done"
"""The field of a blocked-readers run's end markers."""
_GIVEN = b"$1\r\n%b\r\n" % FIELD
_DONE_GIVEN = b"$%d\r\n%b\r\n" % (len(DONE), DONE)
_BLOCKED = re.compile(rb" flags=[a-zA-Z]*b")
"""A blocked client in CLIENT LIST."""
_BLOCKED_POLL = 0.05


def group_name(key: bytes) -> bytes:
    return key + b".group"


def _xadd(job: Job) -> bytes:
    return command(b"XADD", job.subject, b"*", FIELD, FILLER * job.size)


def adder(conn: Connection, job: Job, progress: Progress, slot: int) -> Report:
    with connect(job.endpoint) as sock:
        reader = Reader(sock, BULK, dialect=RESP)
        conn.send(READY)
        conn.recv()  # GO
        start = time.perf_counter()
        added = pipelined(sock, reader, _xadd(job), job.count, partial(progress.__setitem__, slot))
        return Report(added, start, time.perf_counter(), reader.error)


def fill(endpoint: Endpoint, job: Job) -> None:
    """Add ``job.count`` entries to ``job.subject`` and create its group at the start (untimed)."""
    with connect(endpoint) as sock:
        reader = Reader(sock, BULK, dialect=RESP)
        added = pipelined(sock, reader, _xadd(job), job.count, lambda n: None)
        if reader.error is not None or added != job.count:
            raise BenchError(reader.error or f"the stream took {added:,} of {job.count:,} entries")
        sock.sendall(command(b"XGROUP", b"CREATE", job.subject, group_name(job.subject), b"0"))
        reply = _until(sock, b"\r\n", bytearray())
        if reply != b"+OK\r\n":
            raise BenchError(f"XGROUP CREATE: {reply.decode(errors='replace').strip()}")


def create_group(endpoint: Endpoint, key: bytes) -> None:
    """Create ``key`` empty, with its group at the start (untimed)."""
    with connect(endpoint) as sock:
        sock.sendall(command(b"XGROUP", b"CREATE", key, group_name(key), b"$", b"MKSTREAM"))
        reply = _until(sock, b"\r\n", bytearray())
        if reply != b"+OK\r\n":
            raise BenchError(f"XGROUP CREATE: {reply.decode(errors='replace').strip()}")


def await_blocked(endpoint: Endpoint, count: int, timeout: float) -> None:
    """Wait until the server lists at least ``count`` clients blocked (``CLIENT LIST``)."""
    deadline = time.monotonic() + timeout
    with connect(endpoint) as sock:
        while True:
            sock.sendall(command(b"CLIENT", b"LIST"))
            blocked = len(_BLOCKED.findall(_bulk(sock)))
            if blocked >= count:
                return
            if time.monotonic() > deadline:
                raise BenchError(f"{blocked:,} of {count:,} readers blocked after {timeout:g} s")
            time.sleep(_BLOCKED_POLL)


def _bulk(sock: socket.socket) -> bytes:
    """The next reply, which must be a bulk string."""
    buf = bytearray()
    while True:
        data = sock.recv(1 << 16)
        if not data:
            raise BenchError("server closed the connection")
        buf += data
        head = buf.find(b"\r\n")
        if head < 0:
            continue
        if buf[:1] != b"$":
            raise BenchError(f"not a bulk string: {bytes(buf[:head]).decode(errors='replace')}")
        start = head + 2
        end = start + int(buf[1:head])
        if len(buf) >= end + 2:
            return bytes(buf[start:end])


def blocked_reader(conn: Connection, job: Job, progress: Progress, slot: int) -> Report:
    """``job.readers`` reader connections of a blocked-readers run (see the module docstring)."""
    key, group = job.subject, group_name(job.subject)
    socks: list[socket.socket] = []
    try:
        with selectors.DefaultSelector() as selector:
            for i in range(job.readers):
                sock = connect(job.endpoint)
                socks.append(sock)
                read = command(
                    b"XREADGROUP", b"GROUP", group, b"c%d.%d" % (slot, i), b"COUNT", b"1",
                    b"BLOCK", b"0", b"STREAMS", key, b">",
                )  # fmt: skip
                tally = Tally(_GIVEN, _DONE_GIVEN, RESP.error, lead=RESP.lead)
                selector.register(sock, selectors.EVENT_READ, (read, tally))
                sock.sendall(read)
            conn.send(READY)
            return _read_until_done(selector, len(socks), progress, slot)
    finally:
        for sock in socks:
            sock.close()


def _read_until_done(
    selector: selectors.BaseSelector, readers: int, progress: Progress, slot: int
) -> Report:
    """Count the entries given to the readers, each asking again once given one, until every
    reader has had its end marker."""
    buf = bytearray(1 << 16)
    given = 0
    last = 0.0
    while readers:
        for key, _ in selector.select():
            sock = key.fileobj
            assert isinstance(sock, socket.socket)
            read, tally = key.data
            size = sock.recv_into(buf)
            if not size:
                raise BenchError("server closed the connection")
            entries, done, errors = tally.feed(buf, size)
            if errors:
                return Report(given, end=last, error=resp_error(buf[:size]) or "server sent an error")
            if entries:
                given += entries
                last = time.perf_counter()
                progress[slot] = given
            if done:
                selector.unregister(sock)
                readers -= 1
            elif entries:
                sock.sendall(read)
    return Report(given, end=last)


def writer(conn: Connection, job: Job, progress: Progress, slot: int) -> Report:
    """The XADDs of a blocked-readers run, one at a time; then the untimed end markers."""
    with connect(job.endpoint) as sock:
        reader = Reader(sock, BULK, dialect=RESP)
        one = _xadd(job)
        conn.send(READY)
        conn.recv()  # GO
        start = time.perf_counter()
        added = 0
        while added < job.count and reader.error is None:
            sock.sendall(one)
            while not reader.read()[0] and reader.error is None:
                pass
            added += 1
            progress[slot] = added
        end = time.perf_counter()
        marker = command(b"XADD", job.subject, b"*", DONE, b"1")
        if reader.error is None:
            pipelined(sock, reader, marker, job.readers, lambda n: None)
        return Report(added, start, end, reader.error)


def _until(sock: socket.socket, end: bytes, buf: bytearray) -> bytes:
    """Read into ``buf`` until it ends with ``end``; return it as bytes."""
    while not buf.endswith(end):
        data = sock.recv(1 << 20)
        if not data:
            raise BenchError("server closed the connection")
        buf += data
    return bytes(buf)


def consumer(conn: Connection, job: Job, progress: Progress, slot: int) -> Report:
    key, group = job.subject, group_name(job.subject)
    read = command(
        b"XREADGROUP",
        b"GROUP",
        group,
        b"c%d" % slot,
        b"COUNT",
        b"%d" % READ_COUNT,
        b"STREAMS",
        key,
        b">",
    )
    ping = command(b"PING")
    with connect(job.endpoint) as sock:
        conn.send(READY)
        conn.recv()  # GO
        start = time.perf_counter()
        acked = 0
        ack = b""
        while True:
            sock.sendall(ack + read + ping)
            reply = _until(sock, PONG, bytearray())
            error = resp_error(reply)
            if error is not None:
                return Report(acked, start, time.perf_counter(), error)
            if ack:
                found = _ACKED.match(reply)
                acked += int(found[1]) if found else 0
                progress[slot] = acked
            ids = _ENTRY_ID.findall(reply)
            if not ids:
                break
            ack = command(b"XACK", key, group, *ids)
        return Report(acked, start, time.perf_counter())
