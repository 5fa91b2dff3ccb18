"""``Readiness``: sockets kept armed for input, their parked readers woken in arrival order (or
served in their place), one task for all of them that lives exactly as long as some socket is
watched."""

from __future__ import annotations

import logging
import socket
from collections.abc import Iterator
from contextlib import contextmanager

import pytest
import trio
import trio.testing

from transport.readiness import KEEP, Readiness
from transport.wake_order import keep_wake_order

pytestmark = pytest.mark.timeout(30)


@contextmanager
def watched(readiness: Readiness, count: int) -> Iterator[list[tuple[socket.socket, socket.socket]]]:
    """``count`` socket pairs, the first socket of each watched (and forgotten before closing)."""
    pairs = [socket.socketpair() for _ in range(count)]
    for ours, _ in pairs:
        readiness.watch(ours.fileno())
    try:
        yield pairs
    finally:
        for ours, theirs in pairs:
            readiness.forget(ours.fileno())
            ours.close()
            theirs.close()


def pollers() -> list[trio.lowlevel.Task]:
    """The readiness tasks running (system tasks: children of the root task's nursery)."""
    root = trio.lowlevel.current_root_task()
    assert root is not None
    tasks = [task for nursery in root.child_nurseries for task in nursery.child_tasks]
    return [task for task in tasks if task.name.endswith("Readiness._run")]


async def test_input_that_came_before_its_reader_waited_is_reported_before_later_input() -> None:
    """Socket A gets input while nobody waits for it (its reader looked, found nothing, and has
    not parked yet), then B, whose reader waits; A's reader then parks. A's input came first, so
    A's reader runs first. (trio arms a socket as its reader waits: A would be reported after B.)"""
    assert keep_wake_order()
    readiness = Readiness()
    woken: list[str] = []

    async def reader(name: str, sock: socket.socket) -> None:
        await readiness.wait_readable(sock.fileno())
        woken.append(name)

    with watched(readiness, 2) as ((a, a_peer), (b, b_peer)):
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader, "b", b)
            await trio.testing.wait_all_tasks_blocked()
            a_peer.send(b"first")
            b_peer.send(b"second")
            nursery.start_soon(reader, "a", a)
    assert woken == ["a", "b"]


async def test_readers_are_woken_once_per_arrival_in_arrival_order() -> None:
    assert keep_wake_order()
    readiness = Readiness()
    woken: list[int] = []

    async def reader(index: int, sock: socket.socket) -> None:
        for _ in range(2):
            await readiness.wait_readable(sock.fileno())
            sock.recv(100)
            woken.append(index)

    with watched(readiness, 4) as pairs:
        async with trio.open_nursery() as nursery:
            for index, (ours, _) in enumerate(pairs):
                nursery.start_soon(reader, index, ours)
            for order in ([2, 0, 3, 1], [1, 3, 0, 2]):
                await trio.testing.wait_all_tasks_blocked()
                for index in order:
                    pairs[index][1].send(b"x")
    assert woken == [2, 0, 3, 1, 1, 3, 0, 2]


async def test_closing_wakes_the_parked_reader_with_closed_resource_error() -> None:
    readiness = Readiness()
    with watched(readiness, 1) as [(ours, _)]:
        async with trio.open_nursery() as nursery:

            async def reader() -> None:
                with pytest.raises(trio.ClosedResourceError):
                    await readiness.wait_readable(ours.fileno())

            nursery.start_soon(reader)
            await trio.testing.wait_all_tasks_blocked()
            readiness.notify_closing(ours.fileno())


async def test_a_report_nobody_waited_for_is_kept_for_the_next_wait() -> None:
    """Input (or the peer's end) that came while nobody waited, the reader having been cancelled
    or busy, is not missed: the next wait returns at once, and only once."""
    readiness = Readiness()
    with watched(readiness, 1) as [(ours, theirs)]:
        with trio.move_on_after(0.05):
            await readiness.wait_readable(ours.fileno())
        theirs.send(b"late")
        await trio.testing.wait_all_tasks_blocked()  # (rescheduling the gone reader would crash trio)
        with trio.fail_after(5):
            await readiness.wait_readable(ours.fileno())
        assert ours.recv(100) == b"late"
        with trio.move_on_after(0.05) as unwoken:  # (that report was used up)
            await readiness.wait_readable(ours.fileno())
        assert unwoken.cancelled_caught
        theirs.shutdown(socket.SHUT_WR)
        await trio.testing.wait_all_tasks_blocked()
        with trio.fail_after(5):
            await readiness.wait_readable(ours.fileno())
        assert ours.recv(100) == b""


async def test_input_that_came_with_the_end_does_not_hide_the_end() -> None:
    """Input and the peer's end, taken in one report: the read that empties the socket of input
    does not take the end, so the end is reported to every wait after it."""
    readiness = Readiness()
    with watched(readiness, 1) as [(ours, theirs)]:
        theirs.send(b"last words")
        theirs.shutdown(socket.SHUT_WR)
        await trio.testing.wait_all_tasks_blocked()
        with trio.fail_after(5):
            await readiness.wait_readable(ours.fileno())
        assert ours.recv(100) == b"last words"
        for _ in range(2):
            with trio.fail_after(5):
                await readiness.wait_readable(ours.fileno())
            assert ours.recv(100) == b""


async def test_the_task_runs_while_some_socket_is_watched() -> None:
    readiness = Readiness()
    assert pollers() == []
    with watched(readiness, 2) as pairs:
        await trio.testing.wait_all_tasks_blocked()
        assert len(pollers()) == 1
        readiness.forget(pairs[0][0].fileno())
        await trio.testing.wait_all_tasks_blocked()
        assert len(pollers()) == 1
    await trio.testing.wait_all_tasks_blocked()
    assert pollers() == []
    with watched(readiness, 1):  # (and starts again)
        await trio.testing.wait_all_tasks_blocked()
        assert len(pollers()) == 1
    await trio.testing.wait_all_tasks_blocked()
    assert pollers() == []


async def test_a_reader_parked_with_a_callback_is_served_in_its_place() -> None:
    """Each report runs the callback in the readiness task, the reader staying parked while it
    answers ``KEEP``; its first other answer is what the reader's wait returns."""
    readiness = Readiness()
    served: list[tuple[bytes, bool]] = []
    with watched(readiness, 1) as [(ours, theirs)]:
        ours.setblocking(False)

        def serve() -> object:
            data = ours.recv(100)
            served.append((data, trio.lowlevel.current_task() in pollers()))
            return data if data == b"last" else KEEP

        async def reader() -> None:
            answer = await readiness.wait_readable(ours.fileno(), serve)
            woken.append(answer)

        woken: list[object] = []
        async with trio.open_nursery() as nursery:
            nursery.start_soon(reader)
            for data in (b"one", b"two", b"last"):
                await trio.testing.wait_all_tasks_blocked()
                assert woken == []
                theirs.send(data)
    assert served == [(b"one", True), (b"two", True), (b"last", True)]
    assert woken == [b"last"]


async def test_the_end_wakes_a_reader_parked_with_a_callback_without_running_it() -> None:
    readiness = Readiness()
    calls: list[None] = []

    def serve() -> object:
        calls.append(None)
        return KEEP

    with watched(readiness, 1) as [(ours, theirs)]:
        async with trio.open_nursery() as nursery:

            async def reader() -> None:
                assert await readiness.wait_readable(ours.fileno(), serve) is None

            nursery.start_soon(reader)
            await trio.testing.wait_all_tasks_blocked()
            theirs.shutdown(socket.SHUT_WR)
    assert calls == []


async def test_a_callback_that_raises_wakes_its_reader_plainly(caplog: pytest.LogCaptureFixture) -> None:
    """The readiness task outlives the error (it serves the next report) and logs it."""
    readiness = Readiness()

    def broken() -> object:
        raise RuntimeError("bug")

    with watched(readiness, 1) as [(ours, theirs)], caplog.at_level(logging.ERROR, logger="pubmesh"):
        async with trio.open_nursery() as nursery:

            async def reader() -> None:
                assert await readiness.wait_readable(ours.fileno(), broken) is None
                assert ours.recv(100) == b"x"
                assert await readiness.wait_readable(ours.fileno(), lambda: ours.recv(100)) == b"y"

            nursery.start_soon(reader)
            await trio.testing.wait_all_tasks_blocked()
            theirs.send(b"x")
            await trio.testing.wait_all_tasks_blocked()
            theirs.send(b"y")
    assert "in its reader's place" in caplog.text
    assert "RuntimeError: bug" in caplog.text


async def test_a_callback_that_closes_its_socket_leaves_its_reader_to_the_close() -> None:
    """Closing (as a session does when its input ends the connection) wakes the reader with
    ``ClosedResourceError``, whatever the callback answers, and it is not run again."""
    readiness = Readiness()
    calls: list[None] = []
    with watched(readiness, 1) as [(ours, theirs)]:

        def serve() -> object:
            calls.append(None)
            readiness.notify_closing(ours.fileno())
            return KEEP

        async with trio.open_nursery() as nursery:

            async def reader() -> None:
                with pytest.raises(trio.ClosedResourceError):
                    await readiness.wait_readable(ours.fileno(), serve)

            nursery.start_soon(reader)
            await trio.testing.wait_all_tasks_blocked()
            theirs.send(b"QUIT")
            await trio.testing.wait_all_tasks_blocked()
            theirs.send(b"more")
            await trio.testing.wait_all_tasks_blocked()
    assert calls == [None]


async def test_sockets_reported_together_are_served_between_hold_and_release() -> None:
    """A report naming several sockets served in place is bracketed by ``hold(True)`` and
    ``hold(False)`` (the flusher writes their output after the last); a report naming one is not."""
    calls: list[object] = []
    readiness = Readiness(calls.append)
    with watched(readiness, 2) as ((a, a_peer), (b, b_peer)):
        for ours in (a, b):
            ours.setblocking(False)

        async def reader(ours: socket.socket) -> None:
            def serve() -> object:
                calls.append(ours.recv(100))
                return KEEP

            await readiness.wait_readable(ours.fileno(), serve)

        async with trio.open_nursery() as nursery:
            for ours in (a, b):
                nursery.start_soon(reader, ours)
            await trio.testing.wait_all_tasks_blocked()
            a_peer.send(b"a1")
            b_peer.send(b"b1")  # (both before the readiness task runs: one report)
            await trio.testing.wait_all_tasks_blocked()
            assert calls == [True, b"a1", b"b1", False]
            calls.clear()
            b_peer.send(b"b2")
            await trio.testing.wait_all_tasks_blocked()
            assert calls == [b"b2"]
            nursery.cancel_scope.cancel()
