"""WATCH of keys led by another node: the leader watches them for the client, and the EXEC that
counts on the watch runs there; clients on every node see redis-server's optimistic locking."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
import trio

from node.data.keyspaces import Keyspaces
from node.replicated.path import CROSSSLOT, WATCH_ELSEWHERE, KeyRouter
from node.replicated.watching import RemoteWatches, Watched, creator, token_of
from tests.node.replicated.test_path import NAMES, a_led_key, key_of, leaders, start_nodes
from tests.support import until

pytestmark = [pytest.mark.timeout(90)]


def test_a_watch_is_spoiled_by_a_change_and_used_up_once() -> None:
    db = Keyspaces().database("$G", 0)
    watches = RemoteWatches("n1")
    first, second = watches.watch(db, [b"a", b"b"]), watches.watch(db, [b"c"])
    assert creator(first) == "n1"
    assert first != second
    assert token_of(b"+" + first + b"\r\n") == first
    assert token_of(b"+OK\r\n") is None
    db.touch(b"b")
    assert not watches.intact([first])
    assert watches.intact([second])
    assert len(watches) == 0
    assert not watches.intact([second])  # (used up: unknown now)
    third = watches.watch(db, [b"a"])
    watches.release([third, b"n2/unknown"])
    assert len(watches) == 0
    db.touch(b"a")  # (no watcher is left on the key)


def test_a_connection_releases_its_tokens_unless_an_exec_takes_them() -> None:
    released: list[list[bytes]] = []
    watched = Watched("g1", released.append)
    watched.tokens += [b"n1/a", b"n1/b"]
    assert watched.take() == [b"n1/a", b"n1/b"]
    watched.release()
    assert released == []
    watched.tokens.append(b"n1/c")
    watched.release()
    assert released == [[b"n1/c"]]


def scenario(port: int, other_port: int, key: bytes) -> list[object]:
    """Optimistic locking as a client sees it, another client changing the key meanwhile."""
    r = redis.Redis(port=port, socket_timeout=10)
    other = redis.Redis(port=other_port, socket_timeout=10)
    seen: list[object] = []

    def transaction(change: Callable[[], object] | None, *queued: tuple[object, ...]) -> None:
        with r.pipeline() as pipe:
            pipe.watch(key)
            seen.append(pipe.get(key))
            if change is not None:
                change()
            pipe.multi()
            for args in queued:
                pipe.execute_command(*args)
            try:
                seen.append(pipe.execute())
            except redis.WatchError:
                seen.append("aborted")

    try:
        other.delete(key, key + b"n", key + b"x")
        transaction(None, ("SET", key, "1"))
        transaction(lambda: other.set(key, "2"), ("SET", key, "3"))
        transaction(lambda: other.get(key), ("INCR", key))  # (a read changes nothing)
        transaction(lambda: other.expire(key, 100), ("INCR", key))
        transaction(lambda: other.xadd(key + b"x", {"f": "v"}), ("INCR", key))
        transaction(None)  # (an empty transaction)
        transaction(lambda: other.delete(key))
        # UNWATCH (and DISCARD) end the watch: a later change spoils nothing.
        for end in ("UNWATCH", "DISCARD"):
            r.execute_command("WATCH", key)
            if end == "DISCARD":
                r.execute_command("MULTI")
            seen.append(r.execute_command(end))
            other.set(key, end)
            r.execute_command("MULTI")
            r.execute_command("INCR", key + b"n")
            seen.append(r.execute_command("EXEC"))
        seen.append(other.get(key))
    finally:
        r.close()
        other.close()
    return seen


@pytest.mark.slow
async def test_watch_on_a_follower_behaves_as_on_redis_server(
    nursery: trio.Nursery, tmp_path: Path, reference: int
) -> None:
    nodes = await start_nodes(nursery, tmp_path)
    leader, tag = await a_led_key(nodes)
    follower, third = (name for name in NAMES if name != leader)
    key = b"{%s}k" % tag
    expected = await trio.to_thread.run_sync(scenario, reference, reference, key)
    assert "aborted" in expected
    ports = {name: handle.redis_port or 0 for name, handle in nodes.items()}
    # The watcher on a follower; the other client on the leader, then on the third node.
    for changer in (leader, third):
        got = await trio.to_thread.run_sync(scenario, ports[follower], ports[changer], key)
        assert got == expected, changer
    router = nodes[leader].node.keys
    assert isinstance(router, KeyRouter)
    await until(lambda: len(router.watching.kept) == 0)  # (every watch used up or released)


@pytest.mark.slow
async def test_watch_on_a_node_without_a_replica_behaves_as_on_redis_server(
    nursery: trio.Nursery, tmp_path: Path, reference: int
) -> None:
    """With two replicas per key, the watcher's node holds none of the key's group, whose leader
    is its second voter (a node without a replica sends to the first, which passes requests on):
    every command, an empty transaction's EXEC included, is answered as by redis-server."""
    nodes = await start_nodes(nursery, tmp_path, replicas=2)
    router = nodes["a"].node.keys
    assert isinstance(router, KeyRouter)
    group = router.layout.groups[0]
    first, second = group.voters
    if (await until(lambda: leaders(nodes)))[group.name] != second:
        port = nodes[second].redis_port or 0
        await trio.to_thread.run_sync(
            lambda: redis.Redis(port=port).execute_command("CLUSTER", "FAILOVER")
        )
        await until(lambda: (led := leaders(nodes)) is not None and led[group.name] == second)
    (watcher,) = set(NAMES) - set(group.voters)
    tag = next(b"t%d" % n for n in range(10_000) if router.layout.group_of(b"{t%d}" % n) == group)
    key = b"{%s}k" % tag
    expected = await trio.to_thread.run_sync(scenario, reference, reference, key)
    ports = {name: handle.redis_port or 0 for name, handle in nodes.items()}
    got = await trio.to_thread.run_sync(scenario, ports[watcher], ports[first], key)
    assert got == expected


@pytest.mark.slow
async def test_concurrent_increments_from_every_node_lose_no_update(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    nodes = await start_nodes(nursery, tmp_path)
    _, tag = await a_led_key(nodes)
    key, rounds = b"{%s}counter" % tag, 25
    ports = [handle.redis_port or 0 for handle in nodes.values()]
    aborted = [0] * len(ports)

    def increments(index: int) -> None:
        with redis.Redis(port=ports[index], socket_timeout=10) as r:
            for _ in range(rounds):
                while True:
                    with r.pipeline() as pipe:
                        try:
                            pipe.watch(key)
                            value = int(pipe.get(key) or 0)
                            pipe.multi()
                            pipe.set(key, value + 1)
                            pipe.execute()
                            break
                        except redis.WatchError:
                            aborted[index] += 1

    def run() -> bytes:
        threads = [threading.Thread(target=increments, args=(i,)) for i in range(len(ports))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join(60)
        with redis.Redis(port=ports[0], socket_timeout=10) as r:
            value: bytes = r.get(key)
            return value

    assert await trio.to_thread.run_sync(run) == b"%d" % (rounds * len(ports))
    assert sum(aborted) > 0  # (the clients did race: without the watches, updates were lost)


@pytest.mark.slow
async def test_watches_across_groups_and_a_new_leader(nursery: trio.Nursery, tmp_path: Path) -> None:
    nodes = await start_nodes(nursery, tmp_path)
    leader, tag = await a_led_key(nodes)
    follower = next(name for name in NAMES if name != leader)
    key = b"{%s}k" % tag
    router = nodes[leader].node.keys
    assert isinstance(router, KeyRouter)
    elsewhere = key_of(nodes, lambda group, _: group.name != router.layout.group_of(key).name)

    def run() -> list[object]:
        seen: list[object] = []
        with redis.Redis(port=nodes[follower].redis_port or 0, socket_timeout=10) as r:
            for watch in ((key, elsewhere), (key,)):
                try:
                    seen.append(r.execute_command("WATCH", *watch))
                except redis.ResponseError as exc:
                    seen.append(str(exc))
            seen.append(r.execute_command("WATCH", elsewhere))  # (a second group)
            r.execute_command("MULTI")
            r.execute_command("SET", key, "v")
            try:
                seen.append(r.execute_command("EXEC"))
            except redis.ResponseError as exc:
                seen.append(str(exc))
            # The node the client is on takes over: the watch made by the old leader is unknown
            # to the new one, so the EXEC that counts on it is answered null.
            seen.append(r.execute_command("WATCH", key))
            seen.append(r.execute_command("CLUSTER", "FAILOVER"))
            deadline = 200
            while not nodes[follower].node.keys.leads_key(key) and deadline:  # type: ignore[union-attr]
                deadline -= 1
                threading.Event().wait(0.05)
            r.execute_command("MULTI")
            r.execute_command("SET", key, "v")
            seen.append(r.execute_command("EXEC"))
        return seen

    seen = await trio.to_thread.run_sync(run)
    assert seen == [
        CROSSSLOT.partition(" ")[2],  # (redis-py keeps the text after the code)
        True,
        True,
        "Transaction discarded because of: " + WATCH_ELSEWHERE,
        True,
        b"OK",
        None,
    ]
    await until(lambda: len(router.watching.kept) == 0)
