"""What the tests share: nodes on 127.0.0.1 in the test's trio nursery, nats-py driven from trio,
bounded waiting from either side of the trio/asyncio divide, and raw reads from a stream (up to a
marker, or line by line).

Network test rules: loopback only, port 0 always, every wait bounded. nats-py runs on asyncio, so
its scenarios run in a worker thread with their own event loop (``in_asyncio``) while the node runs
in the test's trio nursery; each scenario bounds its own waits so a failure ends it instead of
hanging the thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Literal, TypeVar

import nats
import trio
from nats.aio.client import Client
from nats.aio.msg import Msg

from node.config.options import Config, RedisConfig
from node.run.launch import NodeHandle, run_node

T = TypeVar("T")

W = 10.0
"""The bound on every single asyncio wait (a connect, a condition from a nats-py scenario)."""

WAIT = 20.0
"""The bound on waiting from trio for state no event announces (``until``)."""

PASSWORD = "pw"
"""The password ``connect`` logs a named user in with."""


async def start_node(
    nursery: trio.Nursery, config: Config | None = None, *, port: int = 0
) -> NodeHandle:
    """A node on 127.0.0.1 (a free port unless one is asked for), whatever ``config`` says."""
    config = (config or Config()).evolve(host="127.0.0.1", port=port, http_host="127.0.0.1")
    handle: NodeHandle = await nursery.start(run_node, config)
    return handle


async def start_redis_node(nursery: trio.Nursery, config: Config | None = None) -> NodeHandle:
    """A node with a Redis port on 127.0.0.1, whatever else ``config`` says."""
    config = (config or Config()).evolve(redis=RedisConfig(host="127.0.0.1", port=0))
    handle = await start_node(nursery, config)
    assert handle.redis_port
    return handle


async def in_asyncio(scenario: Callable[[], Awaitable[T]]) -> T:
    """Run an asyncio coroutine function (a nats-py scenario) to completion in a worker thread."""

    def run() -> T:
        return asyncio.run(scenario())  # type: ignore[arg-type]

    return await trio.to_thread.run_sync(run, abandon_on_cancel=True)


async def until(predicate: Callable[[], T | Literal[False] | None]) -> T:
    """From trio: wait for state no event announces (interest arriving over a route), within
    ``WAIT`` seconds; return what ``predicate`` found."""
    with trio.fail_after(WAIT):
        while not (found := predicate()):  # noqa: ASYNC110
            await trio.sleep(0.01)
        return found


async def connect(target: NodeHandle | str, user: str | None = None, **options: Any) -> Client:
    """A nats-py client of a node (or of whatever listens at a URL), without reconnects unless
    asked; with ``user``, logged in as that user with ``PASSWORD`` unless a password is given."""
    address = target if isinstance(target, str) else target.url
    if user is not None:
        options = {"user": user, "password": PASSWORD} | options
    options.setdefault("allow_reconnect", False)
    return await asyncio.wait_for(nats.connect(address, **options), W)


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


async def read_until(stream: trio.abc.Stream, end: bytes) -> bytes:
    """What arrives until ``end`` has (or the peer closes); the caller bounds the wait."""
    got = b""
    while end not in got:
        chunk = await stream.receive_some(65536)
        if not chunk:
            break
        got += chunk
    return got


class Lines:
    """A raw client's view of a connection: whole protocol lines (payloads are not needed here)."""

    def __init__(self, stream: trio.abc.Stream) -> None:
        self.stream = stream
        self.buffer = b""

    async def line(self) -> bytes:
        """The next line, or b"" once the server has hung up (within ``W`` seconds)."""
        with trio.fail_after(W):
            while b"\r\n" not in self.buffer:
                try:
                    data = await self.stream.receive_some(65536)
                except trio.BrokenResourceError:
                    data = b""
                if not data:
                    return b""
                self.buffer += data
        line, self.buffer = self.buffer.split(b"\r\n", 1)
        return line

    async def send(self, data: bytes) -> None:
        await self.stream.send_all(data)
