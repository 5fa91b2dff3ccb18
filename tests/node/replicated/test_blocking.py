"""Blocking stream reads of keys led by another node: the client waits on its own node, which asks
the leader again whenever its replica applies a write to the keys."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
import redis
import trio
from hypothesis import given
from hypothesis import strategies as st
from redis.exceptions import ClusterDownError

from node.replicated.blocking import AGAIN, again, block_at, unblocked, unpack_again
from node.run.launch import NodeHandle
from tests.node.replicated.test_path import (
    NAMES,
    a_led_key,
    blocked,
    call,
    pending,
    start_nodes,
    stop,
)
from tests.support import until


def test_block_is_found_among_the_options_only() -> None:
    assert block_at([b"XREAD", b"COUNT", b"1", b"block", b"0", b"STREAMS", b"k", b"$"]) == 3
    assert block_at([b"XREAD", b"STREAMS", b"BLOCK", b"0"]) == -1  # (a key named BLOCK)
    assert block_at([b"XREADGROUP", b"GROUP", b"BLOCK", b"c", b"STREAMS", b"k", b">"]) == -1
    assert block_at([b"GET", b"BLOCK"]) == -1
    assert unblocked([b"XREAD", b"BLOCK", b"5", b"BLOCK", b"0", b"STREAMS", b"k", b"0"]) == [
        b"XREAD",
        b"STREAMS",
        b"k",
        b"0",
    ]
    for timeout in (b"-1", b"x", b"05"):  # (left for the read to refuse, as anywhere)
        args = [b"XREAD", b"BLOCK", timeout, b"STREAMS", b"k", b"0"]
        assert unblocked(args) == args
    assert unblocked([b"XREAD", b"BLOCK"]) == [b"XREAD", b"BLOCK"]


READ = st.lists(st.binary(max_size=6), max_size=5).map(lambda rest: [b"XREAD", b"BLOCK", b"0", *rest])


@given(READ)
def test_again_carries_the_read_to_wait_with(args: list[bytes]) -> None:
    assert again(args, b"*1\r\n") == b"*1\r\n"
    assert unpack_again(again(args, b"*-1\r\n")) == args


@given(st.binary(max_size=40))
def test_any_answer_unpacks_to_a_read_or_none(data: bytes) -> None:
    args = unpack_again(AGAIN + data)
    if args is not None:
        assert block_at(args) > 0


async def call2(handle: NodeHandle, *args: object, protocol: int = 2) -> object:
    """A command's reply to a RESP2 (or RESP3) client."""

    def run() -> object:
        port = handle.redis_port or 0
        with redis.Redis(host="127.0.0.1", port=port, socket_timeout=20, protocol=protocol) as c:
            return c.execute_command(*args)

    return await trio.to_thread.run_sync(run)


async def send_read(port: int, request: bytes) -> bytes:
    def run() -> bytes:
        with socket.create_connection(("127.0.0.1", port), timeout=20) as sock:
            sock.sendall(request)
            return sock.recv(65536)

    return await trio.to_thread.run_sync(run)


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_a_blocked_read_of_keys_led_elsewhere_is_served_by_a_later_write(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    nodes = await start_nodes(nursery, tmp_path)
    leader, key = await a_led_key(nodes)
    reader, writer = (nodes[name] for name in NAMES if name != leader)
    old = await call(nodes[leader], "XADD", key, "*", "n", "old")
    await until(lambda: isinstance(old, bytes))
    assert await call2(reader, "XREAD", "BLOCK", "0", "STREAMS", key, "0") == [
        [key, [(old, {b"n": b"old"})]]
    ]

    # "$" is what the stream ends at on the leader: the entry already there is not served.
    got: list[object] = []

    async def read(protocol: int, task_status: trio.TaskStatus[None]) -> None:
        task_status.started()
        args = ("XREAD", "BLOCK", "0", "STREAMS", key, "$")
        got.append(await call2(reader, *args, protocol=protocol))

    with trio.fail_after(20):
        async with trio.open_nursery() as readers:
            await readers.start(read, 2)
            await until(lambda: blocked(reader) == 1)
            await call(nodes[leader], "SET", b"{%s}other" % key, "x")  # (no entry: it waits on)
            added = await call(writer, "XADD", key, "*", "n", "new")
    assert got == [[[key, [(added, {b"n": b"new"})]]]]
    assert blocked(reader) == 0
    assert blocked(nodes[leader]) == 0

    # A RESP3 client's read, served the same way, has RESP3's shape (a map by stream).
    with trio.fail_after(20):
        async with trio.open_nursery() as readers:
            await readers.start(read, 3)
            await until(lambda: blocked(reader) == 1)
            again = await call(writer, "XADD", key, "*", "n", "again")
    assert got[1] == {key: [[(again, {b"n": b"again"})]]}

    # Timed out, it answers as redis-server does (RESP2's null array).
    port = reader.redis_port or 0
    request = b"XREAD BLOCK 100 STREAMS %s $\r\n" % key
    assert await send_read(port, request) == b"*-1\r\n"
    assert await send_read(port, b"XREAD BLOCK -1 STREAMS %s $\r\n" % key) == (
        b"-ERR timeout is negative\r\n"
    )


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_a_blocked_group_read_led_elsewhere_is_delivered_once_committed(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    nodes = await start_nodes(nursery, tmp_path)
    leader, key = await a_led_key(nodes)
    reader, writer = (nodes[name] for name in NAMES if name != leader)
    assert await call(writer, "XGROUP", "CREATE", key, "g", "$", "MKSTREAM") == b"OK"
    got: list[object] = []
    group_read = ["XREADGROUP", "GROUP", "g", "c1", "BLOCK", "0", "STREAMS", key, ">"]

    async def read(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        got.append(await call2(reader, *group_read))

    with trio.fail_after(20):
        async with trio.open_nursery() as readers:
            await readers.start(read)
            await until(lambda: blocked(reader) == 1)
            added = await call(writer, "XADD", key, "*", "f", "v")
    assert got == [[[key, [(added, {b"f": b"v"})]]]]
    for handle in nodes.values():  # (delivered by the group's leader, on every replica)
        await until(lambda handle=handle: pending(handle, key) == 1)  # type: ignore[misc]

    # A client that goes while blocked leaves nothing waiting, here or on the leader.
    with socket.create_connection(("127.0.0.1", reader.redis_port or 0), timeout=10) as sock:
        sock.sendall(b"XREADGROUP GROUP g c2 BLOCK 0 STREAMS %s >\r\n" % key)
        await until(lambda: blocked(reader) == 1)
    await until(lambda: blocked(reader) == 0)
    assert blocked(nodes[leader]) == 0
    await call(writer, "XADD", key, "*", "f", "w")  # (no one to deliver it to: none pending)
    await trio.sleep(0.3)
    for handle in nodes.values():
        assert pending(handle, key) == 1


@pytest.mark.slow
@pytest.mark.timeout(90)
async def test_a_blocked_read_outlives_the_leader_and_is_served_by_the_next(
    nursery: trio.Nursery, tmp_path: Path
) -> None:
    nodes = await start_nodes(nursery, tmp_path)
    leader, key = await a_led_key(nodes)
    reader, writer = (nodes[name] for name in NAMES if name != leader)
    assert isinstance(await call(writer, "XADD", key, "*", "n", "0"), bytes)
    got: list[object] = []

    async def read(task_status: trio.TaskStatus[None] = trio.TASK_STATUS_IGNORED) -> None:
        task_status.started()
        got.append(await call2(reader, "XREAD", "BLOCK", "0", "STREAMS", key, "$"))

    async with trio.open_nursery() as readers:
        await readers.start(read)
        await until(lambda: blocked(reader) == 1)
        await stop(nodes[leader])
        with trio.fail_after(20):
            while True:
                try:
                    added = await call(writer, "XADD", key, "*", "n", "1")
                    break
                except ClusterDownError:
                    await trio.sleep(0.05)
    assert got == [[[key, [(added, {b"n": b"1"})]]]]
