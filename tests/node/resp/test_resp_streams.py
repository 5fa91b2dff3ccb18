"""Streams and keys with real redis-py clients against a live node: consumer groups shared by several
consumers, claiming what a dead consumer left, blocking reads in arrival order, transactions with
WATCH, SCAN while keys come and go, expiry, and accounts that never see each other's keys."""

from __future__ import annotations

import socket
import threading
import time
from typing import Any

import pytest
import redis
import trio

from node.config.options import AccountConfig, Config, UserConfig
from node.run.launch import NodeHandle
from tests.node.resp.test_resp_clients import W, sync_client
from tests.support import start_redis_node

pytestmark = pytest.mark.timeout(60)


def client_of(node: NodeHandle, **options: Any) -> Any:
    """A redis-py client, typed loosely (its replies' declared types are wider than what comes)."""
    return sync_client(node, **options)


@pytest.fixture
async def node(nursery: trio.Nursery) -> NodeHandle:
    return await start_redis_node(nursery)


async def test_consumers_share_a_group_and_claim_what_a_dead_one_left(node: NodeHandle) -> None:
    def scenario() -> None:
        producer = client_of(node)
        producer.xgroup_create("jobs", "workers", id="$", mkstream=True)
        ids = [producer.xadd("jobs", {"n": str(i)}) for i in range(30)]
        consumers = {name: client_of(node) for name in ("a", "b", "c")}
        seen: dict[str, list[bytes]] = {name: [] for name in consumers}
        while sum(len(v) for v in seen.values()) < len(ids):
            for name, client in consumers.items():
                got = client.xreadgroup("workers", name, {"jobs": ">"}, count=4)
                for _, entries in got:
                    seen[name] += [entry_id for entry_id, _ in entries]
        delivered = [i for got in seen.values() for i in got]
        assert sorted(delivered) == sorted(ids)  # each entry to exactly one consumer
        for name in ("a", "b"):
            consumers[name].xack("jobs", "workers", *seen[name])
        consumers["c"].close()  # c dies holding its entries
        summary = producer.xpending("jobs", "workers")
        assert summary["pending"] == len(seen["c"])
        assert summary["consumers"] == [{"name": b"c", "pending": len(seen["c"])}]
        time.sleep(0.05)
        cursor, claimed, deleted = consumers["a"].xautoclaim(
            "jobs", "workers", "a", min_idle_time=20, start_id="0-0", count=100
        )
        assert (cursor, deleted) == (b"0-0", [])
        assert [entry_id for entry_id, _ in claimed] == seen["c"]
        rows = producer.xpending_range("jobs", "workers", "-", "+", 100)
        assert {row["consumer"] for row in rows} == {b"a"}
        assert {row["times_delivered"] for row in rows} == {2}
        groups = producer.xinfo_groups("jobs")
        assert groups[0]["name"] == b"workers"
        info = groups[0]
        assert (info["pending"], info["lag"], info["entries-read"]) == (len(seen["c"]), 0, 30)

    await trio.to_thread.run_sync(scenario)


async def test_blocked_readers_wake_in_arrival_order(node: NodeHandle) -> None:
    results: dict[str, Any] = {}

    def reader(name: str) -> None:
        client = client_of(node)
        results[name] = client.xreadgroup("g", name, {"s": ">"}, count=1, block=int(W * 1000))

    def scenario() -> None:
        admin = client_of(node)
        admin.xgroup_create("s", "g", id="$", mkstream=True)
        threads = []
        for name in ("first", "second"):
            thread = threading.Thread(target=reader, args=(name,))
            thread.start()
            threads.append(thread)
            wait_blocked(admin, len(threads))
        one = admin.xadd("s", {"k": "1"})
        threads[0].join(W)
        assert results["first"] == [[b"s", [(one, {b"k": b"1"})]]]
        assert "second" not in results  # still waiting: the one entry went to the first
        two = admin.xadd("s", {"k": "2"})
        threads[1].join(W)
        assert results["second"] == [[b"s", [(two, {b"k": b"2"})]]]

    await trio.to_thread.run_sync(scenario)


def wait_blocked(client: redis.Redis, count: int) -> None:
    """Until ``count`` clients are blocked (flag ``b`` in CLIENT LIST)."""
    deadline = time.monotonic() + W
    while sum(1 for c in client.client_list() if "b" in c["flags"]) < count:
        assert time.monotonic() < deadline, "the readers never blocked"
        time.sleep(0.01)


async def test_blocking_reads_time_out_unblock_and_survive_disconnects(node: NodeHandle) -> None:
    def scenario() -> None:
        admin = client_of(node)
        started = time.monotonic()
        assert admin.xread({"s": "$"}, block=150) in (None, [], {})
        assert 0.1 <= time.monotonic() - started < W

        for _ in range(3):  # readers that disconnect while blocked leave nothing behind
            with socket.create_connection(("127.0.0.1", node.redis_port or 0), timeout=W) as gone:
                gone.sendall(b"XREAD BLOCK 0 STREAMS s $\r\n")
                wait_blocked(admin, 1)
        deadline = time.monotonic() + W
        while len(admin.client_list()) > 1:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        assert admin.xadd("s", {"after": "disconnects"})

        waiting = client_of(node)
        waiting_id = waiting.client_id()
        outcome: dict[str, Any] = {}

        def unblocked() -> None:
            try:
                outcome["reply"] = waiting.xread({"s": "$"}, block=0)
            except redis.ResponseError as exc:
                outcome["error"] = str(exc)

        for how, expected in (("TIMEOUT", "reply"), ("ERROR", "error")):
            thread = threading.Thread(target=unblocked)
            thread.start()
            wait_blocked(admin, 1)
            assert admin.execute_command("CLIENT", "UNBLOCK", waiting_id, how) == 1
            thread.join(W)
            assert expected in outcome, outcome
            outcome.clear()
        assert admin.execute_command("CLIENT", "UNBLOCK", waiting_id) == 0
        with pytest.raises(redis.ResponseError, match="reason should be TIMEOUT or ERROR"):
            admin.execute_command("CLIENT", "UNBLOCK", waiting_id, "LATER")

    await trio.to_thread.run_sync(scenario)


async def test_a_blocked_group_read_hears_its_group_vanish(node: NodeHandle) -> None:
    def scenario() -> None:
        admin = client_of(node)
        for vanish in ("destroy", "delete"):
            admin.xgroup_create("s", "g", id="$", mkstream=True)
            box: dict[str, Any] = {}

            def read(box: dict[str, Any] = box) -> None:
                try:
                    box["reply"] = client_of(node).xreadgroup("g", "c", {"s": ">"}, block=0)
                except redis.ResponseError as exc:
                    box["error"] = str(exc)

            thread = threading.Thread(target=read)
            thread.start()
            wait_blocked(admin, 1)
            if vanish == "destroy":
                admin.xgroup_destroy("s", "g")
            else:
                admin.delete("s")
            thread.join(W)
            assert box == {
                "error": "NOGROUP No such key 's' or consumer group 'g' in XREADGROUP with GROUP option"
            }
            admin.delete("s")

    await trio.to_thread.run_sync(scenario)


async def test_transactions_with_watch(node: NodeHandle) -> None:
    def scenario() -> None:
        client, other = client_of(node), client_of(node)
        with client.pipeline(transaction=True) as pipe:
            pipe.xadd("t", {"a": "1"}, id="1-1").xlen("t").xrange("t")
            assert pipe.execute() == [b"1-1", 1, [(b"1-1", {b"a": b"1"})]]

        def bump(pipe: Any) -> None:
            length = pipe.xlen("t")
            if not attempts:
                other.xadd("t", {"a": "x"})  # someone else writes between WATCH and EXEC
            attempts.append(length)
            pipe.multi()
            pipe.xadd("t", {"n": str(length)})

        attempts: list[int] = []
        client.transaction(bump, "t")
        assert attempts == [1, 2]  # the first EXEC failed; the retry saw the other write
        assert client.xlen("t") == 3

    await trio.to_thread.run_sync(scenario)


async def test_scan_returns_every_key_that_stays(node: NodeHandle) -> None:
    def scenario() -> None:
        client, churn = client_of(node), client_of(node)
        stay = {f"stay:{i}".encode() for i in range(300)}
        for key in stay:
            client.xadd(key, {"f": "v"})
        found: set[bytes] = set()
        cursor = 0
        turns = 0
        while True:
            cursor, keys = client.scan(cursor, match="*", count=25)
            found.update(keys)
            churn.xadd(f"churn:{turns}", {"f": "v"})  # keys come and go while the scan runs
            churn.delete(f"churn:{turns - 3}")
            turns += 1
            if cursor == 0:
                break
        assert stay <= found
        assert {k for k in found if not k.startswith(b"churn:")} == stay
        assert set(client.scan_iter(match="stay:1?", count=7)) == {
            f"stay:1{i}".encode() for i in range(10)
        }
        assert list(client.scan_iter(_type="string")) == []
        assert client.dbsize() == len(stay) + 3

    await trio.to_thread.run_sync(scenario)


async def test_keys_expire_even_unread(node: NodeHandle) -> None:
    def scenario() -> None:
        client = client_of(node)
        client.xadd("short", {"f": "v"})
        client.xadd("long", {"f": "v"})
        assert client.pexpire("short", 50)
        assert client.expire("long", 100)
        assert 0 < client.pttl("short") <= 50
        deadline = time.monotonic() + W
        while client.info("keyspace")["db0"]["keys"] != 1:  # swept, not read
            assert time.monotonic() < deadline
            time.sleep(0.02)
        assert client.exists("short") == 0
        assert client.ttl("long") in (99, 100)
        assert client.persist("long")
        assert client.ttl("long") == -1

    await trio.to_thread.run_sync(scenario)


@pytest.mark.slow
@pytest.mark.timeout(120)
async def test_many_keys_nobody_reads_are_reclaimed_soon(node: NodeHandle) -> None:
    many, lasting = 20_000, 50
    bound = 60.0  # (one key at a time, ten times a second, these would take 100 s)

    def scenario() -> None:
        client = client_of(node)
        client.select(3)
        pipe = client.pipeline(transaction=False)
        for i in range(lasting):
            pipe.xadd(f"lasting:{i}", {"f": "v"})
            pipe.expire(f"lasting:{i}", 1000)
        pipe.execute()
        for start in range(0, many, 2_000):
            for i in range(start, start + 2_000):
                pipe.xadd(f"short:{i}", {"f": "v"})
                pipe.pexpire(f"short:{i}", 100)
            assert all(pipe.execute())
        deadline = time.monotonic() + bound
        while (left := client.info("keyspace")["db3"]["keys"]) > lasting:  # (INFO expires none)
            assert time.monotonic() < deadline, f"{left - lasting} expired keys still there"
            time.sleep(0.05)
        assert client.info("keyspace")["db3"] == {"keys": lasting, "expires": lasting, "avg_ttl": 0}
        assert client.ping()

    await trio.to_thread.run_sync(scenario)


async def test_accounts_and_databases_keep_their_keys_apart(nursery: trio.Nursery) -> None:
    accounts = (AccountConfig(name="A"), AccountConfig(name="B"))
    users = (
        UserConfig(user="a", password="pw", account="A"),
        UserConfig(user="b", password="pw", account="B"),
    )
    node = await start_redis_node(nursery, Config(accounts=accounts, users=users))

    def scenario() -> None:
        a = client_of(node, username="a", password="pw")
        b = client_of(node, username="b", password="pw")
        a.xadd("orders", {"from": "a"})
        assert b.exists("orders") == 0
        assert b.keys() == []
        b.xadd("orders", {"from": "b"})
        assert [fields for _, fields in a.xrange("orders")] == [{b"from": b"a"}]
        a1 = client_of(node, username="a", password="pw", db=1)
        assert a1.exists("orders") == 0
        a1.flushdb()
        assert a.xlen("orders") == 1

    await trio.to_thread.run_sync(scenario)
