"""A node whose store is on a device that fills up (a small tmpfs, mounted for the test): writes are
refused with redis-server's ``-MISCONF`` words while connections, reads and pub/sub go on, nothing
that was not written is served, writes resume by themselves once there is room, and a restart finds
exactly what was acknowledged -- under every fsync policy."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, BinaryIO

import pytest
import redis

from tests.live import LiveNode, live_node

pytestmark = [pytest.mark.slow, pytest.mark.timeout(120)]

PAYLOAD = b"x" * 2000


@contextmanager
def tmpfs(megabytes: int) -> Iterator[Path]:
    """A directory on a tmpfs of this size, unmounted afterwards (needs root, as CI runs)."""
    directory = Path(tempfile.mkdtemp(prefix="pubmesh-tmpfs-"))
    mount = ["mount", "-t", "tmpfs", "-o", f"size={megabytes}m", "tmpfs", str(directory)]
    if os.geteuid() != 0 or shutil.which("mount") is None:
        directory.rmdir()
        pytest.skip("mounting a tmpfs needs root")
    subprocess.run(mount, check=True, capture_output=True, timeout=30)
    try:
        yield directory
    finally:
        subprocess.run(["umount", "-l", str(directory)], check=False, timeout=30)
        directory.rmdir()


def fill(file: BinaryIO) -> None:
    """Take every byte left on the device with this file (to be removed to make room again). The file
    is unbuffered: a buffered one keeps what did not fit and raises ENOSPC again when it is closed."""
    try:
        while True:
            file.write(b"\0" * 65536)
            file.flush()
    except OSError:
        pass


def _client(node: LiveNode) -> Any:
    assert node.redis_port is not None
    return redis.Redis(port=node.redis_port, socket_timeout=10)


class BlockedReader:
    """A raw connection blocked in ``XREAD BLOCK 0`` on stream ``s`` after a given ID."""

    def __init__(self, node: LiveNode) -> None:
        assert node.redis_port is not None
        self.sock = socket.create_connection(("127.0.0.1", node.redis_port), timeout=10)

    def __enter__(self) -> BlockedReader:
        return self

    def __exit__(self, *exc: object) -> None:
        self.sock.close()

    def block(self, after: bytes) -> None:
        self.sock.sendall(
            b"*6\r\n$5\r\nXREAD\r\n$5\r\nBLOCK\r\n$1\r\n0\r\n$7\r\nSTREAMS\r\n"
            b"$1\r\ns\r\n$%d\r\n%b\r\n" % (len(after), after)
        )

    def read(self, timeout: float) -> bytes:
        self.sock.settimeout(timeout)
        got = b""
        try:
            while not got.endswith(PAYLOAD + b"\r\n"):
                chunk = self.sock.recv(65536)
                if not chunk:
                    break
                got += chunk
        except TimeoutError:
            pass
        return got


def _wait_for(check: Any, what: str, seconds: float = 15.0) -> Any:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        try:
            got = check()
        except redis.ResponseError:
            got = None
        if got:
            return got
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


@pytest.mark.parametrize("policy", ["always", "everysec", "no"])
def test_a_full_disk_refuses_writes_serves_the_rest_and_resumes(policy: str) -> None:
    with tmpfs(4) as device:
        filler = device / "filler"
        filler.write_bytes(b"\0" * (2 << 20))
        store = ["--store_dir", str(device / "store"), "--appendfsync", policy]
        with live_node(*store, redis=True) as node, BlockedReader(node) as reader:
            r = _client(node)
            subscriber = _client(node).pubsub()
            subscriber.subscribe("news")
            acked: list[bytes] = []
            failure = ""
            for _ in range(5000):  # (about 1,000 fit)
                reader.block(acked[-1] if acked else b"0-0")
                try:
                    acked.append(r.xadd("s", {"f": PAYLOAD}))
                except redis.ResponseError as exc:
                    failure = str(exc)
                    break
                assert acked[-1] in reader.read(10)
            assert failure == "MISCONF Errors writing to the AOF file: No space left on device"
            assert reader.read(0.5) == b""  # (blocked still: not handed what failed)
            assert r.ping()
            assert r.xlen("s") == len(acked)
            assert r.xrange("s", "-", "+", count=1)[0][0] == acked[0]
            with pytest.raises(redis.ResponseError, match=r"^MISCONF Errors writing"):
                r.xadd("s", {"f": PAYLOAD})
            with pytest.raises(redis.ResponseError, match=r"^MISCONF Errors writing"):
                r.delete("s")
            assert r.publish("news", "still here") == 1
            assert subscriber.get_message(timeout=5)["type"] == "subscribe"
            assert subscriber.get_message(timeout=5)["data"] == b"still here"
            assert r.info("persistence")["aof_last_write_status"] == "err"
            streams = json.loads(node.http_get("/varz")[1])["streams"]
            assert streams["log_writable"] is False
            assert streams["log_error"].startswith("MISCONF Errors writing to the AOF file")

            filler.unlink()
            resumed = _wait_for(lambda: r.xadd("s", {"f": PAYLOAD}), "writes to resume")
            acked.append(resumed)
            assert resumed in reader.read(10)  # (the first entry it is handed is the new one)
            assert r.info("persistence")["aof_last_write_status"] == "ok"
            assert json.loads(node.http_get("/varz")[1])["streams"]["log_writable"] is True
            subscriber.close()
            r.close()
            node.process.kill()
        with live_node(*store, redis=True) as node:
            r = _client(node)
            assert [entry_id for entry_id, _ in r.xrange("s")] == acked
            r.close()


def test_a_disk_that_fills_and_empties_during_a_kill_9_run_loses_nothing_acknowledged() -> None:
    """Writers pipeline XADDs while the device is filled and emptied under them; the node is then
    SIGKILLed: every entry acknowledged is there after a restart, none answered with an error is."""
    with tmpfs(16) as device:
        store = ["--store_dir", str(device / "store"), "--appendfsync", "always"]
        acked: set[bytes] = set()
        refused: set[bytes] = set()
        lock = threading.Lock()
        stop = threading.Event()

        def write(node: LiveNode, writer: int) -> None:
            client = _client(node)
            for batch in range(100_000):
                if stop.is_set():
                    return
                tags = [b"%d:%d:%d" % (writer, batch, i) for i in range(20)]
                pipe = client.pipeline(transaction=False)
                for tag in tags:
                    pipe.xadd("s", {"tag": tag})
                try:
                    replies = pipe.execute(raise_on_error=False)
                except redis.ConnectionError:
                    return
                with lock:
                    for tag, reply in zip(tags, replies, strict=True):
                        (refused if isinstance(reply, Exception) else acked).add(tag)

        filler = device / "filler"
        with filler.open("wb", buffering=0) as filling, live_node(*store, redis=True) as node:
            writers = [threading.Thread(target=write, args=(node, i)) for i in range(3)]
            for thread in writers:
                thread.start()
            time.sleep(0.4)
            fill(filling)
            time.sleep(0.5)
            with lock:
                refused_while_full, acked_while_full = len(refused), len(acked)
            filling.close()  # (an open file keeps its space after unlink)
            filler.unlink()
            time.sleep(0.8)
            node.process.kill()
            stop.set()
            for thread in writers:
                thread.join(30)
        assert refused_while_full > 0  # (the device did fill)
        with live_node(*store, redis=True) as node:
            tags = [fields[b"tag"] for _, fields in _client(node).xrange("s")]
        recovered = set(tags)
        assert len(tags) == len(recovered), "an entry appears twice"
        assert acked <= recovered, "an acknowledged entry was lost"
        assert not refused & recovered, "an entry answered with an error was kept"
        assert len(acked) > acked_while_full  # (writes resumed once there was room again)
