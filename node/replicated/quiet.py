"""Holding a group's commands while its leader waits to snapshot.

A leader's keys hold its pending changes (made here, not committed yet), so it snapshots a group
only once none is pending: asked for a snapshot while some are, the group's machine is
``quieting`` (``KeyspaceMachine``). The node then holds new commands of that group, its own
clients' and forwarded ones, until the machine says the snapshot is taken (``quieted``), so that
writes that never stop cannot keep the leader's log from being compacted. A wait is given up after
``timeout`` (a change not committed by then makes the keys rebuild anyway), for every command held.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import partial

import trio

from node.replicated.machine import KeyspaceMachine

__all__ = ["Quiet"]


class Quiet:
    """The held commands of this node's groups (by name)."""

    def __init__(self, machines: Mapping[str, KeyspaceMachine], timeout: float) -> None:
        self._machines = machines
        self._timeout = timeout
        self._taken: dict[str, trio.Event] = {}
        """Per group whose machine is ``quieting``: set once its snapshot is taken."""
        for name, machine in machines.items():
            machine.quieted = partial(self._quieted, name)

    def holds(self, name: str) -> bool:
        """Whether new commands of the group must wait (``wait``)."""
        return self._machines[name].quieting

    async def wait(self, name: str) -> None:
        """Until the group's snapshot is taken, or the wait is given up."""
        machine = self._machines[name]
        if machine.quieting:
            with trio.move_on_after(self._timeout):
                await self._taken.setdefault(name, trio.Event()).wait()
                return
            machine.quieting = False
            self._quieted(name)

    def _quieted(self, name: str) -> None:
        event = self._taken.pop(name, None)
        if event is not None:
            event.set()
