"""Fixtures for end-to-end tests: a whole node on 127.0.0.1, and a way to drive nats-py from trio.

Network test rules: loopback only, port 0 always, every wait bounded. nats-py runs on asyncio, so
its scenarios run in a worker thread with their own event loop while the node runs in the test's
trio nursery; each scenario bounds its own waits so a failure ends it instead of hanging the thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest
import trio

from node.config.options import Config
from node.run.launch import NodeHandle, run_node

T = TypeVar("T")


async def start_node(
    nursery: trio.Nursery, config: Config | None = None, *, port: int = 0
) -> NodeHandle:
    """A node on 127.0.0.1 (a free port unless one is asked for), whatever ``config`` says."""
    config = (config or Config()).evolve(host="127.0.0.1", port=port, http_host="127.0.0.1")
    handle: NodeHandle = await nursery.start(run_node, config)
    return handle


@pytest.fixture
async def node(nursery: trio.Nursery) -> NodeHandle:
    return await start_node(nursery)


async def in_asyncio(scenario: Callable[[], Awaitable[T]]) -> T:
    """Run an asyncio coroutine function (a nats-py scenario) to completion in a worker thread."""

    def run() -> T:
        return asyncio.run(scenario())  # type: ignore[arg-type]

    return await trio.to_thread.run_sync(run, abandon_on_cancel=True)
