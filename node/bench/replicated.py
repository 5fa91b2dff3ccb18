"""Measurements of replicated Redis keys on a ``ReplicatedCluster`` (``node.bench.replicas``).

All of them work one key of the cluster's first replica group, in a stream named after a hash tag
of that group (``{gN}.<what>.<run>``, fresh each run), with 16 B values:

- **Writes one at a time** (``timed_writes``): one connection sends an ``XADD``, waits for its
  reply, sends the next; each round trip is a latency sample. Any protocol whose reply to a write
  holds one token of the reader's works the same way (JetStream's acks, ``node.bench.jetstream``).
- **Failover** (``failover``): a client writes one ``XADD`` at a time through a node that does not
  lead the group; after a few writes the leader is killed (SIGKILL), between two writes. The time
  runs from the kill until the first write that succeeds after it; a write answered with an error
  (``-CLUSTERDOWN``) is sent again 10 ms later. The killed node is then started again and the
  cluster is let settle (untimed), so the next run starts from three nodes.
- **Catch-up** (``catch_up``): a follower of the group is stopped (SIGTERM), ``entries`` XADDs are
  written through the leader, pipelined, and the follower is started again on its store directory.
  The time runs from its start until its ``/raftz`` shows the group applied up to the leader's
  commit index of the moment it was started; how much of that went to starting the process (until it
  listens) is reported apart.
"""

from __future__ import annotations

import secrets
import socket
import time
from typing import Any

import attrs

from node.bench.replicas import ReplicatedCluster, hash_tag
from node.bench.resp import RESP, command, connect, pipelined
from node.bench.scenarios import Latency
from node.bench.streams import BULK
from node.bench.wire import BenchError, Endpoint, Reader

__all__ = [
    "SIZE",
    "CatchUp",
    "Failover",
    "Writes",
    "catch_up",
    "failover",
    "stream_key",
    "timed_writes",
    "xadd_one_at_a_time",
]

SIZE = 16
WRITE_TIMEOUT = 30.0
"""Seconds one write may wait for its reply."""
WARMUP = 20
"""Writes that must succeed before the leader is killed."""
RETRY_PAUSE = 0.01
FAILOVER_TIMEOUT = 60.0
CATCH_UP_TIMEOUT = 120.0
POLL = 0.01


def stream_key(cluster: ReplicatedCluster, what: str) -> bytes:
    """A fresh key in the cluster's first replica group."""
    tag = hash_tag(cluster.placement, cluster.groups[0])
    return f"{tag}.{what}.{secrets.token_hex(4)}".encode()


def _xadd(key: bytes) -> bytes:
    return command(b"XADD", key, b"*", b"f", b"x" * SIZE)


@attrs.frozen
class Writes:
    """Writes sent one at a time, each after the previous one's reply."""

    requested: int
    done: int
    seconds: float
    latency: Latency
    """Round trips, in microseconds."""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.done == self.requested and self.error is None

    @property
    def rate(self) -> float:
        return self.done / self.seconds if self.seconds > 0 else 0.0

    def failure(self) -> str:
        return f"{self.done:,} of {self.requested:,} writes answered" + (
            f" ({self.error})" if self.error else ""
        )

    def as_dict(self) -> dict[str, Any]:
        return {
            "requested": self.requested,
            "done": self.done,
            "seconds": self.seconds,
            "p50_us": self.latency.p50,
            "p99_us": self.latency.p99,
            "ok": self.ok,
            "error": self.error,
        }


def timed_writes(sock: socket.socket, reader: Reader, one: bytes, count: int) -> Writes:
    """Send ``one`` ``count`` times, each once the last was answered (a token of ``reader``)."""
    samples: list[int] = []
    start = time.perf_counter()
    try:
        for _ in range(count):
            sent = time.perf_counter_ns()
            sock.sendall(one)
            while not reader.read()[0] and reader.error is None:
                pass
            if reader.error is not None:
                break
            samples.append(time.perf_counter_ns() - sent)
    except OSError as exc:
        reader.error = reader.error or f"{type(exc).__name__}: {exc}"
    seconds = time.perf_counter() - start
    return Writes(count, len(samples), seconds, Latency.of(samples), reader.error)


def xadd_one_at_a_time(endpoint: Endpoint, key: bytes, count: int) -> Writes:
    with connect(endpoint) as sock:
        sock.settimeout(WRITE_TIMEOUT)
        return timed_writes(sock, Reader(sock, BULK, dialect=RESP), _xadd(key), count)


def _reply(sock: socket.socket) -> bytes:
    """One reply to an XADD: a bulk string (the ID) or a simple error."""
    buf = bytearray()
    while True:
        data = sock.recv(4096)
        if not data:
            raise BenchError("server closed the connection")
        buf += data
        lines = 2 if buf[:1] == b"$" else 1
        if buf.count(b"\r\n") >= lines:
            return bytes(buf)


@attrs.frozen
class Failover:
    """How long writes to a group failed after its leader was killed."""

    seconds: float
    """From the kill until the first write that succeeded after it."""
    failed_writes: int
    killed: str
    via: str
    new_leader: str = ""
    first_error: str = ""
    """The first error a write was answered with after the kill, if any."""
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    def failure(self) -> str:
        if self.error and self.first_error:
            return f"{self.error} (the first error: {self.first_error})"
        return self.error or ""

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self) | {"ok": self.ok}


def failover(cluster: ReplicatedCluster) -> Failover:
    """One failover run (see the module docstring)."""
    if cluster.replicas < 2:
        raise BenchError("a failover needs replicas of at least 2")
    group = cluster.groups[0]
    one = _xadd(stream_key(cluster, "failover"))
    leader = cluster.leader(group)
    via = next(n for n in cluster.nodes if n is not leader)
    with connect(via.redis) as sock:
        sock.settimeout(WRITE_TIMEOUT)
        for _ in range(WARMUP):
            sock.sendall(one)
            reply = _reply(sock)
            if not reply.startswith(b"$"):
                return Failover(0.0, 0, leader.name, via.name, error=reply.decode().strip())
        cluster.kill(leader)
        try:
            outcome = _first_write(sock, one, leader.name, via.name)
            if outcome.ok:
                outcome = attrs.evolve(outcome, new_leader=cluster.leader(group).name)
        finally:
            cluster.restart(leader)
    cluster.await_ready()
    return outcome


def _first_write(sock: socket.socket, one: bytes, killed: str, via: str) -> Failover:
    """Send ``one`` until a write succeeds, from the moment the leader was killed."""
    start = time.perf_counter()
    failed = 0
    first_error = ""
    try:
        while True:
            sock.sendall(one)
            reply = _reply(sock)
            if reply.startswith(b"$"):
                return Failover(time.perf_counter() - start, failed, killed, via, "", first_error)
            if not failed:
                first_error = (
                    f"{reply.decode(errors='replace').strip()} after {time.perf_counter() - start:.2f} s"
                )
            failed += 1
            if time.perf_counter() - start > FAILOVER_TIMEOUT:
                error = f"no write succeeded within {FAILOVER_TIMEOUT:g} s of the kill"
                return Failover(0.0, failed, killed, via, first_error=first_error, error=error)
            time.sleep(RETRY_PAUSE)
    except (OSError, BenchError) as exc:
        return Failover(0.0, failed, killed, via, error=f"{type(exc).__name__}: {exc}")


@attrs.frozen
class CatchUp:
    """A follower started again after missing ``entries`` writes, until it applied them."""

    entries: int
    seconds: float
    """From its start until its applied index reached the leader's commit index."""
    starting: float
    """Of which until it listened for clients (the process's start)."""
    commit: int
    follower: str
    error: str | None = None

    @property
    def ok(self) -> bool:
        return self.error is None

    @property
    def rate(self) -> float:
        """Entries applied per second once the follower was listening."""
        after = self.seconds - self.starting
        return self.entries / after if after > 0 else 0.0

    def failure(self) -> str:
        return self.error or ""

    def as_dict(self) -> dict[str, Any]:
        return attrs.asdict(self) | {"ok": self.ok, "rate": self.rate}


def catch_up(cluster: ReplicatedCluster, entries: int) -> CatchUp:
    """One catch-up run (see the module docstring)."""
    group = cluster.groups[0]
    leader = cluster.leader(group)
    follower = next(cluster.node(v) for v in cluster.voters(group) if v != leader.name)
    cluster.stop(follower)
    with connect(leader.redis) as sock:
        sock.settimeout(WRITE_TIMEOUT)
        reader = Reader(sock, BULK, dialect=RESP)
        added = pipelined(sock, reader, _xadd(stream_key(cluster, "catchup")), entries, lambda n: None)
    if reader.error is not None or added != entries:
        raise BenchError(reader.error or f"the leader took {added:,} of {entries:,} entries")
    found = leader.group(group)
    commit = int(found["commit"]) if found else 0
    started = time.perf_counter()
    again = cluster.restart(follower)
    starting = time.perf_counter() - started
    while True:
        status = again.group(group)
        if status is not None and status["applied"] >= commit:
            break
        if time.perf_counter() - started > CATCH_UP_TIMEOUT:
            applied = status["applied"] if status else 0
            error = f"applied {applied:,} of {commit:,} after {CATCH_UP_TIMEOUT:g} s"
            return CatchUp(entries, 0.0, starting, commit, follower.name, error)
        time.sleep(POLL)
    seconds = time.perf_counter() - started
    cluster.await_ready()
    return CatchUp(entries, seconds, starting, commit, follower.name)
