"""Servers the demo and the benchmarks start for themselves on 127.0.0.1: a pubmesh node (its own
process, capturing streams given as ``[[streams]]``) and a redis-server to compare with.

Ports are picked free just before the process starts (``node.bench.ports.free_port``); a process
counts as started once its ports accept connections, and is killed when the ``with`` block ends.
"""

from __future__ import annotations

import contextlib
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import attrs

from node.bench.ports import free_port

__all__ = ["NodeUrls", "free_port", "pubmesh_node", "redis_server"]

START_TIMEOUT = 30.0


@attrs.frozen
class NodeUrls:
    nats: str
    redis: str


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
