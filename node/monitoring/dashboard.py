"""The dashboard: one page of the whole super-cluster, live, served by the monitoring server.

``GET /dashboard`` is a page of static assets shipped with the package (``node/monitoring/static``:
HTML, CSS and hand-written JavaScript that draws its charts as inline SVG; nothing is fetched from
anywhere else, which the ``Content-Security-Policy`` header also tells the browser).
``GET /dashboard/events`` is a Server-Sent Events stream: first a ``history`` event (rates of the last
minutes per node and per link), then a ``snapshot`` event each round (``Picture.snapshot``).

One gather loop per node feeds every viewer: while at least one is connected, ``Dashboard.run``
asks every node through the system account (``Survey``) every ``INTERVAL`` (for its streams every
``STREAMS_EVERY`` rounds), updates the
``Picture`` and encodes the snapshot once for all. With nobody watching it asks nothing. At most
``VIEWERS_MAX`` viewers are served at a time (the next is answered 503), and each has at most
``QUEUED`` events waiting: a viewer that does not keep up is dropped (its stream ends and the
browser's EventSource reconnects), so a slow one never makes the node hold more. A round that fails
is logged and the next one tried: the page shows the last snapshot until then, with its time.
"""

from __future__ import annotations

import importlib.resources
import json
import logging
import time
from typing import Any

import attrs
import trio

from node.accounts.account import Account
from node.broker import Broker
from node.monitoring.picture import Picture
from node.monitoring.survey import REQUESTS, Survey

__all__ = ["ASSETS", "INTERVAL", "QUEUED", "STREAMS_EVERY", "VIEWERS_MAX", "Dashboard", "Viewer", "sse"]

INTERVAL = 1.0
"""Seconds between two rounds (start to start) while someone watches."""
VIEWERS_MAX = 16
"""Event streams served at a time."""
QUEUED = 4
"""Events waiting for one viewer at most; a viewer that falls further behind is dropped."""
STREAMS_EVERY = 5
"""Rounds between two in which the streams are asked for: listing them walks a node's keyspace."""

log = logging.getLogger("pubmesh")

_STATIC = importlib.resources.files("node.monitoring") / "static"
ASSETS: dict[str, tuple[bytes, str]] = {
    "/dashboard": ((_STATIC / "dashboard.html").read_bytes(), "text/html; charset=utf-8"),
    "/dashboard/app.css": ((_STATIC / "dashboard.css").read_bytes(), "text/css; charset=utf-8"),
    "/dashboard/app.js": ((_STATIC / "dashboard.js").read_bytes(), "text/javascript; charset=utf-8"),
}
"""The page's files by path: their bytes and content type."""


def sse(event: str, doc: dict[str, Any]) -> bytes:
    """One Server-Sent Event: its name and its data, a JSON document on one line."""
    return b"event: %s\ndata: %s\n\n" % (event.encode(), json.dumps(doc, separators=(",", ":")).encode())


@attrs.define(eq=False)
class Viewer:
    """One open event stream: the events waiting for it, and the scope its response runs in
    (cancelled to drop it)."""

    send: trio.MemorySendChannel[bytes]
    receive: trio.MemoryReceiveChannel[bytes]
    scope: trio.CancelScope = attrs.Factory(trio.CancelScope)


class Dashboard:
    """The node's dashboard: the picture, the loop that keeps it current, and its viewers.

    Args:
        broker: the node's broker.
        system: its system account; None without one (the event stream is then refused).
    """

    def __init__(self, broker: Broker, system: Account | None) -> None:
        self.picture = Picture(broker.server_name)
        self.survey = Survey(broker, system) if system is not None else None
        self.viewers: set[Viewer] = set()
        self.dropped = 0
        """Viewers dropped for falling behind."""
        self.rounds = 0
        self._watched = trio.Event()

    def join(self) -> Viewer | None:
        """A new viewer, its first events already queued (the history, then the latest snapshot);
        None when ``VIEWERS_MAX`` are served already or there is no system account."""
        if self.survey is None or len(self.viewers) >= VIEWERS_MAX:
            return None
        send, receive = trio.open_memory_channel[bytes](QUEUED)
        viewer = Viewer(send, receive)
        self.viewers.add(viewer)
        send.send_nowait(sse("history", self.picture.history()))
        if self.rounds:
            send.send_nowait(sse("snapshot", self.picture.snapshot()))
        self._watched.set()
        return viewer

    def leave(self, viewer: Viewer) -> None:
        """No more events for this viewer: its stream ends once it has sent those queued (the
        response closes the receiving side)."""
        self.viewers.discard(viewer)
        viewer.send.close()

    def drop_all(self) -> None:
        """End every stream (the server is stopping)."""
        for viewer in list(self.viewers):
            viewer.scope.cancel()
            self.leave(viewer)

    def _broadcast(self, data: bytes) -> None:
        for viewer in list(self.viewers):
            try:
                viewer.send.send_nowait(data)
            except trio.WouldBlock:
                self.dropped += 1
                viewer.scope.cancel()
                self.leave(viewer)
            except (trio.ClosedResourceError, trio.BrokenResourceError):
                self.leave(viewer)

    async def round(self) -> None:
        """Ask every node once and update the picture (the survey must be open)."""
        assert self.survey is not None
        expected = sum(1 for t in self.picture.nodes.values() if t.state == "up")
        endpoints = [endpoint for endpoint, _ in REQUESTS]
        if self.rounds % STREAMS_EVERY:
            endpoints.remove("STREAMZ")
        answers = await self.survey.ask(endpoints, expected)
        self.picture.update(answers, time.time())
        for when, payload in self.survey.take_advisories():
            self.picture.note_advisory(payload, when)
        self.rounds += 1

    async def run(self, shutdown: trio.Event) -> None:
        """Keep the picture current while anyone watches, until ``shutdown``: then end every
        stream."""
        async with trio.open_nursery() as nursery:
            if self.survey is not None:
                nursery.start_soon(self._gather, self.survey)
            await shutdown.wait()
            self.drop_all()
            nursery.cancel_scope.cancel()

    async def _gather(self, survey: Survey) -> None:
        while True:
            await self._watched.wait()
            survey.open()
            try:
                while self.viewers:
                    started = trio.current_time()
                    try:
                        await self.round()
                        self._broadcast(sse("snapshot", self.picture.snapshot()))
                    except Exception:  # (logged; the next round is tried as usual)
                        log.exception("dashboard: a gather round failed")
                    await trio.sleep_until(started + INTERVAL)
            finally:
                survey.close()
            self._watched = trio.Event()
