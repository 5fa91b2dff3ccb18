"""Blocked stream readers over real sockets: a write serves only the readers it can, in the order
they blocked, and leaves the others waiting where they were, without running their reads again.

Each reader is one connection named after itself, so ``CLIENT LIST`` tells who is still blocked.
"""

from __future__ import annotations

import shutil
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
import redis
import trio

from node.run.launch import NodeHandle
from pipeline.local import redis_server
from tests.node.resp.test_resp_clients import W, sync_client
from tests.support import start_redis_node

pytestmark = pytest.mark.timeout(60)

IDLE_MS = 100
"""How long readers wait before a write that must not touch them (their consumers' idle time)."""


@pytest.fixture
async def node(nursery: trio.Nursery) -> NodeHandle:
    return await start_redis_node(nursery)


class Readers:
    """Named connections, each sending one read at a time and reading its reply when told."""

    def __init__(self, node: NodeHandle) -> None:
        self.port = node.redis_port or 0
        self.conns: dict[str, redis.Connection] = {}
        self.admin: Any = sync_client(node)

    def read(self, name: str, *args: str) -> None:
        """Send ``name``'s read (it connects first, once)."""
        conn = self.conns.get(name)
        if conn is None:
            conn = self.conns[name] = redis.Connection(
                host="127.0.0.1", port=self.port, socket_timeout=W, protocol=2
            )
            conn.send_command("CLIENT", "SETNAME", name)
            assert conn.read_response() == b"OK"
        conn.send_command(*args)

    def group_read(self, name: str, group: str = "g", block: int = 0) -> None:
        args = ["GROUP", group, name, "COUNT", "1", "BLOCK", str(block), "STREAMS", "s", ">"]
        self.read(name, "XREADGROUP", *args)

    def reply(self, name: str) -> Any:
        """``name``'s next reply (an error is returned, not raised)."""
        try:
            return self.conns[name].read_response()
        except redis.ResponseError as exc:
            return str(exc)

    def entry(self, name: str) -> bytes:
        """The ID of the one entry ``name``'s read got."""
        reply = self.reply(name)
        assert isinstance(reply, list), reply
        [[key, [[entry_id, _]]]] = reply
        assert key == b"s"
        return bytes(entry_id)

    def blocked(self) -> set[str]:
        return {c["name"] for c in self.admin.client_list() if "b" in c["flags"]}

    def await_blocked(self, *names: str) -> None:
        """Until exactly ``names`` are blocked."""
        deadline = time.monotonic() + W
        while self.blocked() != set(names):
            assert time.monotonic() < deadline, (self.blocked(), names)
            time.sleep(0.01)

    def close(self) -> None:
        for conn in self.conns.values():
            conn.disconnect()
        self.admin.close()


@pytest.fixture
def readers(node: NodeHandle) -> Iterator[Readers]:
    made = Readers(node)
    yield made
    made.close()


def xadd(readers: Readers, entry_id: str) -> None:
    """Add one entry (once XADD has answered, the readers it served are no longer blocked)."""
    assert readers.admin.xadd("s", {"f": "v"}, id=entry_id) == entry_id.encode()


async def test_one_entry_serves_the_first_of_many_group_readers_and_leaves_the_rest_alone(
    readers: Readers,
) -> None:
    def scenario() -> None:
        readers.admin.xgroup_create("s", "g", id="$", mkstream=True)
        names = [f"r{i:02}" for i in range(40)]
        for name in names:
            readers.group_read(name)
            readers.await_blocked(*names[: names.index(name) + 1])  # (one after the other)
        deadline = time.monotonic() + W
        while min(c["idle"] for c in readers.admin.xinfo_consumers("s", "g")) < IDLE_MS:
            assert time.monotonic() < deadline
            time.sleep(0.01)
        xadd(readers, "1-1")
        assert readers.entry("r00") == b"1-1"
        readers.await_blocked(*names[1:])
        idle = {c["name"].decode(): c["idle"] for c in readers.admin.xinfo_consumers("s", "g")}
        assert min(idle[name] for name in names[1:]) >= IDLE_MS  # (their reads did not run again)
        readers.group_read("r00")  # served, it waits again: behind all the others
        readers.await_blocked(*names)
        for n, name in enumerate([*names[1:4], *names[4:], "r00"]):
            xadd(readers, f"2-{n}")
            assert readers.entry(name) == f"2-{n}".encode()

    await trio.to_thread.run_sync(scenario)


async def test_groups_and_plain_readers_are_served_apart(readers: Readers) -> None:
    def scenario() -> None:
        readers.admin.xgroup_create("s", "g1", id="$", mkstream=True)
        readers.admin.xgroup_create("s", "g2", id="$")
        order = [
            ("a1", "g1"), ("b1", "g2"), ("x1", "$"), ("a2", "g1"), ("late", "9-9"),
            ("b2", "g2"), ("x2", "0-0"), ("a3", "g1"),
        ]  # fmt: skip
        for n, (name, what) in enumerate(order):
            if what.startswith("g"):
                readers.group_read(name, what)
            else:
                readers.read(name, "XREAD", "BLOCK", "0", "STREAMS", "s", what)
            readers.await_blocked(*(name for name, _ in order[: n + 1]))
        xadd(readers, "1-1")  # the first of each group, and every XREAD from below it
        readers.await_blocked("a2", "late", "b2", "a3")
        assert [readers.entry(name) for name in ("a1", "b1", "x1", "x2")] == [b"1-1"] * 4
        with readers.admin.pipeline(transaction=True) as pipe:  # two entries, one write
            pipe.xadd("s", {"f": "v"}, id="2-1").xadd("s", {"f": "v"}, id="3-1").execute()
        assert [readers.entry(name) for name in ("a2", "a3", "b2")] == [b"2-1", b"3-1", b"2-1"]
        readers.await_blocked("late")
        xadd(readers, "9-10")
        assert readers.entry("late") == b"9-10"

    await trio.to_thread.run_sync(scenario)


async def test_a_vanished_group_or_key_answers_its_readers_only(readers: Readers) -> None:
    def scenario() -> None:
        admin = readers.admin
        admin.xgroup_create("s", "g1", id="$", mkstream=True)
        admin.xgroup_create("s", "g2", id="$")
        readers.group_read("a1", "g1")
        readers.group_read("b1", "g2")
        readers.group_read("a2", "g1")
        readers.read("x", "XREAD", "BLOCK", "0", "STREAMS", "s", "$")
        readers.await_blocked("a1", "b1", "a2", "x")
        nogroup = "NOGROUP No such key 's' or consumer group '{}' in XREADGROUP with GROUP option"
        assert admin.xgroup_destroy("s", "g1") == 1
        assert [readers.reply(name) for name in ("a1", "a2")] == [nogroup.format("g1")] * 2
        readers.await_blocked("b1", "x")
        assert admin.delete("s") == 1
        assert readers.reply("b1") == nogroup.format("g2")
        readers.await_blocked("x")  # (a plain read waits for the key to come back)
        admin.xadd("s", {"f": "v"}, id="1-1")
        assert readers.entry("x") == b"1-1"

    await trio.to_thread.run_sync(scenario)


async def test_readers_behind_a_timed_out_unblocked_or_gone_one_keep_their_order(
    readers: Readers,
) -> None:
    def scenario() -> None:
        readers.admin.xgroup_create("s", "g", id="$", mkstream=True)
        order = ["r0", "timed", "r1", "unblocked", "r2", "gone", "r3"]
        for n, name in enumerate(order):
            readers.group_read(name, block=300 if name == "timed" else 0)
            readers.await_blocked(*order[: n + 1])
        xadd(readers, "1-1")
        assert readers.entry("r0") == b"1-1"
        assert readers.reply("timed") is None  # its timeout fired while it waited behind r0
        unblocked = next(c["id"] for c in readers.admin.client_list() if c["name"] == "unblocked")
        assert readers.admin.client_unblock(unblocked) == 1
        assert readers.reply("unblocked") is None
        readers.conns.pop("gone").disconnect()
        readers.await_blocked("r1", "r2", "r3")
        for n, name in enumerate(["r1", "r2", "r3"]):
            xadd(readers, f"2-{n}")
            assert readers.entry(name) == f"2-{n}".encode()

    await trio.to_thread.run_sync(scenario)


def _blocked_clients(port: int) -> list[int]:
    """INFO's ``blocked_clients`` at each step: none, one reader waiting, two, one served by a write,
    the other unblocked by CLIENT UNBLOCK."""
    admin = redis.Redis(host="127.0.0.1", port=port, socket_timeout=W)
    admin.delete("s", "t")
    seen = [int(admin.info("clients")["blocked_clients"])]
    conns = [socket.create_connection(("127.0.0.1", port), timeout=W) for _ in range(2)]
    ids = []
    try:
        for conn, key in zip(conns, (b"s", b"t"), strict=True):
            # (CLIENT ID is answered once the read after it has blocked)
            conn.sendall(b"CLIENT ID\r\nXREAD BLOCK 0 STREAMS %s $\r\n" % key)
            ids.append(int(conn.recv(64).strip(b":\r\n")))
            seen.append(int(admin.info("clients")["blocked_clients"]))
        admin.xadd("s", {"f": "v"}, id="1-1")
        assert conns[0].recv(1 << 16).startswith(b"*1\r\n")
        seen.append(int(admin.info("clients")["blocked_clients"]))
        assert admin.client_unblock(ids[1])
        seen.append(int(admin.info("clients")["blocked_clients"]))
    finally:
        for conn in conns:
            conn.close()
        admin.close()
    return seen


@pytest.mark.skipif(shutil.which("redis-server") is None, reason="needs redis-server")
async def test_info_counts_blocked_clients_as_redis_server_does(node: NodeHandle) -> None:
    def both() -> tuple[list[int], list[int]]:
        with redis_server() as port:
            theirs = _blocked_clients(port)
        return theirs, _blocked_clients(node.redis_port or 0)

    theirs, ours = await trio.to_thread.run_sync(both)
    assert theirs == [0, 1, 2, 1, 0]
    assert ours == theirs
