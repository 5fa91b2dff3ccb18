"""Durability end to end, with real processes: a node is SIGKILLed in the middle of a write flood,
started again on the same store, and what it holds is compared with what clients were told; a node
rewrites its file again and again while clients write, and comes back with the same keys."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from tests.live import LiveNode, live_node

pytestmark = pytest.mark.timeout(90)


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


def _full_state(node: LiveNode) -> dict[str, Any]:
    """What the keys hold, as clients see it (times that move with the clock left out)."""
    client = _client(node)
    out: dict[str, Any] = {}
    for key in sorted(client.keys("*")):
        info = client.xinfo_stream(key, full=True)
        for group in info["groups"]:
            for consumer in group["consumers"]:
                del consumer[b"seen-time"], consumer[b"active-time"]
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
