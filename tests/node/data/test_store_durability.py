"""Durability end to end, with real processes: a node is SIGKILLed in the middle of a write flood,
started again on the same store, and what it holds is compared with what clients were told; a node
rewrites its file again and again while clients write, and comes back with the same keys."""

from __future__ import annotations

import contextlib
import os
import signal
import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.live import LiveNode, live_node

pytestmark = [pytest.mark.slow, pytest.mark.timeout(90)]


def _client(node: LiveNode) -> Any:
    """A redis-py client (typed Any: its reply types are unions that depend on options)."""
    assert node.redis_port is not None
    return redis.Redis(port=node.redis_port, socket_timeout=10, retry=Retry(NoBackoff(), 0))
    # (no retries: a request sent again after a lost connection could be applied twice)


class Flood:
    """Writers adding to one stream in pipelines, and a consumer reading and acknowledging it,
    each noting what the node confirmed and when."""

    def __init__(self, node: LiveNode, writers: int, *, rewriting: bool = False) -> None:
        self.node = node
        self.sent: set[bytes] = set()
        self.confirmed: dict[bytes, float] = {}
        self.delivered: set[bytes] = set()
        self.acked: set[bytes] = set()
        self.unsure_acks: set[bytes] = set()
        self._lock = threading.Lock()
        self._threads = [threading.Thread(target=self._write, args=(i,)) for i in range(writers)]
        self._threads.append(threading.Thread(target=self._consume))
        if rewriting:
            self._threads.append(threading.Thread(target=self._rewrite))
        self.rewrites = 0

    def __enter__(self) -> Flood:
        _client(self.node).xgroup_create("s", "g", "$", mkstream=True)
        for thread in self._threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for thread in self._threads:
            thread.join(30)

    def _write(self, writer: int) -> None:
        client = _client(self.node)
        for batch in range(1_000_000):
            pipe = client.pipeline(transaction=False)
            tags = [b"%d:%d:%d" % (writer, batch, i) for i in range(20)]
            for tag in tags:
                pipe.xadd("s", {"tag": tag})
            with self._lock:
                self.sent.update(tags)
            try:
                pipe.execute()
            except redis.ConnectionError:
                return
            now = time.monotonic()
            with self._lock:
                self.confirmed.update(dict.fromkeys(tags, now))

    def _rewrite(self) -> None:
        """BGREWRITEAOF again and again, so that the kill may come at any step of a rewrite."""
        client = _client(self.node)
        while True:
            try:
                client.bgrewriteaof()
                self.rewrites = client.info("persistence")["aof_rewrites"]
            except redis.ResponseError:
                pass  # (one is under way)
            except redis.ConnectionError:
                return
            time.sleep(0.02)

    def _consume(self) -> None:
        client = _client(self.node)
        while True:
            try:
                got = client.xreadgroup("g", "c", {"s": ">"}, count=50, block=100)
            except redis.ConnectionError:
                return
            ids = [entry_id for _, entries in got for entry_id, _ in entries]
            self.delivered.update(ids)
            if not ids:
                continue
            self.unsure_acks = set(ids)
            try:
                client.xack("s", "g", *ids)
            except redis.ConnectionError:
                return
            self.acked.update(ids)
            self.unsure_acks = set()


def _recovered(node: LiveNode) -> tuple[list[bytes], dict[bytes, Any], set[bytes]]:
    client = _client(node)
    entries = client.xrange("s")
    tags = [fields[b"tag"] for _, fields in entries]
    groups = {group["name"]: group for group in client.xinfo_groups("s")}
    pending = {p["message_id"] for p in client.xpending_range("s", "g", "-", "+", 10**6)}
    return tags, groups, pending


@pytest.mark.parametrize(
    ("policy", "rewriting"), [("always", False), ("everysec", False), ("always", True)]
)
def test_a_killed_node_keeps_what_it_confirmed(tmp_path: Path, policy: str, rewriting: bool) -> None:
    store = ["--store_dir", str(tmp_path), "--appendfsync", policy]
    with (
        live_node(*store, redis=True) as node,
        Flood(node, writers=3, rewriting=rewriting) as flood,
    ):
        time.sleep(1.2)
        node.process.kill()
        killed = time.monotonic()
    assert len(flood.confirmed) > 100  # (the flood did flow)
    assert flood.rewrites or not rewriting
    with live_node(*store, redis=True) as node:
        tags, groups, pending = _recovered(node)
    recovered = set(tags)
    assert len(tags) == len(recovered), "an entry appears twice"
    assert recovered <= flood.sent, "an entry nobody sent"
    lost = {tag for tag in flood.confirmed if tag not in recovered}
    if policy == "always":
        assert not lost
        assert not pending & flood.acked
        assert flood.delivered - flood.acked - flood.unsure_acks <= pending
    else:  # (about a second at most; a killed process loses nothing its kernel has)
        assert all(flood.confirmed[tag] > killed - 2.0 for tag in lost)
    if flood.delivered:
        last = groups[b"g"]["last-delivered-id"]
        assert _id(last) >= max(map(_id, flood.delivered))


def _id(entry_id: bytes) -> tuple[int, int]:
    ms, seq = entry_id.split(b"-")
    return int(ms), int(seq)


CLOCK_FIELDS = ("seen-time", "active-time")
"""A consumer's fields that move with the clock."""


def _text(name: str | bytes) -> str:
    return name.decode() if isinstance(name, bytes) else name


def _full_state(node: LiveNode) -> dict[str, Any]:
    """What the keys hold, as clients see it (times that move with the clock left out)."""
    client = _client(node)
    out: dict[str, Any] = {}
    for key in sorted(client.keys("*")):
        info = client.xinfo_stream(key, full=True)
        for group in info["groups"]:  # (redis-py 8.2 names a consumer's fields in text, before in bytes)
            group["consumers"] = [
                {k: v for k, v in consumer.items() if _text(k) not in CLOCK_FIELDS}
                for consumer in group["consumers"]
            ]
        info.pop("radix-tree-keys", None)
        info.pop("radix-tree-nodes", None)
        pending = client.xpending_range(key, "g", "-", "+", 10**6) if info["groups"] else []
        for entry in pending:
            entry.pop("time_since_delivered")
        out[key.decode()] = (client.xrange(key), info, pending, client.pttl(key) > 0)
    return out


def _churn(node: LiveNode, stop: threading.Event, worker: int) -> None:
    """Adds with trimming, group reads, acknowledgements, claims and deletes on one key."""
    client = _client(node)
    key = f"k{worker}"
    client.xgroup_create(key, "g", "$", mkstream=True)
    client.pexpire(key, 10**8)
    n = 0
    while not stop.is_set():
        n += 1
        pipe = client.pipeline(transaction=False)
        for i in range(10):
            pipe.xadd(key, {"n": n, "i": i}, maxlen=300)
        pipe.xreadgroup("g", f"c{n % 3}", {key: ">"}, count=7)
        results = pipe.execute()
        delivered = [entry_id for _, entries in results[-1] for entry_id, _ in entries]
        if delivered:
            client.xack(key, "g", *delivered[::2])
            client.xclaim(key, "g", "other", 0, delivered[1::4])
        if n % 5 == 0:
            client.xdel(key, *delivered[:1] or [b"1-1"])


def test_rewrites_under_concurrent_writes_keep_every_change(tmp_path: Path) -> None:
    store = ["--store_dir", str(tmp_path), "--appendfsync", "everysec"]
    with live_node(*store, redis=True) as node:
        stop = threading.Event()
        threads = [threading.Thread(target=_churn, args=(node, stop, w)) for w in range(3)]
        for thread in threads:
            thread.start()
        admin = _client(node)
        rewrites = 0
        refused: list[str] = []
        deadline = time.monotonic() + 3.0
        while time.monotonic() < deadline:
            try:
                admin.bgrewriteaof()
            except redis.ResponseError as exc:
                refused.append(str(exc))
            time.sleep(0.05)
            rewrites = admin.info("persistence")["aof_rewrites"]
        stop.set()
        for thread in threads:
            thread.join(30)
        while admin.info("persistence")["aof_rewrite_in_progress"]:
            time.sleep(0.05)
        before = _full_state(node)
        persistence = admin.info("persistence")
    assert rewrites >= 3, rewrites
    assert all("already in progress" in text for text in refused)
    assert persistence["aof_last_bgrewrite_status"] == "ok"
    assert len(before) == 3
    assert all(len(entries) for entries, *_ in before.values())
    with live_node(*store, redis=True) as node:
        assert _full_state(node) == before


def _children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as listing:
        return [int(child) for child in listing.read().split()]


def _sockets(pid: int) -> list[str]:
    """The sockets among a process's open descriptors."""
    found = []
    for fd in os.listdir(f"/proc/{pid}/fd"):
        with contextlib.suppress(OSError):
            target = os.readlink(f"/proc/{pid}/fd/{fd}")
            if target.startswith("socket:"):
                found.append(target)
    return found


def _rewriting_child(node: LiveNode, client: Any) -> int:
    """Start rewrites until one is caught after its process closed the sockets it inherited, and
    stop that process there (SIGSTOP); its pid."""
    for _ in range(50):
        client.bgrewriteaof()
        deadline = time.monotonic() + 5.0
        while time.monotonic() < deadline:
            children = _children(node.process.pid)
            if not children:
                if not client.info("persistence")["aof_rewrite_in_progress"]:
                    break  # (done before it was seen: once more)
                continue
            try:
                if not _sockets(children[0]):
                    os.kill(children[0], signal.SIGSTOP)
                    return children[0]
            except FileNotFoundError:
                break
        else:
            raise AssertionError("the rewriting process kept the sockets it inherited")
    raise AssertionError("no rewrite was seen running")


def test_a_node_killed_while_rewriting_leaves_its_ports_to_the_next_start(tmp_path: Path) -> None:
    """The rewriting process closes every socket it inherited (no port, no client) and dies with
    the node, so a node started at once on the same ports and store serves."""
    store = ["--store_dir", str(tmp_path), "--appendfsync", "no"]
    with live_node(*store, redis=True) as node:
        client = _client(node)
        for batch in range(20):
            pipe = client.pipeline(transaction=False)
            for i in range(1000):
                pipe.xadd(f"k{i % 50}", {"n": batch, "payload": "x" * 50})
            pipe.execute()
        child = _rewriting_child(node, client)
        client.close()
        node.process.kill()
        node.process.wait(10)
        deadline = time.monotonic() + 10.0
        while os.path.exists(f"/proc/{child}") and time.monotonic() < deadline:
            time.sleep(0.01)
        if os.path.exists(f"/proc/{child}"):
            os.kill(child, signal.SIGKILL)
            raise AssertionError("the rewriting process outlived the node")
        with live_node(*store, redis=True, ports=node) as again:
            restarted = _client(again)
            assert restarted.xlen("k0") == 400
            restarted.close()


def test_expiry_changes_survive_a_restart_after_the_first_time_has_passed(tmp_path: Path) -> None:
    """An expiry taken away (PERSIST), pushed back (a later EXPIRE) or carried by a RENAME and
    then taken away keeps its key across a clean stop and a SIGKILL, after the first expiry time
    has passed, as with redis-server."""
    store = ["--store_dir", str(tmp_path), "--appendfsync", "always"]
    with live_node(*store, redis=True) as node:
        client = _client(node)
        for key in ("persisted", "pushed", "renamed", "expired"):
            client.xadd(key, {"f": "v"})
            client.expire(key, 1)
        client.persist("persisted")
        client.expire("pushed", 100_000)
        client.rename("renamed", "moved")
        client.persist("moved")
        time.sleep(1.5)
        client.close()
        node.process.terminate()
        node.process.wait(10)
    for stop in ("terminate", "kill"):
        with live_node(*store, redis=True) as node:
            client = _client(node)
            assert client.exists("persisted", "pushed", "moved", "renamed", "expired") == 3
            assert client.ttl("persisted") == -1
            assert 99_000 < client.ttl("pushed") <= 100_000
            assert client.ttl("moved") == -1
            client.close()
            getattr(node.process, stop)()
            node.process.wait(10)
