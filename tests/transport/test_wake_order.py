"""``keep_wake_order``: tasks woken in one batch run in the order they were woken."""

from __future__ import annotations

import pytest
import trio

from transport.wake_order import keep_wake_order

pytestmark = pytest.mark.timeout(30)

BATCHES = 200


async def _wait(index: int, event: trio.Event, ran: list[int]) -> None:
    await event.wait()
    ran.append(index)


async def _orders() -> list[list[int]]:
    """For ``BATCHES`` rounds, the order in which three tasks woken in one batch ran."""
    runs: list[list[int]] = []
    async with trio.open_nursery() as nursery:
        for _ in range(BATCHES):
            events = [trio.Event() for _ in range(3)]
            ran: list[int] = []

            for index, event in enumerate(events):
                nursery.start_soon(_wait, index, event, ran)
            await trio.testing.wait_all_tasks_blocked()
            for event in events:
                event.set()
            await trio.testing.wait_all_tasks_blocked()
            runs.append(ran)
    return runs


async def test_woken_tasks_run_in_wake_order() -> None:
    assert keep_wake_order()
    assert keep_wake_order()  # (idempotent)
    assert all(ran == [0, 1, 2] for ran in await _orders())
