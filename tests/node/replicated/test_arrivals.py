"""A peer's forwarded writes run in the order they came, also when one must wait for a leader;
a write that waited past its patience is refused without running (virtual clock)."""

from __future__ import annotations

from collections.abc import Awaitable

import pytest
import trio
import trio.testing

from cluster.frames import KeysReply, KeysRequest
from cluster.placement import SlotGroup, layout
from node.replicated.arrivals import Arrivals
from node.replicated.asking import MOST_HOPS
from node.replicated.forwarded import CLUSTERDOWN
from node.replicated.watching import Watching

pytestmark = pytest.mark.timeout(10)

LAYOUT = layout(("a", "b", "c"), 3)


class Path:
    """The command path as arrivals see it, with a leader that comes when told."""

    def __init__(self) -> None:
        self.leading: str | None = None
        self.events: list[tuple[str, bytes]] = []

    def leader(self, group: SlotGroup) -> str | None:
        return self.leading

    def holds(self, group: SlotGroup) -> bool:
        return False

    def run_forwarded(self, group: SlotGroup, request: KeysRequest) -> Awaitable[bytes]:
        self.events.append(("ran", request.args[-1]))

        async def committed() -> bytes:
            return b"+OK\r\n"

        return committed()

    async def forward(self, group: SlotGroup, request: KeysRequest) -> bytes:
        self.events.append(("forwarded", request.args[-1]))
        return b"$1\r\nx\r\n"


def request(n: int, *args: bytes) -> KeysRequest:
    return KeysRequest(n, "$G", 0, 0, list(args))


async def run(path: Path, requests: list[KeysRequest], then: float) -> list[KeysReply]:
    replies: list[KeysReply] = []

    def send(peer: str, frame: object) -> bool:
        assert isinstance(frame, KeysReply)
        replies.append(frame)
        return True

    async def confirmed(group: object) -> bool:
        return False

    watching = Watching(
        "a", LAYOUT, send=send, leads=lambda group: False, forward=path.forward,
        ask=lambda to, request: path.forward(LAYOUT.groups[0], request), barrier=confirmed,
    )  # fmt: skip
    arrivals = Arrivals(
        "a", LAYOUT, path, watching, send, lambda peer: 0, max_carried=1 << 20, patience=5, tick=0.1
    )
    async with trio.open_nursery() as nursery:
        arrivals.nursery = nursery
        for frame in requests:
            arrivals.receive("b", frame)
        await trio.sleep(then)
        path.leading = "a"  # (elected: the writes that waited run now, in order)
    return replies


async def test_writes_that_wait_for_a_leader_keep_their_order(
    autojump_clock: trio.testing.MockClock,
) -> None:
    path = Path()
    frames = [
        request(1, b"SET", b"k", b"1"),
        request(2, b"GET", b"k"),
        request(3, b"SET", b"k", b"3"),
    ]
    replies = await run(path, frames, then=1.0)
    assert [e for e in path.events if e[0] == "ran"] == [("ran", b"1"), ("ran", b"3")]
    # The read runs after every write that came before it (its client waits for its answer,
    # so what came after it is another client's, and may run first).
    assert path.events.index(("forwarded", b"k")) > path.events.index(("ran", b"1"))
    assert sorted(r.id for r in replies) == [1, 2, 3]


async def test_a_write_that_waited_too_long_is_refused_unrun(
    autojump_clock: trio.testing.MockClock,
) -> None:
    path = Path()
    replies = await run(path, [request(1, b"SET", b"k", b"1"), request(2, b"SET", b"k", b"2")], then=9)
    assert path.events == []
    refused = b"%s\r\n" % CLUSTERDOWN.encode()
    assert [(r.id, r.reply) for r in replies] == [(1, refused), (2, refused)]


async def test_a_pipelined_write_for_a_node_that_no_longer_leads_is_refused_not_passed_on(
    autojump_clock: trio.testing.MockClock,
) -> None:
    """(Its sender may have given up on it and sent later writes to the new leader.)"""
    path = Path()
    path.leading = "b"
    pipelined = KeysRequest(1, "$G", 0, MOST_HOPS, [b"SET", b"k", b"1"])
    replies = await run(path, [pipelined, request(2, b"SET", b"k", b"2")], then=0.5)
    assert path.events == [("forwarded", b"2")]  # (only the other write was passed on to "b")
    refused = b"%s\r\n" % CLUSTERDOWN.encode()
    assert sorted((r.id, r.reply) for r in replies) == [(1, refused), (2, b"$1\r\nx\r\n")]
