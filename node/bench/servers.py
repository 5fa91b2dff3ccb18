"""Servers the benchmarks start themselves: one node, a joining node, or a whole cluster.

pubmesh and nats-server take the same flags, so one description of each (``Flavor``) starts either
as a single node or as a cluster member on 127.0.0.1. Every port is left to the server to pick
(pubmesh's ``0``, nats-server's ``-1``) and read back from its startup log, so nothing can take a port
between being chosen and being bound. Processes belong to a ``Servers`` group and live for the length
of its ``with``; they are stopped together, with SIGTERM (killed if they hang), so the nodes of a
cluster do not watch each other go one by one and redial. Each log stays readable until then.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from datetime import datetime
from typing import IO

import attrs

from cluster.config import ClusterConfig
from node.bench.wire import BenchError, Endpoint

__all__ = ["PUBMESH", "Flavor", "ServerProcess", "Servers", "nats_server"]

LISTENING = re.compile(rb"Listening for client connections on [\d.]+:(\d+)")
ROUTES_LISTENING = re.compile(rb"Listening for route connections on [\d.]+:(\d+)")
ROUTE_CREATED = re.compile(rb"\] ([\d/]+ [\d:.]+) \[\w+\] .*Route connection created")
ROUTE_EVENT = b"Route connection "
"""Both ends of a route's life (created, closed): while they keep coming, the mesh is still forming."""
VERSION = re.compile(rb"(?:Starting pubmesh|Version:)\s+(\S+)")
LOG_TIME = "%Y/%m/%d %H:%M:%S.%f"
START_TIMEOUT = 20.0
STOP_TIMEOUT = 10.0
MESH_TIMEOUT = 30.0
MESH_QUIET = 0.5
"""How long a cluster's logs must show no route coming or going before it counts as formed."""
POLL = 0.005
"""How often a log is read while waiting on it: a joining node's first moments are being timed."""
CLUSTER_NAME = "bench"


@attrs.frozen
class Flavor:
    """How to start one kind of server on 127.0.0.1."""

    name: str
    command: tuple[str, ...]
    """The program and the flags of a node on 127.0.0.1 with any free client port."""
    any_port: str
    """How its flags ask for any free port."""
    pool_size: int
    """Route connections it keeps to each peer, which is how many it logs as created."""

    def argv(self, node_name: str | None = None, seed: str | None = None) -> list[str]:
        """The command line of a single node, or (with ``node_name``) of a cluster member that
        dials ``seed`` (a route URL) when given one."""
        argv = list(self.command)
        if node_name is None:
            return argv
        argv += ["-n", node_name, "--cluster_name", CLUSTER_NAME]
        argv += ["--cluster", f"nats://127.0.0.1:{self.any_port}"]
        return argv + (["--routes", seed] if seed else [])


PUBMESH = Flavor(
    "pubmesh",
    (sys.executable, "-m", "node.cli", "serve", "-a", "127.0.0.1", "-p", "0"),
    any_port="0",
    pool_size=ClusterConfig().pool_size,
)


def nats_server() -> Flavor | None:
    """nats-server, if it is on PATH (one route connection per peer, as 2.9 keeps)."""
    path = shutil.which("nats-server")
    if path is None:
        return None
    return Flavor("nats-server", (path, "-a", "127.0.0.1", "-p", "-1"), any_port="-1", pool_size=1)


@attrs.define
class ServerProcess:
    """A started server: where its clients (and routes) connect, and its log so far."""

    name: str
    version: str
    endpoint: Endpoint
    route_url: str | None
    proc: subprocess.Popen[bytes]
    _log: IO[bytes]

    def log(self) -> bytes:
        """The log so far, read without moving the offset the server writes at (it shares it)."""
        fd = self._log.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0)

    def tail(self) -> str:
        lines = self.log().decode(errors="replace").strip().splitlines()
        return " | ".join(lines[-3:]) or "(no output)"

    def routes_created(self) -> list[float]:
        """When (``time.time()``) each route connection was created, by its log."""
        return [
            datetime.strptime(stamp.decode(), LOG_TIME).timestamp()
            for stamp in ROUTE_CREATED.findall(self.log())
        ]


class Servers:
    """The server processes of one benchmark, all stopped when its ``with`` ends."""

    def __init__(self) -> None:
        self._stack = contextlib.ExitStack()
        self._started: list[ServerProcess] = []

    def __enter__(self) -> Servers:
        return self

    def __exit__(self, *exc_info: object) -> None:
        with self._stack:
            _stop(self._started)

    def start(
        self, flavor: Flavor, node_name: str | None = None, seed: str | None = None
    ) -> ServerProcess:
        """A server ready for clients: a single node, or (with ``node_name``) a cluster member."""
        server = self._stack.enter_context(_launched(flavor.name, flavor.argv(node_name, seed)))
        self._started.append(server)
        return _await_listening(server, clustered=node_name is not None)

    def cluster(self, flavor: Flavor, size: int) -> list[ServerProcess]:
        """``size`` nodes joined into one cluster through the first, once their mesh is complete."""
        nodes = [self.start(flavor, "n1")]
        nodes += [self.start(flavor, f"n{i}", nodes[0].route_url) for i in range(2, size + 1)]
        _await_mesh(flavor, nodes)
        return nodes


@contextlib.contextmanager
def _launched(name: str, argv: list[str]) -> Iterator[ServerProcess]:
    """A process writing to a log of its own, stopped (if its group has not done it) and its log
    closed when the ``with`` ends."""
    with tempfile.TemporaryFile() as log:
        proc = subprocess.Popen(argv, stdin=subprocess.DEVNULL, stdout=log, stderr=log)
        server = ServerProcess(name, "", Endpoint("127.0.0.1", 0), None, proc, log)
        try:
            yield server
        finally:
            _stop([server])


def _stop(servers: list[ServerProcess]) -> None:
    """SIGTERM to all at once, then a shared wait; a server still running after it is killed."""
    running = [s for s in servers if s.proc.poll() is None]
    for server in running:
        server.proc.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT
    for server in running:
        try:
            server.proc.wait(max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            server.proc.kill()
            server.proc.wait()
            print(f"{server.name} ignored SIGTERM and was killed: {server.tail()}", file=sys.stderr)


def _await_listening(server: ServerProcess, *, clustered: bool) -> ServerProcess:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        text = server.log()
        listening = LISTENING.search(text)
        routes = ROUTES_LISTENING.search(text)
        if listening and (routes or not clustered):
            version = VERSION.search(text)
            server.version = version.group(1).decode() if version else ""
            server.endpoint = Endpoint("127.0.0.1", int(listening.group(1)))
            server.route_url = f"nats://127.0.0.1:{int(routes.group(1))}" if routes else None
            return server
        if server.proc.poll() is not None:
            status = server.proc.returncode
            raise BenchError(f"{server.name} exited with status {status}: {server.tail()}")
        time.sleep(POLL)
    raise BenchError(
        f"{server.name} did not start listening within {START_TIMEOUT:.0f} s: {server.tail()}"
    )


def _await_mesh(flavor: Flavor, nodes: list[ServerProcess]) -> None:
    """Wait until every node has created a route to each peer on each pooled connection, and no
    route has come or gone for ``MESH_QUIET`` seconds (a duplicate being replaced)."""
    expected = (len(nodes) - 1) * flavor.pool_size
    deadline = time.monotonic() + MESH_TIMEOUT
    events, since = -1, time.monotonic()
    while time.monotonic() < deadline:
        logs = [node.log() for node in nodes]
        now = sum(log.count(ROUTE_EVENT) for log in logs)
        if now != events:
            events, since = now, time.monotonic()
        complete = all(len(ROUTE_CREATED.findall(log)) >= expected for log in logs)
        if complete and time.monotonic() - since >= MESH_QUIET:
            return
        time.sleep(MESH_QUIET / 10)
    counts = ", ".join(str(len(node.routes_created())) for node in nodes)
    raise BenchError(
        f"{flavor.name} cluster did not form within {MESH_TIMEOUT:.0f} s "
        f"(route connections created: {counts}; {expected} expected on each node)"
    )
