"""The pieces of a Jepsen-style test of replicated keys over real processes: ``pubmesh serve``
nodes (started, SIGKILLed, paused, restarted on their stores), writers that record every
operation's outcome, and each replica's state read back from its own Raft storage.

A writer's operation is **acked** (the node answered with an ID or a value), or **unknown** (the
connection dropped or timed out, or the node answered ``-CLUSTERDOWN``: a proposal that timed out
may still commit later, so that error says nothing about whether the change happened). No reply
is taken to mean "not applied".

``replica_state`` reads one node's copy of a group after the node stopped: its snapshot, then the
entries of its log up to the commit index it persisted, applied through the same state machine
the node runs, into an empty keyspace. That is the replica's own committed state, not the
leader's answer for it.
"""

from __future__ import annotations

import json
import random
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Any, TypeVar

import attrs
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from cluster.placement import Layout, SlotGroup, hash_slot
from cluster.raft import EntryKind
from cluster.replication.storage import RaftStorage
from node.broker import Broker
from node.config.options import Config
from node.data.streams import MAX_ID, Stream, format_id
from node.replicated.machine import KeyspaceMachine
from node.resp.executor import CommandExecutor
from pipeline.local import free_port

T = TypeVar("T")
ROOT = Path(__file__).resolve().parents[3]
WAIT = 30.0


def wait(predicate: Callable[[], T | None], what: str, seconds: float = WAIT) -> T:
    deadline = time.monotonic() + seconds
    while (found := predicate()) is None or found is False:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)
    return found


@attrs.define
class Node:
    """One ``pubmesh serve`` process and its ports, store and configuration file."""

    name: str
    root: Path
    port: int = attrs.field(factory=free_port)
    route_port: int = attrs.field(factory=free_port)
    http_port: int = attrs.field(factory=free_port)
    redis_port: int = attrs.field(factory=free_port)
    process: subprocess.Popen[bytes] | None = None
    paused: bool = False

    @property
    def store(self) -> Path:
        return self.root / self.name

    @property
    def config(self) -> Path:
        return self.root / f"{self.name}.toml"

    def configure(
        self,
        members: tuple[str, ...],
        routes: list[int],
        tick: str,
        *,
        propose_timeout: str = "2s",
        snapshot_entries: int = 8192,
    ) -> None:
        self.store.mkdir(parents=True, exist_ok=True)
        seeds = ", ".join(f'"nats://127.0.0.1:{port}"' for port in routes if port != self.route_port)
        names = ", ".join(f'"{name}"' for name in members)
        self.config.write_text(
            f'server_name = "{self.name}"\nhost = "127.0.0.1"\nport = {self.port}\n'
            f'http_host = "127.0.0.1"\nhttp_port = {self.http_port}\n'
            f'store_dir = "{self.store}"\n\n'
            f'[cluster]\nname = "jepsen"\nlisten = "127.0.0.1:{self.route_port}"\n'
            f"routes = [{seeds}]\nping_interval = 0.5\nping_max = 3\n\n"
            f'[redis]\nhost = "127.0.0.1"\nport = {self.redis_port}\nreplicas = 3\n\n'
            f'[replication]\ntick = "{tick}"\nelection_ticks = 10\n'
            f'propose_timeout = "{propose_timeout}"\nsnapshot_entries = {snapshot_entries}\n'
            f"members = [{names}]\n"
        )

    def start(self) -> None:
        with (self.root / f"{self.name}.log").open("ab") as log:
            self.process = subprocess.Popen(
                [sys.executable, "-m", "node.run.cli", "serve", "-c", str(self.config)],
                cwd=ROOT, stdout=subprocess.DEVNULL, stderr=log,
            )  # fmt: skip
        self.paused = False

    @property
    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def kill(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGKILL)
        self.process.wait(WAIT)
        self.process = None
        self.paused = False

    def pause(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGSTOP)
        self.paused = True

    def resume(self) -> None:
        assert self.process is not None
        self.process.send_signal(signal.SIGCONT)
        self.paused = False

    def stop(self) -> int:
        """SIGTERM, then wait for the exit (SIGKILL after a while): the exit status."""
        assert self.process is not None
        if self.paused:
            self.resume()
        self.process.send_signal(signal.SIGTERM)
        try:
            code = self.process.wait(15)
        except subprocess.TimeoutExpired:
            self.process.kill()
            code = self.process.wait(WAIT)
        self.process = None
        return code

    def raftz(self) -> dict[str, dict[str, Any]] | None:
        """Each group's /raftz record, by name (None: no answer)."""
        if not self.alive or self.paused:
            return None
        try:
            with socket.create_connection(("127.0.0.1", self.http_port), timeout=2) as conn:
                conn.sendall(b"GET /raftz HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n")
                chunks = []
                while chunk := conn.recv(1 << 16):
                    chunks.append(chunk)
        except OSError:
            return None
        _, _, body = b"".join(chunks).partition(b"\r\n\r\n")
        try:
            doc = json.loads(body)
        except ValueError:
            return None
        return {group["name"]: group for group in doc["groups"]}

    def redis(self, timeout: float = 5.0) -> redis.Redis:
        """A client that never sends a command twice (redis-py retries by default: a retried
        XADD whose first send was applied would be a duplicate the client made)."""
        return redis.Redis(
            host="127.0.0.1", port=self.redis_port, socket_timeout=timeout,
            socket_connect_timeout=timeout, retry=Retry(NoBackoff(), 0),
        )  # fmt: skip


def report(nodes: list[Node], lines: int = 40) -> None:
    """Print what each node says of its groups (``/raftz``) and the end of its log, for a test
    that failed with them running (pytest shows it beside the failure)."""
    for node in nodes:
        state = "paused" if node.paused else "running" if node.alive else "down"
        print(f"--- node {node.name} ({state})", file=sys.stderr)
        for name, group in sorted((node.raftz() or {}).items()):
            shown = {k: group.get(k) for k in ("role", "term", "leader", "recovering", "commit")}
            print(f"    {name}: {shown}", file=sys.stderr)
        log = node.root / f"{node.name}.log"
        if log.exists():
            tail = log.read_text(errors="replace").splitlines()[-lines:]
            print("\n".join(f"    {line[:240]}" for line in tail), file=sys.stderr)


def stop_all(nodes: list[Node]) -> None:
    """Stop every node still running (a test's cleanup, whatever failed)."""
    for node in nodes:
        if node.process is not None:
            node.stop()


@contextmanager
def cluster(
    names: tuple[str, ...], root: Path, *, propose_timeout: str = "2s"
) -> Iterator[dict[str, Node]]:
    """The nodes ``names``, one cluster on a 50 ms Raft tick, started (by name); every one still
    running is stopped on the way out, whatever failed (a failure prints their ``report`` first)."""
    nodes = {name: Node(name, root) for name in names}
    everyone = list(nodes.values())
    try:
        for node in everyone:
            node.configure(
                names, [n.route_port for n in everyone], "50ms", propose_timeout=propose_timeout
            )
            node.start()
        yield nodes
    except BaseException:
        report(everyone)
        raise
    finally:
        stop_all(everyone)


def leaders(nodes: list[Node], groups: int) -> dict[str, str] | None:
    """Each group's leader, once every live, running node names the same one for each group and
    none recovers from a first start (``cluster.raft.recovery``: a group then outlives the loss of
    any one of its nodes)."""
    seen: dict[str, set[str]] = {}
    for node in nodes:
        if not node.alive or node.paused:
            continue
        status = node.raftz()
        if status is None or len(status) != groups:
            return None
        if any(group["recovering"] for group in status.values()):
            return None
        for name, group in status.items():
            seen.setdefault(name, set()).add(group["leader"])
    if len(seen) != groups or any(len(s) != 1 or "" in s for s in seen.values()):
        return None
    return {name: next(iter(s)) for name, s in seen.items()}


def settled(nodes: list[Node], groups: int) -> dict[str, tuple[int, int]] | None:
    """Once every node's every group has one leader and the same commit and applied indexes:
    (commit, applied) by group."""
    if leaders(nodes, groups) is None:
        return None
    marks: dict[str, set[tuple[int, int]]] = {}
    for node in nodes:
        status = node.raftz()
        if status is None:
            return None
        for name, group in status.items():
            marks.setdefault(name, set()).add((group["commit"], group["applied"]))
    if any(len(m) != 1 or next(iter(m))[0] != next(iter(m))[1] for m in marks.values()):
        return None
    return {name: next(iter(m)) for name, m in marks.items()}


@attrs.frozen
class Op:
    """One operation a writer sent and what became of it."""

    writer: str
    seq: int
    kind: str
    """``xadd`` or ``incr``."""
    key: str
    outcome: str
    """``acked`` or ``unknown``."""
    value: bytes | int | None
    """The ID (XADD) or the new value (INCR) a node acknowledged."""
    error: str
    start: float
    end: float


class Writer(threading.Thread):
    """Writes through one node over one connection (a new one after any failure) until told to
    stop, recording each operation."""

    def __init__(
        self, name: str, node: Node, streams: list[str], counters: list[str], seed: int
    ) -> None:
        super().__init__(name=name, daemon=True)
        self.node = node
        self.streams, self.counters = streams, counters
        self.seed = seed
        self.ops: list[Op] = []
        self.halt = threading.Event()

    def connect(self) -> redis.Redis | None:
        """A connection that answered PING (None, after a pause, when the node does not answer):
        an operation is recorded only once it could have been sent."""
        client = self.node.redis()
        try:
            client.ping()
        except (redis.ConnectionError, redis.TimeoutError, OSError):
            client.close()
            self.halt.wait(0.05)
            return None
        return client

    def run(self) -> None:
        rng = random.Random(self.seed)
        client: redis.Redis | None = None
        seq = 0
        while not self.halt.is_set():
            if client is None:
                client = self.connect()
                if client is None:
                    continue
            seq += 1
            xadd = rng.random() < 0.7
            key = rng.choice(self.streams if xadd else self.counters)
            start = time.monotonic()
            value: bytes | int | None = None
            error = ""
            try:
                if xadd:
                    value = client.execute_command("XADD", key, "*", "w", self.name, "n", str(seq))
                else:
                    value = client.execute_command("INCR", key)
                outcome = "acked"
            except redis.ResponseError as exc:
                outcome, error = "unknown", str(exc)
            except (redis.ConnectionError, redis.TimeoutError, OSError) as exc:
                outcome, error = "unknown", f"{type(exc).__name__}: {exc}"
                client.close()
                client = None
            self.ops.append(
                Op(
                    self.name,
                    seq,
                    "xadd" if xadd else "incr",
                    key,
                    outcome,
                    value,
                    error,
                    start,
                    time.monotonic(),
                )
            )
            if outcome != "acked":
                self.halt.wait(0.05)
        if client is not None:
            client.close()


@attrs.frozen
class ReplicaState:
    """One node's committed copy of a group, read from its storage."""

    commit: int
    entries: dict[int, tuple[int, bytes]]
    """The committed entries after the snapshot, by index: (term, data)."""
    streams: dict[str, list[tuple[bytes, tuple[bytes, ...]]]]
    counters: dict[str, bytes | None]


def replica_state(
    store: Path, group: SlotGroup, streams: list[str], counters: list[str]
) -> ReplicaState:
    """The committed state of ``group`` on the stopped node whose store is ``store``: its keys
    among ``streams`` and ``counters``."""
    streams = [key for key in streams if group.first <= hash_slot(key.encode()) < group.end]
    counters = [key for key in counters if group.first <= hash_slot(key.encode()) < group.end]
    storage = RaftStorage(store / "raft" / group.name)
    try:
        persisted = storage.load()
    finally:
        storage.close()
    broker = Broker(Config())
    machine = KeyspaceMachine(
        "(offline)", broker.keyspaces, partial(CommandExecutor, broker), group.first, group.end
    )
    if persisted.snapshot is not None:
        machine.restore(persisted.snapshot.data)
    commit = persisted.hard_state.commit
    committed = [e for e in persisted.entries if e.index <= commit]
    for entry in committed:
        if entry.kind is EntryKind.COMMAND:
            machine.apply(entry.data)
    db = broker.keyspaces.database("$G", 0)
    got_streams = {}
    for key in streams:
        stream = db.keys.get(key.encode())
        got_streams[key] = (
            [(format_id(i), tuple(fields)) for i, fields in stream.range(0, MAX_ID)]
            if isinstance(stream, Stream)
            else []
        )
    execute = CommandExecutor(broker, broker.keyspaces)
    got_counters = {}
    for key in counters:
        reply = execute("$G", 0, [b"GET", key.encode()])
        got_counters[key] = None if reply.startswith(b"$-1") else reply.split(b"\r\n")[1]
    return ReplicaState(
        commit,
        {e.index: (e.term, e.data) for e in committed},
        got_streams,
        got_counters,
    )


def keys_by_group(layout: Layout, prefix: str, per_group: int) -> list[str]:
    """``per_group`` keys with distinct hash tags for each group of ``layout``."""
    found: dict[str, list[str]] = {group.name: [] for group in layout.groups}
    n = 0
    while any(len(keys) < per_group for keys in found.values()):
        key = f"{{{prefix}{n}}}:{prefix}"
        keys = found[layout.group_of(key.encode()).name]
        if len(keys) < per_group:
            keys.append(key)
        n += 1
    return [key for keys in found.values() for key in keys]
