"""What the real-socket cluster tests share: bounded waiting from either side of the trio/asyncio
divide, nats-py connections, and an inbox for subscription callbacks."""

from __future__ import annotations

import asyncio
import socket
from collections.abc import Callable
from typing import Any

import nats
import trio
from nats.aio.client import Client
from nats.aio.msg import Msg

from node.run.launch import NodeHandle

W = 10.0
"""The bound on every wait."""


async def until(predicate: Callable[[], bool]) -> None:
    """Wait for state no event announces (interest arriving over a route), within ``W`` seconds."""
    with trio.fail_after(W):
        while not predicate():  # noqa: ASYNC110
            await trio.sleep(0.01)


async def connect(target: NodeHandle | str, **options: Any) -> Client:
    """A nats-py client of a node (or of whatever listens at a URL), without reconnects."""
    address = target if isinstance(target, str) else target.url
    return await asyncio.wait_for(nats.connect(address, allow_reconnect=False, **options), W)


async def settled(predicate: Callable[[], bool]) -> None:
    """From a nats-py scenario: wait (bounded) until ``predicate`` holds."""
    async with asyncio.timeout(W):
        while not predicate():  # noqa: ASYNC110 (counts and interest announce nothing)
            await asyncio.sleep(0.005)


async def eventually(predicate: Callable[[], bool]) -> None:
    """From a nats-py scenario: wait (bounded) until ``predicate`` holds on the nodes' side."""
    await settled(lambda: trio.from_thread.run_sync(predicate))


class Box:
    """A subscription callback's inbox."""

    def __init__(self) -> None:
        self.data: list[bytes] = []

    async def take(self, msg: Msg) -> None:
        self.data.append(msg.data)

    async def wait_for(self, count: int) -> None:
        await settled(lambda: len(self.data) >= count)


def free_port() -> int:
    """A port free right now, for a process that must be told its port up front."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])
