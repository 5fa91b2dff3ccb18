"""What open dashboards cost the nodes: CPU time of each node process over a period with no viewer,
then over the same period with ``--viewers`` event streams open on the first node.

    python -m deploy.dashboard_cost [--clusters east:2,west:1] [--viewers 5] [--seconds 30]

Prints, per node, its CPU use in percent of one core for both periods (user + system time from
``/proc/<pid>/stat``, so other work on the machine does not count). The viewers read the stream as
a browser would; every node answers the observer's requests, so all of them are measured.
"""

from __future__ import annotations

import argparse
import os
import socket
import threading
import time
from collections.abc import Sequence

from pubmesh_testing.processes import LocalDeployment, local_deployment

__all__ = ["main"]


def cpu_seconds(pid: int) -> float:
    with open(f"/proc/{pid}/stat") as stat:
        fields = stat.read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def measure(deployment: LocalDeployment, seconds: float) -> dict[str, float]:
    """Percent of one core each node used over ``seconds``."""
    pids = {name: p.pid for name, p in deployment.processes.items()}
    before = {name: cpu_seconds(pid) for name, pid in pids.items()}
    start = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - start
    return {name: 100 * (cpu_seconds(pid) - before[name]) / wall for name, pid in pids.items()}


def _viewer(port: int, stop: threading.Event, received: list[int], index: int) -> None:
    with socket.create_connection(("127.0.0.1", port), timeout=5) as conn:
        conn.sendall(b"GET /dashboard/events HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n")
        conn.settimeout(0.5)
        while not stop.is_set():
            try:
                received[index] += len(conn.recv(1 << 16))
            except TimeoutError:
                continue


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--clusters", default="east:2,west:1")
    parser.add_argument("--viewers", type=int, default=5)
    parser.add_argument("--seconds", type=float, default=30.0)
    args = parser.parse_args(argv)
    with local_deployment(args.clusters) as deployment:
        first = next(iter(deployment.nodes.values()))
        time.sleep(3)  # (start-up settles)
        idle = measure(deployment, args.seconds)
        stop, received = threading.Event(), [0] * args.viewers
        viewers = [
            threading.Thread(target=_viewer, args=(first.http_port, stop, received, i), daemon=True)
            for i in range(args.viewers)
        ]
        for viewer in viewers:
            viewer.start()
        time.sleep(2)
        watched = measure(deployment, args.seconds)
        stop.set()
        for viewer in viewers:
            viewer.join(5)
    print(f"CPU, % of one core, over {args.seconds:g} s ({args.viewers} viewers on {first.name}):")
    for name in idle:
        print(f"  {name:8} no viewer {idle[name]:5.1f}   {args.viewers} viewers {watched[name]:5.1f}")
    rates = ", ".join(f"{n / (args.seconds + 2) / 1024:.1f}" for n in received)
    print(f"  (KiB/s received by each viewer: {rates})")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
