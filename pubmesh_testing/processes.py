"""A deployment of real ``pubmesh serve`` processes on 127.0.0.1, as ``pubmesh local`` (``make run``)
starts one, for tests and scripts that need separate processes: to kill a node with SIGKILL, or to
look at a deployment from outside.

    with local_deployment("east:2,west:1") as deployment:
        url = deployment.monitoring_url("east1")
        deployment.kill("east2")

Ports come from ``node.run.local.plan`` on a base whose ranges are free when it is picked
(``free_base``); the block begins once every node accepts clients, and at its end the nodes still
running get SIGTERM (SIGKILL if they do not stop).
"""

from __future__ import annotations

import random
import signal
import socket
import subprocess
import time
from collections.abc import Iterator
from contextlib import contextmanager

import attrs

from node.run.local import REDIS_OFFSET, LocalNode, parse_clusters, plan

__all__ = ["LocalDeployment", "free_base", "local_deployment"]

START = 30.0
"""Seconds the nodes may take to accept clients."""
STOP = 10.0
"""Seconds a node may take to stop after SIGTERM."""


def _free(port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind(("127.0.0.1", port))
        except OSError:
            return False
        return True


def free_base(span: int) -> int:
    """A base port whose client, route, gateway, monitoring and Redis ranges (``span`` nodes) are all
    free right now."""
    rng = random.Random()
    for _ in range(100):
        base = rng.randrange(20000, 55000)
        offsets = (0, 2000, 3000, 4000, REDIS_OFFSET)
        if all(_free(base + offset + i) for offset in offsets for i in range(span)):
            return base
    raise RuntimeError("no free port range")


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


@attrs.frozen
class LocalDeployment:
    """The nodes (by name, in ``plan``'s order) and their processes."""

    nodes: dict[str, LocalNode]
    processes: dict[str, subprocess.Popen[bytes]]

    def monitoring_url(self, name: str) -> str:
        return f"http://127.0.0.1:{self.nodes[name].http_port}"

    def kill(self, name: str) -> None:
        """SIGKILL the node: it stops answering at once, saying nothing to anyone."""
        process = self.processes[name]
        process.send_signal(signal.SIGKILL)
        process.wait(STOP)


@contextmanager
def local_deployment(clusters: str = "east:2,west:1") -> Iterator[LocalDeployment]:
    """The clusters (``NAME:NODES,...`` as ``pubmesh local --clusters``) as processes, for the block."""
    sizes = parse_clusters(clusters)
    nodes = plan(sizes, free_base(sum(count for _, count in sizes)))
    processes: dict[str, subprocess.Popen[bytes]] = {}
    try:
        for node in nodes:
            processes[node.name] = subprocess.Popen(
                node.command(nodes), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
            )
        deadline = time.monotonic() + START
        while not all(_listening(n.client_port) and _listening(n.http_port) for n in nodes):
            if any(p.poll() is not None for p in processes.values()):
                raise RuntimeError("a node exited during start-up")
            if time.monotonic() > deadline:
                raise TimeoutError(f"the nodes did not start within {START} s")
            time.sleep(0.05)
        yield LocalDeployment({n.name: n for n in nodes}, processes)
    finally:
        for process in processes.values():
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes.values():
            try:
                process.wait(STOP)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait(STOP)
