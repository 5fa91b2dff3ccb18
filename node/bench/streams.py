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
"""

from __future__ import annotations

import re
import socket
import time
from functools import partial
from multiprocessing.connection import Connection

from node.bench.resp import RESP, command, connect, pipelined, resp_error
from node.bench.wire import BenchError, Endpoint, Reader
from node.bench.workers import READY, Job, Progress, Report

__all__ = ["BULK", "READ_COUNT", "adder", "consumer", "fill", "group_name"]

BULK = b"$"
"""What each XADD reply holds once: the ``$`` of its bulk string."""
READ_COUNT = 1000
"""Entries one XREADGROUP asks for."""
FIELD = b"f"
FILLER = b"x"
PONG = b"+PONG\r\n"
_ENTRY_ID = re.compile(rb"\*2\r\n\$\d+\r\n(\d+-\d+)\r\n")
_ACKED = re.compile(rb":(\d+)\r\n")


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
