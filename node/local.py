"""``pubmesh local``: a whole deployment on this machine, one process per node, for trying things out.

Each node is a real ``pubmesh serve`` process on 127.0.0.1 with its own client, route and monitoring
ports (numbered from a base so they are easy to remember); the first node is every other node's
seed, and gossip completes the mesh. Ctrl-C (or SIGTERM) stops them all.
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

__all__ = ["main"]


@attrs.frozen
class LocalNode:
    name: str
    client_port: int
    route_port: int
    http_port: int

    def command(self, cluster: str, seed: LocalNode | None) -> list[str]:
        args = [
            sys.executable, "-m", "node.cli", "serve", "-a", "127.0.0.1", "-p", str(self.client_port),
            "-m", str(self.http_port), "-n", self.name, "--cluster_name", cluster,
            "--cluster", f"nats://127.0.0.1:{self.route_port}",
        ]  # fmt: skip
        if seed is not None:
            args += ["--routes", f"nats://127.0.0.1:{seed.route_port}"]
        return args


def plan(nodes: int, base: int) -> list[LocalNode]:
    """Ports: clients base+i, routes base+2000+i, monitoring base+4000+i (4222, 6222, 8222...)."""
    return [LocalNode(f"n{i + 1}", base + i, base + 2000 + i, base + 4000 + i) for i in range(nodes)]


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


def main(argv: Sequence[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="pubmesh local", description="Run a local cluster of pubmesh processes on 127.0.0.1."
    )
    parser.add_argument("--nodes", type=int, default=3, help="nodes in the cluster (default 3)")
    parser.add_argument("--base-port", type=int, default=4222, help="first client port (default 4222)")
    parser.add_argument("--cluster", default="local", help="cluster name")
    args = parser.parse_args(argv)
    if args.nodes < 1:
        parser.error("--nodes must be at least 1")
    nodes = plan(args.nodes, args.base_port)
    processes: list[subprocess.Popen[bytes]] = []
    stop = False

    def request_stop(signum: int, frame: object) -> None:
        nonlocal stop
        stop = True

    signal.signal(signal.SIGTERM, request_stop)
    try:
        for node in nodes:
            processes.append(
                subprocess.Popen(node.command(args.cluster, nodes[0] if node is not nodes[0] else None))
            )
        _wait_ready(nodes, processes)
        print(f"\ncluster {args.cluster!r}: {len(nodes)} nodes on 127.0.0.1\n", flush=True)
        print(f"  {'node':6} {'clients':24} {'monitoring':28} routes", flush=True)
        for node in nodes:
            print(
                f"  {node.name:6} nats://127.0.0.1:{node.client_port:<8} "
                f"http://127.0.0.1:{node.http_port:<10} nats://127.0.0.1:{node.route_port}",
                flush=True,
            )
        print("\nCtrl-C stops them all.\n", flush=True)
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
