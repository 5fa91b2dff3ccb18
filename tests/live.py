"""A node running as its own process, for attack and fuzz tests: its memory is measured from outside,
and a canary client proves it still serves everyone else."""

from __future__ import annotations

import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager

import attrs

from pipeline.local import free_port

WAIT = 20.0


@attrs.define
class LiveNode:
    """A ``pubmesh serve`` process on 127.0.0.1."""

    process: subprocess.Popen[bytes]
    port: int
    http_port: int
    redis_port: int | None = None
    """The Redis port, when started with ``redis=True``."""

    def rss(self) -> int:
        """Resident memory of the node's process, in bytes."""
        with open(f"/proc/{self.process.pid}/status") as status:
            for line in status:
                if line.startswith("VmRSS:"):
                    return int(line.split()[1]) * 1024
        raise RuntimeError("no VmRSS")

    def assert_serving(self) -> None:
        """A fresh client is greeted, answered and can round-trip a message: the node is healthy."""
        assert self.process.poll() is None, "the node process has exited"
        with socket.create_connection(("127.0.0.1", self.port), timeout=WAIT) as canary:
            got = _read_until(canary, b"\r\n")
            assert got.startswith(b"INFO "), got
            canary.sendall(
                b'CONNECT {"verbose":false}\r\nSUB canary 1\r\nPUB canary 2\r\nok\r\nPING\r\n'
            )
            got = _read_until(canary, b"PONG\r\n")
            assert b"MSG canary 1 2\r\nok\r\n" in got, got

    def assert_redis_serving(self) -> None:
        """A fresh Redis client is answered and can round-trip a message through a channel."""
        assert self.process.poll() is None, "the node process has exited"
        assert self.redis_port is not None
        with socket.create_connection(("127.0.0.1", self.redis_port), timeout=WAIT) as sub:
            sub.sendall(b"SUBSCRIBE canary\r\n")
            assert _read_until(sub, b":1\r\n").endswith(b"$6\r\ncanary\r\n:1\r\n")
            with socket.create_connection(("127.0.0.1", self.redis_port), timeout=WAIT) as pub:
                pub.sendall(b"PUBLISH canary ok\r\n")
                assert _read_until(pub, b"\r\n") == b":1\r\n"
            assert _read_until(sub, b"ok\r\n").endswith(b"$6\r\ncanary\r\n$2\r\nok\r\n")

    def http_get(self, path: str) -> tuple[int, bytes]:
        """One monitoring request: (status, body)."""
        with socket.create_connection(("127.0.0.1", self.http_port), timeout=WAIT) as conn:
            conn.sendall(f"GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n".encode())
            return parse_http(read_all(conn))


def parse_http(response: bytes) -> tuple[int, bytes]:
    head, _, body = response.partition(b"\r\n\r\n")
    status = int(head.split(b" ", 2)[1])
    return status, body


def read_all(conn: socket.socket) -> bytes:
    """Everything until the peer closes (or the timeout)."""
    chunks = []
    try:
        while chunk := conn.recv(1 << 16):
            chunks.append(chunk)
    except (TimeoutError, ConnectionResetError):
        pass
    return b"".join(chunks)


def _read_until(conn: socket.socket, end: bytes) -> bytes:
    got = b""
    while end not in got:
        chunk = conn.recv(1 << 16)
        if not chunk:
            break
        got += chunk
    return got


@contextmanager
def live_node(*flags: str, redis: bool = False, ports: LiveNode | None = None) -> Iterator[LiveNode]:
    """Run a node with these extra flags (and a Redis port, if asked) until the block ends (then
    kill it); on the ports of ``ports`` (a node that ran before), else on free ones."""
    port = ports.port if ports is not None else free_port()
    http_port = ports.http_port if ports is not None else free_port()
    args = [sys.executable, "-m", "node.run.cli", "serve", "-a", "127.0.0.1", "-p", str(port)]
    args += ["-m", str(http_port), "--http_host", "127.0.0.1", *flags]
    redis_port = None
    if redis:
        redis_port = ports.redis_port if ports is not None else free_port()
    if redis_port is not None:
        args += ["--redis_port", str(redis_port)]
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    node = LiveNode(process, port, http_port, redis_port)
    try:
        deadline = time.monotonic() + WAIT
        while True:
            try:
                node.assert_serving()
                if redis_port is not None:
                    node.assert_redis_serving()
                if node.http_get("/healthz")[0] == 200:
                    break
            except OSError:
                if time.monotonic() > deadline or process.poll() is not None:
                    raise
                time.sleep(0.05)
        yield node
    finally:
        process.kill()
        process.wait(WAIT)
