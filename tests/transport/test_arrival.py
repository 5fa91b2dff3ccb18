"""Sessions of one ``Arrivals`` group take their input in the order it reached their sockets, even when
trio wakes their readers together and runs them in the other order."""

from __future__ import annotations

import socket
from functools import partial

import pytest
import trio

from tests.transport.test_sessions import Echo
from transport.arrival import Arrivals
from transport.sessions import Flusher, Session

ROUNDS = 200


class Recorder(Echo):
    """Notes which connection was handed input, in the order they were."""

    def __init__(self, name: str, session: Session, flusher: Flusher, seen: list[str]) -> None:
        super().__init__(name, session, flusher)
        self.seen = seen

    def receive_data(self, data: bytes) -> None:
        self.seen.append(self.name)


@pytest.mark.timeout(30)
async def test_input_is_taken_in_the_order_it_arrived() -> None:
    flusher, arrivals = Flusher(), Arrivals()
    seen: list[str] = []
    peers: list[socket.socket] = []
    sessions: list[Session] = []
    with trio.fail_after(20):
        async with trio.open_nursery() as nursery:
            for name in ("first", "second"):
                ours, theirs = socket.socketpair()
                session = Session(trio.SocketStream(trio.socket.from_stdlib_socket(ours)))
                session.conn = Recorder(name, session, flusher, seen)
                nursery.start_soon(partial(session.run, flusher, write_deadline=5, arrivals=arrivals))
                peers.append(theirs)
                sessions.append(session)
            for done in range(1, ROUNDS + 1):
                while len(arrivals.waiting) < 2:  # (until both readers wait for input)
                    await trio.lowlevel.checkpoint()
                for peer in peers:  # (no checkpoint in between: trio wakes both readers together)
                    peer.send(b"x")
                while len(seen) < 2 * done:
                    await trio.lowlevel.checkpoint()
            for peer in peers:
                peer.close()  # (the sessions end)
        for session in sessions:
            await session.stream.aclose()
    assert seen == ["first", "second"] * ROUNDS
