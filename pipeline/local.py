"""Servers the demo and the benchmarks start for themselves on 127.0.0.1: a pubmesh node (its own
process, capturing streams given as ``[[streams]]``) and a redis-server to compare with.

Ports are picked free just before the process starts (``free_port``); a process counts as started
once its ports accept connections, and is killed when the ``with`` block ends.
"""

from __future__ import annotations

import contextlib
import random
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import attrs

__all__ = ["NodeUrls", "free_port", "pubmesh_node", "redis_server"]

START_TIMEOUT = 30.0
EPHEMERAL = Path("/proc/sys/net/ipv4/ip_local_port_range")
"""The kernel's range for the local end of outgoing connections (Linux)."""
LOWEST_PORT = 10_000
_given: set[int] = set()
_pick = random.Random()


@attrs.frozen
class NodeUrls:
    nats: str
    redis: str


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


def _wait(process: subprocess.Popen[bytes], ports: list[int], what: str) -> None:
    deadline = time.monotonic() + START_TIMEOUT
    for port in ports:
        while True:
            with socket.socket() as s:
                s.settimeout(0.5)
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            if process.poll() is not None:
                raise RuntimeError(f"{what} exited during start-up (status {process.returncode})")
            if time.monotonic() > deadline:
                raise RuntimeError(f"{what} did not start within {START_TIMEOUT:.0f} s")
            time.sleep(0.05)


@contextlib.contextmanager
def _running(args: list[str], ports: list[int], what: str) -> Iterator[None]:
    process = subprocess.Popen(args, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _wait(process, ports, what)
        yield
    finally:
        process.kill()
        process.wait(START_TIMEOUT)


def streams_toml(streams: Mapping[str, str]) -> str:
    """``[[streams]]`` tables capturing each subject (value) into the stream named by its key."""
    return "".join(
        f'[[streams]]\nname = "{name}"\nsubjects = ["{subject}"]\n\n'
        for name, subject in streams.items()
    )


@contextlib.contextmanager
def pubmesh_node(streams: Mapping[str, str]) -> Iterator[NodeUrls]:
    """A ``pubmesh serve`` process with NATS and Redis ports, capturing ``streams``."""
    port, redis_port = free_port(), free_port()
    with tempfile.TemporaryDirectory(prefix="pubmesh-node-") as scratch:
        config = Path(scratch) / "node.toml"
        config.write_text(streams_toml(streams))
        args = [sys.executable, "-m", "node.run.cli", "serve", "-c", str(config), "-a", "127.0.0.1"]
        args += ["-p", str(port), "--redis_port", str(redis_port)]
        with _running(args, [port, redis_port], "the pubmesh node"):
            yield NodeUrls(f"nats://127.0.0.1:{port}", f"redis://127.0.0.1:{redis_port}")


@contextlib.contextmanager
def redis_server(*flags: str) -> Iterator[int]:
    """A redis-server (from PATH) on a free port of 127.0.0.1 without persistence, given extra
    ``flags`` (``--requirepass``...); yields its port."""
    port = free_port()
    args = ["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", ""]
    with _running([*args, "--appendonly", "no", *flags], [port], "redis-server"):
        yield port
