"""Replicated streams under chaos (``deploy/chaos.py``): writers on every node that holds replica
groups, and the judge of what the replicas hold once the deployment healed.

While each fault lasts, one writer per such node adds entries (``XADD key * w <node> s <seq>``) to
the run's streams through that node's Redis port, one at a time, and records each outcome: *acked*
(the node answered with an ID) or *unknown* (an error, a lost connection, a timeout: a proposal
that timed out may still commit, so the write may or may not have been made). A node that does not
answer at all (stopped, frozen, off the network) takes no writes while it is so.

After the heal, once the deployment converged (every group led by one leader its members agree on,
and no member recovering from an empty store: ``group_disagreements``), the judge reads every
stream from each of those nodes' own replica (``READONLY``) and waits, bounded, for them to agree.
Then every acknowledged entry must be on every replica exactly once, with the ID it was
acknowledged with; no entry may be there twice; every replica must hold the same entries in the
same order; and nothing may be there that no writer sent.
"""

from __future__ import annotations

import asyncio
import time
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import redis.asyncio
import redis.exceptions
from redis.asyncio.retry import Retry
from redis.backoff import NoBackoff

__all__ = ["Entry", "Streams", "Writes", "group_disagreements", "replica_problems"]

KEYS = 6
"""Streams per run, each under a hash tag of its own (so over the deployment's groups)."""
AGREE_TIMEOUT = 30.0
"""Seconds the judge waits for every replica to hold every acknowledged entry."""
TIMEOUT = 2.0

Entry = tuple[bytes, bytes, bytes]
"""(ID, writer, sequence number) of a stream entry."""


class Monitored(Protocol):
    service: str
    redis_port: int

    def get(self, path: str) -> dict[str, Any]: ...


@dataclass
class Writes:
    """What writers sent: acknowledged entries by stream, and how many writes came to nothing
    known; ``sent`` is every (writer, sequence number) sent, acknowledged or not."""

    acked: dict[bytes, list[Entry]] = field(default_factory=dict)
    unknown: int = 0
    sent: set[tuple[bytes, bytes]] = field(default_factory=set)

    @property
    def count(self) -> int:
        return sum(map(len, self.acked.values()))


def groups_of(node: Monitored) -> dict[str, dict[str, Any]]:
    return {group["name"]: group for group in node.get("/raftz")["groups"]}


def group_disagreements(nodes: Sequence[Monitored]) -> list[str]:
    """What keeps the replica groups from having converged: a group without one leader all its
    members name, or a member still recovering or unable to save (empty when none, or when no node
    has groups)."""
    problems: list[str] = []
    named: dict[str, set[str]] = {}
    for node in nodes:
        for name, group in groups_of(node).items():
            named.setdefault(name, set()).add(group["leader"])
            if group["recovering"]:
                problems.append(f"{node.service} recovers its replica of {name}")
            if group["disk_error"]:
                problems.append(f"{node.service} cannot save {name}: {group['disk_error']}")
    for name, leaders in sorted(named.items()):
        if len(leaders) != 1 or "" in leaders:
            problems.append(f"group {name} has no leader all its members name: {sorted(leaders)}")
    return problems


def replica_problems(replicas: dict[str, dict[bytes, list[Entry]]], writes: Writes) -> list[str]:
    """What the replicas (node -> stream -> entries, in order) hold that they must not, or lack,
    given everything the writers sent (``writes``)."""
    problems: list[str] = []
    nodes = sorted(replicas)
    for key in sorted({key for held in replicas.values() for key in held} | set(writes.acked)):
        copies = {node: replicas[node].get(key, []) for node in nodes}
        first = copies[nodes[0]] if nodes else []
        for node in nodes[1:]:
            if copies[node] != first:
                problems.append(f"{key.decode()}: {node}'s replica differs from {nodes[0]}'s "
                                f"({len(copies[node])} and {len(first)} entries)")  # fmt: skip
        for node, entries in copies.items():
            counted = Counter((writer, seq) for _, writer, seq in entries)
            twice = [f"{w.decode()}#{s.decode()}" for (w, s), n in counted.items() if n > 1]
            if twice:
                problems.append(f"{key.decode()} on {node}: twice {twice[:3]}")
            strays = [f"{w.decode()}#{s.decode()}" for w, s in counted if (w, s) not in writes.sent]
            if strays:
                problems.append(f"{key.decode()} on {node}: entries no writer sent {strays[:3]}")
            held = set(entries)
            missing = [e for e in writes.acked.get(key, []) if e not in held]
            if missing:
                lost = [f"{e[1].decode()}#{e[2].decode()} ({e[0].decode()})" for e in missing[:3]]
                problems.append(f"{key.decode()} on {node}: {len(missing)} acknowledged entries "
                                f"missing or under another ID: {lost}")  # fmt: skip
    return problems


class Streams:
    """The run's streams, written through every node with replica groups (see the docstring)."""

    def __init__(self, run_id: str) -> None:
        self.keys = [b"chaos:{%s-%d}" % (run_id.encode(), n) for n in range(KEYS)]
        self.writes = Writes()
        """Everything written in the run so far."""
        self._seq = 0

    @staticmethod
    def holders(nodes: Sequence[Monitored]) -> set[str]:
        """The nodes that hold replica groups, by service (none: the deployment replicates no keys)."""
        return {node.service for node in nodes if groups_of(node)}

    async def write(self, nodes: Sequence[Monitored], stop: asyncio.Event) -> tuple[int, int]:
        """Write through every node of ``nodes`` until ``stop``: (acknowledged, unknown) writes."""
        before = (self.writes.count, self.writes.unknown)
        await asyncio.gather(*(self._writer(node, stop) for node in nodes))
        return self.writes.count - before[0], self.writes.unknown - before[1]

    async def _writer(self, node: Monitored, stop: asyncio.Event) -> None:
        writes, writer = self.writes, node.service.encode()
        client: redis.asyncio.Redis | None = None
        try:
            while not stop.is_set():
                if client is None:
                    client = redis.asyncio.Redis(
                        port=node.redis_port,
                        socket_timeout=TIMEOUT,
                        socket_connect_timeout=TIMEOUT,
                        retry=Retry(NoBackoff(), 0),
                    )  # fmt: skip  (redis-py resends a command by default: a duplicate of its own)
                self._seq += 1
                key, number = self.keys[self._seq % len(self.keys)], b"%d" % self._seq
                try:
                    await client.ping()
                except (redis.exceptions.RedisError, OSError):
                    await client.aclose()
                    client = None
                    await asyncio.sleep(0.2)  # (the node does not answer: nothing was sent)
                    continue
                writes.sent.add((writer, number))
                try:
                    entry_id = await _call(client, b"XADD", key, b"*", b"w", writer, b"s", number)
                except (redis.exceptions.RedisError, OSError):
                    writes.unknown += 1
                    await client.aclose()
                    client = None
                    continue
                writes.acked.setdefault(key, []).append((entry_id, writer, number))
        finally:
            if client is not None:
                await client.aclose()

    async def read(self, node: Monitored) -> dict[bytes, list[Entry]]:
        """Every stream of the run as ``node``'s own replica holds it."""
        client = redis.asyncio.Redis(port=node.redis_port, socket_timeout=10)
        try:
            await _call(client, b"READONLY")
            held: dict[bytes, list[Entry]] = {}
            for key in self.keys:
                entries = await _call(client, b"XRANGE", key, b"-", b"+")
                held[key] = [(i, *_writer_of(fields)) for i, fields in entries]
            return held
        finally:
            await client.aclose()

    async def judge(self, nodes: Sequence[Monitored]) -> list[str]:
        """Problems with what the replicas of ``nodes`` hold, given everything written so far
        (waiting, bounded, for them to agree)."""
        deadline = time.monotonic() + AGREE_TIMEOUT
        while True:
            try:
                replicas = {node.service: await self.read(node) for node in nodes}
                problems = replica_problems(replicas, self.writes)
            except (redis.exceptions.RedisError, OSError) as exc:
                problems = [f"a replica could not be read: {exc!r}"]
            if not problems or time.monotonic() > deadline:
                return problems
            await asyncio.sleep(0.5)


async def _call(client: redis.asyncio.Redis, *args: bytes) -> Any:
    return await client.execute_command(*args)  # type: ignore[no-untyped-call]


def _writer_of(fields: list[bytes]) -> tuple[bytes, bytes]:
    """(writer, sequence number) of an entry's fields (``w`` and ``s``)."""
    pairs = dict(zip(fields[::2], fields[1::2], strict=True))
    return pairs.get(b"w", b""), pairs.get(b"s", b"")
