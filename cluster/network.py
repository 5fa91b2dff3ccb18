"""An in-memory network between nodes, with faults you can switch on and off per pair of nodes.

Connections are trio memory streams wrapped so that the path between two nodes can be:

* **cut**: every open connection between them breaks at once, and new ones are refused until
  healed (a link going down, a cable pulled);
* **black-holed**: connections stay open but nothing gets through, in either direction, and new
  ones cannot be made (a partition: nothing tells either side; only silence does). Writers stall
  as they would on full TCP buffers, and resume if the path heals before anyone gives up;
* **delayed**: every write waits a while before it goes out (a slow link);
* **healed**: back to normal.

Faults are symmetric: between A and B means both ways.
"""

from __future__ import annotations

import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import attrs
import trio
import trio.testing

__all__ = ["MemoryListener", "MemoryNetwork"]


@attrs.define(eq=False)
class _Path:
    """The state of the network between two nodes."""

    cut: bool = False
    blackholed: bool = False
    delay: float = 0.0
    healed: trio.Event = attrs.Factory(trio.Event)
    connections: weakref.WeakSet[trio.StapledStream[Any, Any]] = attrs.Factory(weakref.WeakSet)
    """Both ends of every open connection (closed ones drop out as they are collected)."""


class _FaultyStream(trio.abc.Stream):
    """One end of a connection; its writes obey the path's faults."""

    def __init__(self, inner: trio.abc.Stream, path: _Path) -> None:
        self._inner = inner
        self._path = path

    async def send_all(self, data: bytes | bytearray | memoryview) -> None:
        path = self._path
        while path.blackholed:
            await path.healed.wait()
        if path.delay:
            await trio.sleep(path.delay)
        await self._inner.send_all(data)

    async def wait_send_all_might_not_block(self) -> None:
        await self._inner.wait_send_all_might_not_block()

    async def receive_some(self, max_bytes: int | None = None) -> bytes | bytearray:
        return await self._inner.receive_some(max_bytes)

    async def aclose(self) -> None:
        await self._inner.aclose()


class MemoryListener(trio.abc.Listener[trio.abc.Stream]):
    """A listener that connections on a ``MemoryNetwork`` arrive at."""

    def __init__(self) -> None:
        self._send, self._receive = trio.open_memory_channel[trio.abc.Stream](float("inf"))

    async def accept(self) -> trio.abc.Stream:
        try:
            return await self._receive.receive()
        except (trio.EndOfChannel, trio.ClosedResourceError) as exc:
            raise trio.ClosedResourceError from exc

    def deliver(self, stream: trio.abc.Stream) -> None:
        """Hand a new connection to ``accept``; OSError once closed, as a dead port refuses."""
        try:
            self._send.send_nowait(stream)
        except trio.ClosedResourceError as exc:
            raise OSError("connection refused") from exc

    async def aclose(self) -> None:
        await self._send.aclose()
        await self._receive.aclose()


class MemoryNetwork:
    """Listeners by address, and the faults between pairs of named nodes."""

    def __init__(self) -> None:
        self._listeners: dict[tuple[str, int], tuple[str, MemoryListener]] = {}
        self._paths: dict[frozenset[str], _Path] = {}

    def listen(self, node: str, address: tuple[str, int]) -> MemoryListener:
        """A listener for ``node`` at ``address`` (taking it over from any earlier one)."""
        listener = MemoryListener()
        self._listeners[address] = (node, listener)
        return listener

    def _path(self, a: str, b: str) -> _Path:
        return self._paths.setdefault(frozenset((a, b)), _Path())

    def dialer(self, node: str) -> Callable[[str, int], Awaitable[trio.abc.Stream]]:
        """The ``dial(host, port)`` function for connections ``node`` opens."""

        async def dial(host: str, port: int) -> trio.abc.Stream:
            await trio.lowlevel.checkpoint()
            target = self._listeners.get((host, port))
            if target is None:
                raise OSError(f"connection refused: {host}:{port}")
            remote, listener = target
            path = self._path(node, remote)
            if path.cut or path.blackholed:
                raise OSError(f"{host}:{port} unreachable from {node}")
            ours, theirs = trio.testing.memory_stream_pair()
            path.connections.update((ours, theirs))
            listener.deliver(_FaultyStream(theirs, path))
            return _FaultyStream(ours, path)

        return dial

    def cut(self, a: str, b: str) -> None:
        """Break every connection between ``a`` and ``b``, and refuse new ones until healed."""
        path = self._path(a, b)
        path.cut = True
        connections, path.connections = list(path.connections), weakref.WeakSet()
        for stream in connections:
            stream.send_stream.close()
            stream.receive_stream.close()

    def blackhole(self, a: str, b: str) -> None:
        """Let nothing through between ``a`` and ``b``; connections stay open, writers stall."""
        path = self._path(a, b)
        if not path.blackholed:
            path.blackholed = True
            path.healed = trio.Event()

    def delay(self, a: str, b: str, seconds: float) -> None:
        """Hold every write between ``a`` and ``b`` for ``seconds``."""
        self._path(a, b).delay = seconds

    def heal(self, a: str, b: str) -> None:
        """Back to normal between ``a`` and ``b``."""
        self._reset(self._path(a, b))

    def heal_all(self) -> None:
        for path in self._paths.values():
            self._reset(path)

    @staticmethod
    def _reset(path: _Path) -> None:
        path.cut = path.blackholed = False
        path.delay = 0.0
        path.healed.set()
