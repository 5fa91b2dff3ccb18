"""``pubmesh local``: a whole deployment on this machine, one process per node, for trying things out.

Each node is a real ``pubmesh serve`` process on 127.0.0.1 with its own client, Redis, route, gateway
and monitoring ports (numbered from a base so they are easy to remember). Within a cluster the first
node is every other node's seed and gossip completes the mesh; every node is given the gateway URLs
of the other clusters' nodes, so the clusters form one super-cluster. Ctrl-C (or SIGTERM) stops
them all.
"""

from __future__ import annotations

import argparse
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Sequence

import attrs

__all__ = ["main", "plan"]

DEFAULT_CLUSTERS = "east:3,west:2"
REDIS_OFFSET = 6379 - 4222
"""Redis ports start where redis-server's default is when clients start at nats-server's."""


@attrs.frozen
class LocalNode:
    name: str
    cluster: str
    client_port: int
    route_port: int
    gateway_port: int
    http_port: int
    redis_port: int

    def command(self, nodes: Sequence[LocalNode]) -> list[str]:
        """The ``pubmesh serve`` command line of this node, within the deployment ``nodes``."""
        args = [
            sys.executable, "-m", "node.run.cli", "serve",
            "-a", "127.0.0.1", "-p", str(self.client_port), "-m", str(self.http_port),
            "-n", self.name, "--cluster_name", self.cluster,
            "--cluster", f"nats://127.0.0.1:{self.route_port}", "--redis_port", str(self.redis_port),
        ]  # fmt: skip
        seed = next(n for n in nodes if n.cluster == self.cluster)
        if seed is not self:
            args += ["--routes", f"nats://127.0.0.1:{seed.route_port}"]
        others = [
            f"{n.cluster}=nats://127.0.0.1:{n.gateway_port}" for n in nodes if n.cluster != self.cluster
        ]
        if others:
            args += [
                "--gateway_name", self.cluster,
                "--gateway_listen", f"nats://127.0.0.1:{self.gateway_port}",
                "--gateways", ",".join(others),
            ]  # fmt: skip
        return args


def parse_clusters(text: str) -> list[tuple[str, int]]:
    """``east:3,west:2`` -> [("east", 3), ("west", 2)]; a bare name means one node."""
    clusters: list[tuple[str, int]] = []
    for item in text.split(","):
        name, _, count = item.strip().partition(":")
        if not name or (count and not count.isdigit()) or (count and int(count) < 1):
            raise ValueError(f"expected NAME[:NODES] with at least one node, got {item.strip()!r}")
        if name in dict(clusters):
            raise ValueError(f"cluster {name!r} given twice")
        clusters.append((name, int(count) if count else 1))
    return clusters


def plan(clusters: Sequence[tuple[str, int]], base: int) -> list[LocalNode]:
    """Ports, the i-th node overall: clients base+i, routes base+2000+i, gateways base+3000+i,
    monitoring base+4000+i (4222, 6222, 7222, 8222... as nats-server's defaults), Redis
    base+REDIS_OFFSET+i (6379... as redis-server's)."""
    nodes: list[LocalNode] = []
    for cluster, count in clusters:
        for k in range(count):
            i = len(nodes)
            ports = (
                base + i,
                base + 2000 + i,
                base + 3000 + i,
                base + 4000 + i,
                base + REDIS_OFFSET + i,
            )
            nodes.append(LocalNode(f"{cluster}{k + 1}", cluster, *ports))
    return nodes


def _listening(port: int) -> bool:
    with socket.socket() as s:
        s.settimeout(0.2)
        return s.connect_ex(("127.0.0.1", port)) == 0


def _wait_ready(nodes: list[LocalNode], processes: list[subprocess.Popen[bytes]]) -> None:
    deadline = time.monotonic() + 30
    while not all(_listening(n.client_port) for n in nodes):
        if any(p.poll() is not None for p in processes):
            raise SystemExit("pubmesh local: a node exited during start-up (is a port taken?)")
        if time.monotonic() > deadline:
            raise SystemExit("pubmesh local: nodes did not start within 30 s")
        time.sleep(0.05)


def _describe(nodes: Sequence[LocalNode]) -> None:
    clusters = dict.fromkeys(n.cluster for n in nodes)
    print(f"\n{len(nodes)} nodes in {len(clusters)} clusters on 127.0.0.1\n", flush=True)
    heading = f"  {'cluster':8} {'node':8} {'clients':23} {'redis':24} {'monitoring':27} "
    heading += f"{'routes':23} gateways"
    print(heading, flush=True)
    for n in nodes:
        print(
            f"  {n.cluster:8} {n.name:8} nats://127.0.0.1:{n.client_port:<6} "
            f"redis://127.0.0.1:{n.redis_port:<6} http://127.0.0.1:{n.http_port:<10} "
            f"nats://127.0.0.1:{n.route_port:<6} "
            f"nats://127.0.0.1:{n.gateway_port}",
            flush=True,
        )
    print("\nCtrl-C stops them all.\n", flush=True)


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="pubmesh local",
        description="Run local clusters of pubmesh processes on 127.0.0.1, joined by gateways.",
    )
    parser.add_argument(
        "--clusters",
        default=DEFAULT_CLUSTERS,
        metavar="NAME:NODES[,NAME:NODES...]",
        help=f"the clusters and their sizes (default {DEFAULT_CLUSTERS})",
    )
    parser.add_argument("--base-port", type=int, default=4222, help="first client port (default 4222)")
    args = parser.parse_args(argv)
    try:
        nodes = plan(parse_clusters(args.clusters), args.base_port)
    except ValueError as exc:
        parser.error(f"--clusters: {exc}")
    processes: list[subprocess.Popen[bytes]] = []
    stop = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, request_stop)
    try:
        for node in nodes:
            processes.append(subprocess.Popen(node.command(nodes)))
        _wait_ready(nodes, processes)
        _describe(nodes)
        while not stop and all(p.poll() is None for p in processes):
            time.sleep(0.2)
    except KeyboardInterrupt:
        pass
    finally:
        for process in processes:
            if process.poll() is None:
                process.send_signal(signal.SIGTERM)
        for process in processes:
            try:
                process.wait(10)
            except subprocess.TimeoutExpired:
                process.kill()
    return 0
