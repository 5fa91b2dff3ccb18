"""Ports for servers about to start on 127.0.0.1: the benchmarks', the demo's and the tests'."""

from __future__ import annotations

import random
import socket
from pathlib import Path

__all__ = ["EPHEMERAL", "LOWEST_PORT", "free_port"]

EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
"""The kernel's range for the local end of outgoing connections (Linux)."""
LOWEST_PORT = 10_000
_given: set[int] = set()
_pick = random.Random()


def free_port() -> int:
    """A port of 127.0.0.1 for a server about to start: free now, below the kernel's ephemeral
    range and not given before by this process.

    A port bound as port 0 comes from the ephemeral range, where every outgoing connection also
    takes its local port: between the pick and the server's bind, a connection (a route one node
    dials to another, say) could take it, and the server would stop with "Address already in use".
    The kernel places no connection's end outside that range.
    """
    low, high = _below_ephemeral()
    for _ in range(100):
        port = _pick.randrange(low, high)
        if port in _given:
            continue
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:  # (a listener, or a connection's end lingering there)
                continue
        _given.add(port)
        return port
    with socket.socket() as probe:  # (nowhere free below the range: the kernel's choice)
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _below_ephemeral() -> tuple[int, int]:
    """The ports from ``LOWEST_PORT`` up to the ephemeral range (to 32,768, Linux's default)."""
    try:
        first = int(EPHEMERAL.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        first = 32_768
    return LOWEST_PORT, max(first, LOWEST_PORT + 1_000)
