"""A raw NATS client that watches INFO lines, for the discovery and lame duck tests."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import nats
import trio
from nats.aio.client import Client

from tests.support import Box, Lines

W = 10.0
"""The bound on every wait."""


class Watcher(Lines):
    """A client that said ``protocol`` 1 and had its first PONG: the node sends it INFO updates."""

    def __init__(self, stream: trio.SocketStream) -> None:
        super().__init__(stream)
        self.greeting: dict[str, Any] = {}

    @classmethod
    async def connect(cls, port: int, protocol: int = 1) -> Watcher:
        stream = await trio.open_tcp_stream("127.0.0.1", port)
        watcher = cls(stream)
        watcher.greeting = await watcher.next_info()
        connect = json.dumps({"verbose": False, "protocol": protocol}).encode()
        await stream.send_all(b"CONNECT " + connect + b"\r\nPING\r\n")
        assert await watcher.line() == b"PONG"
        return watcher

    async def next_info(self) -> dict[str, Any]:
        """The next INFO's fields, skipping PINGs (answered) and anything else."""
        while True:
            line = await self.line()
            assert line, "closed while an INFO was awaited"
            if line.startswith(b"INFO "):
                fields: dict[str, Any] = json.loads(line[5:])
                return fields
            if line == b"PING":
                await self.stream.send_all(b"PONG\r\n")

    async def info_where(self, check: Any) -> dict[str, Any]:
        """The first INFO from now on whose fields pass ``check``."""
        while True:
            info = await self.next_info()
            if check(info):
                return info

    async def closed(self) -> bool:
        """Whether the node closes the connection (reading whatever comes first)."""
        while await self.line():
            pass
        return True

    async def aclose(self) -> None:
        await trio.aclose_forcefully(self.stream)


async def still_served(nc: Client, box: Box, url: str, subject: str, payload: bytes) -> list[Any]:
    """After a client moved to another node: where it is connected now (``host:port``) and what
    its subscription (feeding ``box``) got of ``payload``, published on ``subject`` by a fresh
    client of ``url``. Closes both clients."""
    at = f"{nc.connected_url.hostname}:{nc.connected_url.port}" if nc.connected_url else ""
    await nc.flush()
    other = await asyncio.wait_for(nats.connect(url), W)
    await other.publish(subject, payload)
    await other.flush()
    await box.wait_for(1)
    await other.close()
    await nc.close()
    return [at, box.data]
