"""JetStream publishing over the raw NATS protocol, to set replicated keys beside nats-server's
replicated streams.

A stream is created with a request to ``$JS.API.STREAM.CREATE.<name>`` (file storage, one subject,
``num_replicas`` of the cluster's servers), sent again until JetStream answers it without an error
(a freshly started cluster answers nothing, or an error, until it has elected its meta leader). A
publisher sends ``PUB <subject> <inbox> <payload>`` and counts the acknowledgements on its inbox: a
JetStream ack holds ``"seq":`` once, an error reply none, so a run that lost or refused a message
counts fewer acks than it sent. Publishes are pipelined as ``node.bench.resp`` pipelines commands
(``publish``), or sent one at a time, each after the last one's ack (``publish_one_at_a_time``).
"""

from __future__ import annotations

import json
import socket
import time

from node.bench.replicated import WRITE_TIMEOUT, Writes, timed_writes
from node.bench.resp import pipelined
from node.bench.scenarios import Latency
from node.bench.wire import BenchError, Endpoint, Reader, connect, flush
from node.nats.protocol import writer as w

__all__ = ["ACK", "create_stream", "publish", "publish_one_at_a_time"]

ACK = b'"seq":'
"""What each JetStream ack holds once."""
INBOX = b"_INBOX.bench.js"
READY_TIMEOUT = 60.0
REQUEST_TIMEOUT = 2.0
RETRY_PAUSE = 0.2


def _request(sock: socket.socket, subject: bytes, payload: bytes) -> bytes | None:
    """The payload of the reply to one request; None when none came in time (or no responder)."""
    sock.sendall(w.pub(subject, payload, INBOX + b".api"))
    buf = bytearray()
    deadline = time.monotonic() + REQUEST_TIMEOUT
    while time.monotonic() < deadline:
        sock.settimeout(max(0.01, deadline - time.monotonic()))
        try:
            data = sock.recv(1 << 16)
        except TimeoutError:
            return None
        if not data:
            raise BenchError("server closed the connection")
        buf += data
        while True:
            line, crlf, rest = bytes(buf).partition(b"\r\n")
            if not crlf:
                break
            if line.startswith(b"MSG "):
                size = int(line.rsplit(b" ", 1)[1])
                if len(rest) < size + 2:
                    break
                return rest[:size]
            if line.startswith(b"HMSG "):  # (a status: no responders yet)
                return None
            if line == b"PING":
                sock.sendall(b"PONG\r\n")
            del buf[: len(line) + 2]
    return None


def create_stream(endpoint: Endpoint, name: str, subject: str, replicas: int) -> None:
    """Create the stream (see the module docstring), or raise ``BenchError`` in time."""
    config = {"name": name, "subjects": [subject], "num_replicas": replicas, "storage": "file"}
    request = json.dumps(config).encode()
    deadline = time.monotonic() + READY_TIMEOUT
    last = "no reply"
    with connect(endpoint) as sock:
        sock.sendall(w.sub(INBOX + b".api", b"1"))
        while time.monotonic() < deadline:
            reply = _request(sock, b"$JS.API.STREAM.CREATE." + name.encode(), request)
            if reply is not None:
                found = json.loads(reply)
                if "error" not in found:
                    return
                last = str(found["error"].get("description", found["error"]))
            time.sleep(RETRY_PAUSE)
    raise BenchError(f"JetStream did not create stream {name} within {READY_TIMEOUT:g} s: {last}")


def _publisher(endpoint: Endpoint) -> tuple[socket.socket, Reader]:
    sock = connect(endpoint)
    sock.sendall(w.sub(INBOX + b".ack", b"1"))
    flush(sock)
    sock.settimeout(WRITE_TIMEOUT)
    return sock, Reader(sock, ACK)


def publish(endpoint: Endpoint, subject: str, count: int, size: int) -> Writes:
    """``count`` publishes, pipelined; its latency figures are all zero (none is measured)."""
    sock, reader = _publisher(endpoint)
    one = w.pub(subject.encode(), b"x" * size, INBOX + b".ack")
    with sock:
        start = time.perf_counter()
        try:
            acked = pipelined(sock, reader, one, count, lambda n: None)
        except OSError as exc:
            acked, reader.error = 0, f"{type(exc).__name__}: {exc}"
        seconds = time.perf_counter() - start
    return Writes(count, acked, seconds, Latency(0.0, 0.0, 0.0), reader.error)


def publish_one_at_a_time(endpoint: Endpoint, subject: str, count: int, size: int) -> Writes:
    sock, reader = _publisher(endpoint)
    with sock:
        return timed_writes(sock, reader, w.pub(subject.encode(), b"x" * size, INBOX + b".ack"), count)
