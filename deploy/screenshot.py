"""A picture of the dashboard on ``make run``'s super-cluster, for the README.

``deploy/screenshot-dashboard`` runs it.

Starts ``pubmesh local``'s deployment (``DEFAULT_CLUSTERS``: east of three nodes, west of two) as
processes on free ports, puts some traffic through it (messages published on one cluster and
delivered in the other, a Redis stream with a consumer group), opens ``/dashboard`` of the first
node in Debian's chromium driven by Playwright, waits for the rate charts to fill, kills one node,
and saves a PNG (made smaller with ``pngquant`` when it is installed).

Also what the browser tests share with it: how chromium is launched (``launch``), and ``Traffic``.
"""

from __future__ import annotations

import argparse
import shutil
import socket
import subprocess
import threading
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

__all__ = ["CHROMIUM", "CHROMIUM_ARGS", "Traffic", "launch", "main", "redis_command"]

CHROMIUM = "/usr/bin/chromium"
"""Debian's chromium (Playwright's own browser download is not used)."""
CHROMIUM_ARGS = (
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
)
"""Headless, and nothing fetched from anywhere by the browser itself."""
TIMEOUT = 10.0


def launch(playwright: Any) -> Any:
    """A headless chromium of Debian's, through a Playwright instance (``sync_playwright()``)."""
    return playwright.chromium.launch(executable_path=CHROMIUM, args=list(CHROMIUM_ARGS))


def redis_command(port: int, *args: str) -> bytes:
    """One Redis command on 127.0.0.1:``port``; its reply as received (one read)."""
    request = b"*%d\r\n" % len(args) + b"".join(
        b"$%d\r\n%s\r\n" % (len(a.encode()), a.encode()) for a in args
    )
    with socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT) as conn:
        conn.sendall(request)
        return conn.recv(1 << 16)


def _nats(port: int) -> socket.socket:
    conn = socket.create_connection(("127.0.0.1", port), timeout=TIMEOUT)
    conn.recv(4096)  # (INFO)
    conn.sendall(b'CONNECT {"verbose":false,"name":"traffic"}\r\n')
    return conn


class Traffic:
    """Messages on ``subject`` published on one node (``rate`` a second) and received by a
    subscriber on another, over plain NATS sockets, in threads, until ``stop``."""

    def __init__(self, publish_port: int, subscribe_port: int, subject: str, rate: float) -> None:
        self.subject, self.rate = subject, rate
        self.received = 0
        self._stop = threading.Event()
        self._subscriber = _nats(subscribe_port)
        self._subscriber.sendall(b"SUB %s 1\r\nPING\r\n" % subject.encode())
        self._subscriber.recv(4096)  # (PONG: subscribed)
        self._publisher = _nats(publish_port)
        self._threads = [
            threading.Thread(target=self._publish, daemon=True),
            threading.Thread(target=self._receive, daemon=True),
        ]
        for thread in self._threads:
            thread.start()

    def _publish(self) -> None:
        message = b"PUB %s 16\r\n0123456789abcdef\r\n" % self.subject.encode()
        while not self._stop.wait(1 / self.rate):
            try:
                self._publisher.sendall(message)
            except OSError:
                return

    def _receive(self) -> None:
        self._subscriber.settimeout(0.2)
        while not self._stop.is_set():
            try:
                data = self._subscriber.recv(1 << 16)
            except TimeoutError:
                continue
            except OSError:
                return
            if not data:
                return
            self.received += data.count(b"MSG ")
            if b"PING\r\n" in data:
                self._subscriber.sendall(b"PONG\r\n")

    def stop(self) -> None:
        self._stop.set()
        for thread in self._threads:
            thread.join(TIMEOUT)
        self._publisher.close()
        self._subscriber.close()


def main(argv: Sequence[str] | None = None) -> int:
    from playwright.sync_api import sync_playwright

    from node.run.local import DEFAULT_CLUSTERS, REDIS_OFFSET
    from pubmesh_testing.processes import local_deployment

    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--out", default="docs/dashboard.png", help="where the PNG goes")
    parser.add_argument("--clusters", default=DEFAULT_CLUSTERS)
    parser.add_argument("--wait", type=float, default=40.0, help="seconds of traffic before the shot")
    args = parser.parse_args(argv)
    with local_deployment(args.clusters) as deployment:
        names = list(deployment.nodes)
        first, last = deployment.nodes[names[0]], deployment.nodes[names[-1]]
        traffic = [
            Traffic(first.client_port, last.client_port, "orders.new", 50),
            Traffic(last.client_port, deployment.nodes[names[1]].client_port, "prices.tick", 20),
        ]
        redis = last.client_port + REDIS_OFFSET
        for i in range(120):
            redis_command(redis, "XADD", "orders", "*", "item", str(i))
        redis_command(redis, "XGROUP", "CREATE", "orders", "billing", "0")
        redis_command(
            redis, "XREADGROUP", "GROUP", "billing", "c1", "COUNT", "30", "STREAMS", "orders", ">"
        )
        with sync_playwright() as playwright:
            browser = launch(playwright)
            page = browser.new_page(viewport={"width": 1360, "height": 900})
            page.goto(deployment.monitoring_url(names[0]) + "/dashboard")
            time.sleep(args.wait / 2)
            deployment.kill(names[-2])  # (a node down, to show how that looks)
            time.sleep(args.wait / 2)
            Path(args.out).parent.mkdir(parents=True, exist_ok=True)
            page.screenshot(path=args.out, full_page=True)
            browser.close()
        if shutil.which("pngquant"):  # (a third of the size, and the README's picture stays small)
            quantize = ["pngquant", "--quality", "70-90", "--speed", "1", "--force", "--output"]
            subprocess.run([*quantize, args.out, args.out], check=True)
        for t in traffic:
            t.stop()
    print(f"saved {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
