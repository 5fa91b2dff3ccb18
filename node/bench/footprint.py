"""``pubmesh bench memory``: how much resident memory a server process gains per connection.

The server's RSS (``VmRSS`` in ``/proc/<pid>/status``, so the server must run on this machine) is
read before and after ``connections`` clients connect, and the growth divided by their number.
Three kinds of client:

- ``nats-idle``: a NATS client past its handshake (INFO, CONNECT, PING answered), then silent;
- ``resp-idle``: a RESP client that has sent one PING and had its PONG, then silent;
- ``resp-blocked``: a RESP client past that PING, blocked in ``XREADGROUP ... BLOCK 0`` on a stream
  nobody writes to (all of one group, each under its own consumer name). The figure is the whole
  cost of such a client, its connection included; the clock for reading RSS starts once the server
  lists them all blocked.

A few connections of the same kind are made and closed first, and the server given a moment, so
the first-use allocations (buffers, caches a first client brings into being) are not charged to
the measured ones; then the measured clients are left idle for ``IDLE`` seconds, so what a server
gives back from idle clients is not charged either. Memory freed by earlier clients may be
reused without showing in RSS, so each measurement wants a server of its own, freshly started.
The clients stay connected until RSS has been read; each run's stream is deleted afterwards.

Each client is one file descriptor here and one in the server: ``raise_fd_limit`` lifts this
process's soft limit to its hard one (servers started afterwards inherit it).
"""

from __future__ import annotations

import contextlib
import resource
import secrets
import socket
import time
from pathlib import Path
from typing import Any, Literal

import attrs

from node.bench import resp, streams, wire
from node.bench.wire import BenchError, Endpoint

__all__ = ["KINDS", "Footprint", "describe", "measure", "raise_fd_limit", "vm_rss"]

Kind = Literal["nats-idle", "resp-idle", "resp-blocked"]
KINDS: tuple[Kind, ...] = ("nats-idle", "resp-idle", "resp-blocked")
WARMUP = 50
"""Connections made and closed before the baseline is read."""
SETTLE = 0.5
"""Seconds the server is left alone before the baseline is read."""
IDLE = 10.0
"""Seconds the clients are left idle before RSS is read: redis-server frees the input buffer of a
client idle for 2 s (visiting every client about once a second), and its allocator gives the freed
pages back to the system some seconds later."""
SPARE_FDS = 64
"""Descriptors this process needs besides the clients' (servers' logs, pipes, the control client)."""
BLOCK_TIMEOUT = 60.0


def raise_fd_limit() -> int:
    """Lift the soft limit on open files to the hard one; the limit now in force."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    if hard == resource.RLIM_INFINITY or soft < hard:
        with contextlib.suppress(ValueError, OSError):
            resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def vm_rss(status: str) -> int:
    """Bytes of ``VmRSS`` in the text of a ``/proc/<pid>/status``."""
    for line in status.splitlines():
        name, _, value = line.partition(":")
        if name == "VmRSS":
            number, _, unit = value.strip().partition(" ")
            if unit.strip() != "kB" or not number.isdigit():
                break
            return int(number) * 1024
    raise BenchError("no VmRSS in kB in the process's status")


def _rss(pid: int) -> int:
    try:
        return vm_rss(Path(f"/proc/{pid}/status").read_text())
    except OSError as exc:
        raise BenchError(f"cannot read the memory of process {pid}: {exc.strerror or exc}") from exc


@attrs.frozen
class Footprint:
    """RSS before and after the clients connected."""

    url: str
    kind: str
    connections: int
    before: int
    after: int
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def per_connection(self) -> float:
        return (self.after - self.before) / self.connections

    def failure(self) -> str:
        return self.error or ""

    def as_dict(self) -> dict[str, Any]:
        return {
            **attrs.asdict(self),
            "bytes_per_connection": self.per_connection,
            "ok": self.ok,
        }


def measure(endpoint: Endpoint, pid: int, kind: Kind, connections: int) -> Footprint:
    """Connect ``connections`` clients of ``kind`` to the server ``pid`` listening at ``endpoint``."""
    if connections < 1:
        raise BenchError("--connections must be positive")
    if kind not in KINDS:
        raise BenchError(f"unknown kind of client {kind!r}: one of {', '.join(KINDS)}")
    if (endpoint.scheme == "nats") != (kind == "nats-idle"):
        raise BenchError(f"{kind} needs a {'nats' if kind == 'nats-idle' else 'redis'}:// URL")
    limit = raise_fd_limit()
    if connections + WARMUP + SPARE_FDS > limit:
        raise BenchError(f"{connections:,} connections need more than this process's {limit:,} files")
    key = b"bench.memory.%b" % secrets.token_hex(4).encode()
    if kind == "resp-blocked":
        streams.create_group(endpoint, key)
    try:
        _close(_clients(endpoint, kind, key, WARMUP))
        time.sleep(SETTLE)
        before = _rss(pid)
        socks = _clients(endpoint, kind, key, connections)
        try:
            time.sleep(IDLE)
            after = _rss(pid)
        finally:
            _close(socks)
    finally:
        if kind == "resp-blocked":
            _delete(endpoint, key)
    return Footprint(endpoint.url, kind, connections, before, after)


def _clients(endpoint: Endpoint, kind: Kind, key: bytes, count: int) -> list[socket.socket]:
    """``count`` open clients of ``kind``, blocked once the server says so if they are readers."""
    socks: list[socket.socket] = []
    try:
        for i in range(count):
            socks.append(wire.connect(endpoint) if kind == "nats-idle" else resp.connect(endpoint))
            if kind == "resp-blocked":
                group = streams.group_name(key)
                socks[-1].sendall(
                    resp.command(b"XREADGROUP", b"GROUP", group, b"c%d" % i, b"COUNT", b"1",
                                 b"BLOCK", b"0", b"STREAMS", key, b">")
                )  # fmt: skip
        if kind == "resp-blocked":
            streams.await_blocked(endpoint, count, BLOCK_TIMEOUT)
    except BaseException:
        _close(socks)
        raise
    return socks


def _close(socks: list[socket.socket]) -> None:
    for sock in socks:
        sock.close()


def _delete(endpoint: Endpoint, key: bytes) -> None:
    with resp.connect(endpoint) as sock:
        sock.sendall(resp.command(b"DEL", key))
        sock.recv(64)


def describe(footprint: Footprint) -> str:
    grown = footprint.after - footprint.before
    return "\n".join(
        [
            f"memory: {footprint.connections:,} {footprint.kind} clients at {footprint.url}",
            f"  RSS {footprint.before / 2**20:,.1f} MiB -> {footprint.after / 2**20:,.1f} MiB"
            f" ({grown / 2**20:+,.1f} MiB): {footprint.per_connection:,.0f} B per client",
        ]
    )
