"""``pubmesh serve`` as a real process for the operations tests: it logs to a file, writes its pid
and ports files into the test's directory, and is driven by real signals. Every wait is bounded."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import attrs

WAIT = 20.0
SERVE = (sys.executable, "-m", "node.run.cli", "serve")


def until(done: Callable[[], bool], what: str, timeout: float = WAIT) -> None:
    """Poll ``done`` until it holds; fail naming ``what`` if it does not within ``timeout``."""
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


@attrs.define
class NodeProcess:
    """A node started with ``-l LOG -P PID --ports_file_dir DIR`` in a directory of its own."""

    process: subprocess.Popen[bytes]
    folder: Path

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def log_file(self) -> Path:
        return self.folder / "node.log"

    @property
    def pid_file(self) -> Path:
        return self.folder / "node.pid"

    @property
    def ports_file(self) -> Path:
        return self.folder / f"pubmesh_{self.pid}.ports"

    def ports(self) -> dict[str, list[str]]:
        until(self.ports_file.exists, "the ports file")
        ports: dict[str, list[str]] = json.loads(self.ports_file.read_text())
        return ports

    def url(self, kind: str = "nats") -> str:
        return self.ports()[kind][0]

    def port(self, kind: str = "nats") -> int:
        return int(self.url(kind).rsplit(":", 1)[1])

    def log(self) -> str:
        return self.log_file.read_text() if self.log_file.exists() else ""

    def wait_for_log(self, text: str, count: int = 1) -> str:
        """Wait until ``text`` has appeared ``count`` times in the log; return the log."""
        until(lambda: self.log().count(text) >= count, f"{text!r} x{count} in the log")
        return self.log()

    def send(self, signum: signal.Signals) -> None:
        os.kill(self.pid, signum)

    def stop(self) -> int:
        """SIGTERM, and the exit status."""
        if self.process.poll() is None:
            self.send(signal.SIGTERM)
        return self.process.wait(timeout=WAIT)


LOCAL = ("-a", "127.0.0.1", "-p", "-1")
"""127.0.0.1, a random port."""


def launch(folder: Path, *args: str, where: tuple[str, ...] = LOCAL) -> NodeProcess:
    """Start a node (wait for it with ``ready``): with ``where``'s flags, on 127.0.0.1 at a random
    port unless told otherwise."""
    folder.mkdir(parents=True, exist_ok=True)
    command = [*SERVE, *where, "-l", str(folder / "node.log")]
    command += ["-P", str(folder / "node.pid"), "--ports_file_dir", str(folder), *args]
    with open(folder / "stderr", "wb") as stderr:
        process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=stderr)
    return NodeProcess(process, folder)


def ready(node: NodeProcess) -> NodeProcess:
    """Wait until the node serves (its ports file is written once every listener is up)."""

    def up() -> bool:
        if node.process.poll() is not None:
            stderr = (node.folder / "stderr").read_text()
            raise AssertionError(f"the node exited: {stderr}{node.log()}")
        return node.ports_file.exists()

    until(up, "the node to start")
    return node
