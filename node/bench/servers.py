"""Servers the benchmarks start themselves: one node, a joining node, a whole cluster, or two
one-node clusters joined by gateways.

pubmesh and nats-server take the same flags, so one description of each (``Flavor``) starts either
as a single node or as a cluster member on 127.0.0.1. Every port is left to the server to pick
(pubmesh's ``0``, nats-server's ``-1``) and read back from its startup log, so nothing can take a port
between being chosen and being bound. Processes belong to a ``Servers`` group and live for the length
of its ``with``; they are stopped together, with SIGTERM (killed if they hang), so the nodes of a
cluster do not watch each other go one by one and redial. Each log stays readable until then.
nats-server takes gateway settings only from a configuration file, which is written for it.

RESP servers (``RespFlavor``: pubmesh's Redis-protocol listener, redis-server) are the exception:
redis-server cannot pick a port of its own (``--port 0`` turns TCP off), so a free one is chosen here,
and a server counts as started once that port answers a RESP PING.
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
from pathlib import Path
from typing import IO

import attrs

from cluster.config import ClusterConfig
from node.bench import resp
from node.bench.ports import free_port
from node.bench.wire import BenchError, Endpoint

__all__ = [
    "PUBMESH",
    "PUBMESH_RESP",
    "Flavor",
    "RespFlavor",
    "ServerProcess",
    "Servers",
    "free_port",
    "nats_server",
    "redis_server",
]

LISTENING = re.compile(rb"Listening for client connections on [\d.]+:(\d+)")
ROUTES_LISTENING = re.compile(rb"Listening for route connections on [\d.]+:(\d+)")
GATEWAYS_LISTENING = re.compile(rb"Listening for gateways? connections on [\d.]+:(\d+)")
GATEWAY_REGISTERED = re.compile(rb"Outbound gateway connection to .* registered")
ROUTE_CREATED = re.compile(rb"\] ([\d/]+ [\d:.]+) \[\w+\] .*Route connection created")
ROUTE_EVENT = b"Route connection "
"""Both ends of a route's life (created, closed): while they keep coming, the mesh is still forming."""
VERSION = re.compile(rb"(?:Starting pubmesh|Version:)\s+(\S+)|Redis version=([^,\s]+)")
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
    gateways_in_file: bool = False
    """Whether gateways can only be set in a configuration file (nats-server's way)."""

    def argv(self, node_name: str | None = None, seed: str | None = None) -> list[str]:
        """The command line of a single node, or (with ``node_name``) of a cluster member that
        dials ``seed`` (a route URL) when given one."""
        argv = list(self.command)
        if node_name is None:
            return argv
        argv += ["-n", node_name, "--cluster_name", CLUSTER_NAME]
        argv += ["--cluster", f"nats://127.0.0.1:{self.any_port}"]
        return argv + (["--routes", seed] if seed else [])

    def gateway_argv(self, name: str, remote: tuple[str, str] | None, directory: Path) -> list[str]:
        """The command line of a one-node cluster ``name`` with gateways on any free port,
        configured with ``remote`` (its name, its gateway URL) when given one."""
        argv = [*self.command, "-n", name]
        if not self.gateways_in_file:
            argv += ["--gateway_name", name, "--gateway_listen", f"nats://127.0.0.1:{self.any_port}"]
            return argv + (["--gateways", "=".join(remote)] if remote else [])
        remotes = f'gateways: [{{name: "{remote[0]}", url: "{remote[1]}"}}]' if remote else ""
        conf = directory / f"{name}.conf"
        conf.write_text(f'gateway {{\n  name: "{name}"\n  listen: "127.0.0.1:-1"\n  {remotes}\n}}\n')
        return [*argv, "-c", str(conf)]


PUBMESH = Flavor(
    "pubmesh",
    (sys.executable, "-m", "node.run.cli", "serve", "-a", "127.0.0.1", "-p", "0"),
    any_port="0",
    pool_size=ClusterConfig().pool_size,
)


def nats_server() -> Flavor | None:
    """nats-server, if it is on PATH (one route connection per peer, as 2.9 keeps)."""
    path = shutil.which("nats-server")
    if path is None:
        return None
    command = (path, "-a", "127.0.0.1", "-p", "-1")
    return Flavor("nats-server", command, any_port="-1", pool_size=1, gateways_in_file=True)


@attrs.frozen
class RespFlavor:
    """How to start one kind of RESP server on 127.0.0.1, at a given port."""

    name: str
    command: tuple[str, ...]
    """The program and its flags, but the port's."""
    port_flag: str

    def argv(self, port: int) -> list[str]:
        return [*self.command, self.port_flag, str(port)]


PUBMESH_RESP = RespFlavor("pubmesh", PUBMESH.command, "--redis_port")


def redis_server() -> RespFlavor | None:
    """redis-server, if it is on PATH, on 127.0.0.1 and without persistence (nothing to save)."""
    path = shutil.which("redis-server")
    if path is None:
        return None
    command = (path, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no")
    return RespFlavor("redis-server", command, "--port")


@attrs.define
class ServerProcess:
    """A started server: where its clients (and routes) connect, and its log so far."""

    name: str
    version: str
    endpoint: Endpoint
    route_url: str | None
    gateway_url: str | None
    proc: subprocess.Popen[bytes]
    _log: IO[bytes]

    def log(self) -> bytes:
        """The log so far, read without moving the offset the server writes at (it shares it)."""
        fd = self._log.fileno()
        return os.pread(fd, os.fstat(fd).st_size, 0)

    def tail(self, lines: int = 3) -> str:
        last = self.log().decode(errors="replace").strip().splitlines()[-lines:]
        return " | ".join(last) or "(no output)"

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
        return self._launch(flavor, flavor.argv(node_name, seed), clustered=node_name is not None)

    def directory(self, prefix: str) -> Path:
        """A temporary directory, removed once the group's servers have stopped."""
        return Path(self._stack.enter_context(tempfile.TemporaryDirectory(prefix=prefix)))

    def launch(self, flavor: Flavor, argv: list[str]) -> ServerProcess:
        """A cluster member started with a command line of the caller's (``flavor`` names it),
        ready for clients once it listens for them and for routes."""
        return self._launch(flavor, argv, clustered=True)

    def _launch(
        self, flavor: Flavor, argv: list[str], *, clustered: bool = False, gateway: bool = False
    ) -> ServerProcess:
        server = self._stack.enter_context(_launched(flavor.name, argv))
        self._started.append(server)
        return _await_listening(server, clustered=clustered, gateway=gateway)

    def start_resp(self, flavor: RespFlavor) -> ServerProcess:
        """A server answering RESP on a free port; its ``endpoint`` is a ``redis://`` one."""
        port = free_port()
        server = self._stack.enter_context(_launched(flavor.name, flavor.argv(port)))
        self._started.append(server)
        return _await_resp(server, Endpoint("127.0.0.1", port, scheme="redis"))

    def supercluster(self, flavor: Flavor) -> list[ServerProcess]:
        """Two one-node clusters, "A" and "B", joined by gateways: B is started first, and A is
        configured with B's gateway URL (B learns of A when A dials it). Returned once each has
        its outbound gateway link."""
        directory = Path(self._stack.enter_context(tempfile.TemporaryDirectory()))
        b = self._launch(flavor, flavor.gateway_argv("B", None, directory), gateway=True)
        assert b.gateway_url is not None
        remote = ("B", b.gateway_url)
        a = self._launch(flavor, flavor.gateway_argv("A", remote, directory), gateway=True)
        deadline = time.monotonic() + MESH_TIMEOUT
        while not all(GATEWAY_REGISTERED.search(n.log()) for n in (a, b)):
            if time.monotonic() > deadline:
                raise BenchError(
                    f"{flavor.name} gateways did not connect within {MESH_TIMEOUT:.0f} s: "
                    f"A: {a.tail()}; B: {b.tail()}"
                )
            time.sleep(POLL)
        return [a, b]

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
        server = ServerProcess(name, "", Endpoint("127.0.0.1", 0), None, None, proc, log)
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


def _await_resp(server: ServerProcess, endpoint: Endpoint) -> ServerProcess:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        if server.proc.poll() is not None:
            status = server.proc.returncode
            raise BenchError(f"{server.name} exited with status {status}: {server.tail(1)}")
        try:
            resp.connect(endpoint).close()
        except BenchError:
            time.sleep(POLL)
            continue
        server.version = _version(server.log())
        server.endpoint = endpoint
        return server
    raise BenchError(
        f"{server.name} did not answer RESP on {endpoint.url} within {START_TIMEOUT:.0f} s:"
        f" {server.tail()}"
    )


def _version(log: bytes) -> str:
    found = VERSION.search(log)
    return next((v.decode() for v in found.groups() if v), "") if found else ""


def _await_listening(server: ServerProcess, *, clustered: bool, gateway: bool) -> ServerProcess:
    deadline = time.monotonic() + START_TIMEOUT
    while time.monotonic() < deadline:
        text = server.log()
        listening = LISTENING.search(text)
        routes = ROUTES_LISTENING.search(text)
        gateways = GATEWAYS_LISTENING.search(text)
        if listening and (routes or not clustered) and (gateways or not gateway):
            server.version = _version(text)
            server.endpoint = Endpoint("127.0.0.1", int(listening.group(1)))
            server.route_url = f"nats://127.0.0.1:{int(routes.group(1))}" if routes else None
            server.gateway_url = f"nats://127.0.0.1:{int(gateways.group(1))}" if gateways else None
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
