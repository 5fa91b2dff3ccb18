"""Sockets kept armed for input: one epoll of the node's, one task waking the readers it reports.

trio waits for a socket by arming it in its epoll for one event (``EPOLLONESHOT``) and disarming it
after: one ``epoll_ctl`` call and a round of trio's bookkeeping every time a reader waits, which for a
client waiting for each reply is once per request. A ``Readiness`` registers each socket once, for
as long as its session reads, edge-triggered, in an epoll of its own; one task waits for that epoll
(through trio, like any file descriptor) and, each time it reports, wakes the readers parked on the
sockets it names, in the order the kernel names them. Measured with 50 redis-benchmark clients, no
pipelining: 15.1-16.0 µs of the node's CPU per ``SET`` against 18.7-19.5, 20% more requests per
second.

**Order.** A socket that stays armed is reported in the order input reached it, also when that input
came while its reader was busy (with trio's per-wait arming, input arriving before the reader waited
again was reported after input that later reached a socket already armed). So readers are woken in
arrival order, and ``transport.wake_order`` keeps trio running them in that order.

**Reports nobody waits for.** An edge-triggered socket is reported once per arrival (of input, of
the peer's end, of an error). A report that finds nobody parked on its socket is kept, and the next
wait returns at once (after a checkpoint): the reader then reads, finding what came, or nothing
(what the report was for was read already, and it waits again). The end of input (the peer's
``FIN``, an error) is a state rather than an arrival: once reported, every wait returns at once. So
a reader may park without looking first, and nothing is missed: a report this task takes while the
reader is busy is kept, one it has not taken yet wakes the reader once it parks, and input that came
with the end (one report for both) cannot hide the end behind a read that emptied the socket.

**Serving in place.** A reader may park with a ``serve`` callback: then a report for its socket runs
the callback in this task, in the reader's place, and the reader stays parked unless the callback
answers something other than ``KEEP`` (which its wait then returns). A session's callback reads and
handles the input itself when nothing else has to be awaited after it, so a client waiting for each
reply costs no trip through trio's scheduler per request (one is about 4 µs here: a reader woken,
run, parked again); readers served in place are handled in exactly the order the kernel reported
them. A callback must not raise; if it does, its reader is woken plainly and the error logged.
When one report names several sockets, they are served between ``hold(True)`` and ``hold(False)``:
the node's ``transport.sessions.Flusher`` holds the output they produce until the last has been
served, then writes each connection's at once, as redis-server writes its replies before it next
waits. A client that has many connections in one process (redis-benchmark, a pool) is then woken
once for a burst of replies instead of once for each: waking a sleeping peer was a third of the
node's time with 50 pipelining clients, and serving them went from 0.64-0.66 to 0.74-0.79 million
GET or SET per second.

**Lifetime.** The task runs while some socket is registered, as a trio system task (it is no
session's, and must outlive any one nursery of the node's): it starts with the first registration and
ends, closing its epoll, when the last socket is forgotten. A socket must be forgotten before it is
closed. Linux only, as trio's own I/O there (epoll).
"""

from __future__ import annotations

import contextlib
import logging
import select
from collections.abc import Callable
from typing import Final

import outcome
import trio

__all__ = ["KEEP", "Readiness"]

log = logging.getLogger("pubmesh")

KEEP: Final = object()
"""What a ``serve`` callback answers when its reader is to stay parked (it handled the report)."""

_ENDED = select.EPOLLRDHUP | select.EPOLLHUP | select.EPOLLERR
_TASK = "transport.readiness.Readiness._run"
"""The task's name (given as text: trio names a task by its function's ``__qualname__``, which a
compiled method lacks)."""


class Readiness:
    """Edge-triggered input readiness for many sockets, one waiting task for all of them."""

    __slots__ = ("_ended", "_epoll", "_hold", "_parked", "_ready", "_scope", "_serving")

    def __init__(self, hold: Callable[[bool], None] | None = None) -> None:
        self._hold = hold
        """Called with True before the sockets of one report are served in place, if there are
        several, and with False after them (see the module's notes on serving in place)."""
        self._epoll: select.epoll | None = None
        self._parked: dict[int, trio.lowlevel.Task | None] = {}
        """By registered socket: the reader parked on it, if one is."""
        self._ready: set[int] = set()
        """Registered sockets reported while nobody was parked on them."""
        self._ended: set[int] = set()
        """Registered sockets whose input has ended (the peer's end, an error)."""
        self._serving: dict[int, Callable[[], object]] = {}
        """By socket: the callback its parked reader left to be run in its place."""
        self._scope: trio.CancelScope | None = None

    def watch(self, fd: int) -> None:
        """Register a socket (until ``forget``); its reader may then ``wait_readable``."""
        if self._epoll is None:
            self._epoll, self._scope = select.epoll(), trio.CancelScope()
            trio.lowlevel.spawn_system_task(self._run, self._epoll, self._scope, name=_TASK)
        self._epoll.register(fd, select.EPOLLIN | select.EPOLLRDHUP | select.EPOLLET)
        self._parked[fd] = None

    def forget(self, fd: int) -> None:
        """Unregister a socket (before it is closed); a reader parked on it gets
        ``ClosedResourceError``."""
        if fd not in self._parked:
            return
        self.notify_closing(fd)
        del self._parked[fd]
        self._serving.pop(fd, None)
        self._ready.discard(fd)
        self._ended.discard(fd)
        assert self._epoll is not None
        assert self._scope is not None
        with contextlib.suppress(OSError):  # (closed already, against the rule: the kernel dropped it)
            self._epoll.unregister(fd)
        if not self._parked:  # (the last one: the task ends and closes the epoll)
            self._scope.cancel()
            self._epoll = self._scope = None

    def notify_closing(self, fd: int) -> None:
        """Wake the reader parked on a socket, if one is, with ``ClosedResourceError`` (as trio's
        ``notify_closing`` does for its own waits)."""
        task = self._parked.get(fd)
        if task is not None:
            self._parked[fd] = None
            self._serving.pop(fd, None)
            trio.lowlevel.reschedule(task, outcome.Error(trio.ClosedResourceError()))

    async def wait_readable(self, fd: int, serve: Callable[[], object] | None = None) -> object:
        """Park until the (registered) socket reports input (at once if it did while nobody was
        parked on it, or if its input has ended): None then. With ``serve``, a report runs it in
        this reader's place first (see the module's notes): what it answered, unless ``KEEP``."""
        if fd in self._ready or fd in self._ended:
            self._ready.discard(fd)
            await trio.lowlevel.checkpoint()
            return None
        parked, serving = self._parked, self._serving
        parked[fd] = trio.lowlevel.current_task()
        if serve is not None:
            serving[fd] = serve

        def abort(_: object) -> trio.lowlevel.Abort:
            if fd in parked:
                parked[fd] = None
            serving.pop(fd, None)
            return trio.lowlevel.Abort.SUCCEEDED

        return await trio.lowlevel.wait_task_rescheduled(abort)

    async def _run(self, epoll: select.epoll, scope: trio.CancelScope) -> None:
        hold = self._hold
        with scope:
            try:
                while True:
                    await trio.lowlevel.wait_readable(epoll)
                    reports = epoll.poll(0)
                    if hold is None or len(reports) < 2:
                        self._take(reports)
                        continue
                    hold(True)
                    try:
                        self._take(reports)
                    finally:
                        hold(False)
            finally:
                epoll.close()

    def _take(self, reports: list[tuple[int, int]]) -> None:
        """Wake (or serve in place) the readers parked on the sockets reported, in that order."""
        parked, ready, ended, serving = self._parked, self._ready, self._ended, self._serving
        reschedule = trio.lowlevel.reschedule
        for fd, events in reports:
            if fd not in parked:
                continue  # (forgotten since it was reported)
            if events & _ENDED:
                ended.add(fd)
            task = parked[fd]
            if task is None:
                ready.add(fd)
                continue
            answer = None
            serve = serving.get(fd)
            if serve is not None and not events & _ENDED:
                answer = _served(serve)
                if parked.get(fd) is not task or answer is KEEP:
                    continue  # (still parked, or woken meanwhile: stopped, closed)
            parked[fd] = None
            serving.pop(fd, None)
            reschedule(task, outcome.Value(answer))


def _served(serve: Callable[[], object]) -> object:
    """Run a reader's ``serve`` callback: its answer (None, a plain wake, if it raised: this task
    must never raise, as a system task's error would end the node)."""
    try:
        return serve()
    except Exception:
        log.exception("internal error serving a socket's input in its reader's place")
        return None
