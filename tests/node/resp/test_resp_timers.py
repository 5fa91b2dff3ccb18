"""A Redis connection's timers run only while it has something to time: idle clients hold no task
for them, a blocked read's deadline starts them (and is kept), and they end soon after."""

from __future__ import annotations

import time

import pytest
import trio

from node.run.launch import NodeHandle
from node.server import TIMERS_LINGER
from tests.support import read_until, start_redis_node, until

pytestmark = pytest.mark.timeout(30)


def all_tasks() -> list[trio.lowlevel.Task]:
    """Every task of this trio run."""
    root = trio.lowlevel.current_root_task()
    assert root is not None
    found, nurseries = [], list(root.child_nurseries)
    while nurseries:
        for task in nurseries.pop().child_tasks:
            found.append(task)
            nurseries.extend(task.child_nurseries)
    return found


def timer_tasks() -> int:
    """Tasks running a session's timers (``Session._guard``), anywhere in this trio run."""
    return sum(task.name.endswith("Session._guard") for task in all_tasks())


async def client(handle: NodeHandle) -> trio.SocketStream:
    stream = await trio.open_tcp_stream("127.0.0.1", handle.redis_port or 0)
    await stream.send_all(b"PING\r\n")
    assert await read_until(stream, b"\r\n") == b"+PONG\r\n"
    return stream


async def test_idle_clients_hold_no_timer_task_and_a_blocked_read_starts_one(
    nursery: trio.Nursery,
) -> None:
    handle = await start_redis_node(nursery)
    idle = [await client(handle) for _ in range(20)]
    assert timer_tasks() == 0

    reader = await client(handle)
    started = time.monotonic()
    await reader.send_all(b"XREAD BLOCK 300 STREAMS nothing 0\r\n")
    await until(lambda: timer_tasks() == 1)
    assert await read_until(reader, b"\r\n") == b"*-1\r\n"  # (its deadline kept)
    assert time.monotonic() - started >= 0.3
    await until(lambda: timer_tasks() == 0)  # (within TIMERS_LINGER of the read's end)

    await reader.send_all(b"XREAD BLOCK 0 STREAMS nothing 0\r\n")  # (no deadline: nothing to time)
    await trio.sleep(TIMERS_LINGER / 10)
    assert timer_tasks() == 0
    for stream in [*idle, reader]:
        await stream.aclose()


async def test_an_idle_connection_holds_no_nursery_of_its_own(nursery: trio.Nursery) -> None:
    """Its writer and timers, when they run, are tasks of the node's nursery: an idle
    connection's task (its reader) opens none (a nursery costs each connection ~1.3 KB)."""
    handle = await start_redis_node(nursery)
    idle = [await client(handle) for _ in range(5)]
    readers = [task for task in all_tasks() if task.name.endswith("._run_handler")]
    assert len(readers) == 5
    assert [task.child_nurseries for task in readers] == [[]] * 5
    for stream in idle:
        await stream.aclose()
