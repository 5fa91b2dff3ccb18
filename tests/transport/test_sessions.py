"""The session runner and its containment boundary, driven by a small line protocol of the tests' own."""

from __future__ import annotations

import logging
import socket
from functools import partial

import pytest
import trio
import trio.testing

from tests.support import read_until
from transport.outbox import Outbox
from transport.sessions import Flusher, Hangup, Session


class Echo:
    """Echoes each piece of input; ``boom`` in the input is a bug in the protocol code.

    (It holds an ``Outbox`` rather than extending it: the compiled class takes no interpreted
    subclasses.)
    """

    def __init__(self, name: str, session: Session, flusher: Flusher) -> None:
        self.box = Outbox(partial(flusher.wake, session))
        self.name = name
        self.hangups: list[Hangup] = []
        self.internal: list[Exception] = []

    @property
    def outbound(self) -> bytearray:
        return self.box.outbound

    @property
    def closing(self) -> str | None:
        return self.box.closing

    def take_output(self) -> bytearray:
        return self.box.take_output()

    def output_sent(self, data: bytearray, written: int) -> None:
        self.box.output_sent(data, written)

    def close(self, reason: str, *, flush: bool = True) -> None:
        self.box.close(reason, flush=flush)

    def _send(self, data: bytes) -> None:
        self.box._send(data)

    def receive_data(self, data: bytes) -> None:
        if b"boom" in data:
            raise ValueError("a bug")
        self._send(b"echo:" + data)

    def hangup(self, how: Hangup) -> None:
        self.hangups.append(how)
        self.close(how.value)

    def internal_error(self, exc: Exception) -> None:
        self.internal.append(exc)
        self._send(b"sorry\n")
        self.close("internal")

    def describe(self) -> str:
        return self.name


async def start(
    nursery: trio.Nursery, flusher: Flusher, name: str, **options: object
) -> tuple[Echo, trio.abc.Stream, trio.Event]:
    ours, theirs = trio.testing.memory_stream_pair()
    session = Session(ours)
    conn = Echo(name, session, flusher)
    session.conn = conn
    done = trio.Event()

    async def run() -> None:
        try:
            await session.run(flusher, nursery, write_deadline=5, **options)  # type: ignore[arg-type]
        finally:
            done.set()

    nursery.start_soon(run)
    return conn, theirs, done


@pytest.mark.timeout(10)
async def test_a_bug_handling_input_ends_that_connection_only(
    nursery: trio.Nursery, caplog: pytest.LogCaptureFixture
) -> None:
    flusher = Flusher()
    bad, bad_peer, bad_done = await start(nursery, flusher, "bad")
    good, good_peer, _ = await start(nursery, flusher, "good")
    with trio.fail_after(5):
        await bad_peer.send_all(b"boom")
        assert await read_until(bad_peer, b"sorry\n") == b"sorry\n"  # the protocol's own words
        await bad_done.wait()
        assert (bad.closing, [str(e) for e in bad.internal]) == ("internal", ["a bug"])
        await good_peer.send_all(b"hi")
        assert await read_until(good_peer, b"hi") == b"echo:hi"
    assert good.closing is None
    errors = [r for r in caplog.records if r.levelno == logging.ERROR]
    assert errors
    assert "bad - internal error" in errors[0].getMessage()


@pytest.mark.timeout(10)
async def test_a_bug_in_a_timer_ends_that_connection_only(nursery: trio.Nursery) -> None:
    async def failing_timer() -> None:
        await trio.sleep(0.01)
        raise RuntimeError("timer bug")

    flusher = Flusher()
    bad, _, bad_done = await start(nursery, flusher, "bad", timers=failing_timer)
    _, good_peer, _ = await start(nursery, flusher, "good")
    with trio.fail_after(5):
        await bad_done.wait()
        await good_peer.send_all(b"still")
        assert await read_until(good_peer, b"still") == b"echo:still"
    assert [str(e) for e in bad.internal] == ["timer bug"]


@pytest.mark.timeout(10)
async def test_a_failing_way_out_still_closes(nursery: trio.Nursery) -> None:
    flusher = Flusher()
    conn, peer, done = await start(nursery, flusher, "worse")

    def broken(exc: Exception) -> None:
        raise KeyError("the way out is broken too")

    conn.internal_error = broken  # type: ignore[method-assign]
    with trio.fail_after(5):
        await peer.send_all(b"boom")
        await done.wait()
    assert conn.closing == "Internal Error"


@pytest.mark.timeout(10)
async def test_the_peer_hanging_up_is_reported_in_the_protocols_terms(nursery: trio.Nursery) -> None:
    flusher = Flusher()
    conn, peer, done = await start(nursery, flusher, "leaver")
    with trio.fail_after(5):
        await peer.aclose()
        await done.wait()
    assert conn.hangups == [Hangup.CLOSED_BY_PEER]


@pytest.mark.timeout(10)
async def test_a_writer_stuck_past_its_deadline_hangs_up(
    nursery: trio.Nursery, autojump_clock: trio.testing.MockClock
) -> None:
    ours, _theirs = trio.testing.lockstep_stream_pair()  # nothing ever reads the other end
    flusher = Flusher()
    session = Session(ours)
    conn = Echo("stuck", session, flusher)
    session.conn = conn
    conn._send(b"x" * 100)
    with trio.fail_after(60):
        await session.run(flusher, nursery, write_deadline=5)
    assert conn.hangups == [Hangup.WRITE_DEADLINE]


@pytest.mark.timeout(10)
async def test_the_end_of_a_session_ends_its_timers_before_run_returns(nursery: trio.Nursery) -> None:
    states: list[str] = []

    async def timer() -> None:
        states.append("started")
        try:
            await trio.sleep_forever()
        finally:
            states.append("ended")

    flusher = Flusher()
    _, peer, done = await start(nursery, flusher, "timed", timers=timer)
    with trio.fail_after(5):
        await peer.send_all(b"hi")
        assert await read_until(peer, b"hi") == b"echo:hi"
        assert states == ["started"]
        await peer.aclose()
        await done.wait()
    assert states == ["started", "ended"]


@pytest.mark.timeout(10)
async def test_a_bug_in_the_writer_ends_that_connection_only(nursery: trio.Nursery) -> None:
    flusher = Flusher()
    bad, _, bad_done = await start(nursery, flusher, "bad")
    good, good_peer, _ = await start(nursery, flusher, "good")

    def broken() -> bytearray:
        raise RuntimeError("writer bug")

    bad.take_output = broken  # type: ignore[method-assign]
    bad._send(b"x")  # (a memory stream: every write goes through the writer task)
    with trio.fail_after(5):
        await bad_done.wait()
        await good_peer.send_all(b"still")
        assert await read_until(good_peer, b"still") == b"echo:still"
    assert (bad.closing, [str(e) for e in bad.internal]) == ("internal", ["writer bug"])
    assert good.closing is None


@pytest.mark.timeout(10)
async def test_connections_served_in_one_report_are_written_after_the_last() -> None:
    """Two clients' input reported together is handled in the readiness task, and what it
    produced is written once both have been handled (one burst for a client process holding many
    connections); a connection served alone is written at once."""
    flusher = Flusher()
    peers: list[socket.socket] = []
    seen: list[tuple[bytes, bool]] = []  # (input, whether the other peer had its echo already)

    class Watching(Echo):
        def receive_data(self, data: bytes) -> None:
            other = peers[1] if self.name == "a" else peers[0]
            try:
                waiting = bool(other.recv(100, socket.MSG_PEEK | socket.MSG_DONTWAIT))
            except BlockingIOError:
                waiting = False
            seen.append((data, waiting))
            super().receive_data(data)

    streams: list[trio.SocketStream] = []
    async with trio.open_nursery() as nursery:
        for name in ("a", "b"):
            ours, theirs = socket.socketpair()
            peers.append(theirs)
            streams.append(trio.SocketStream(trio.socket.from_stdlib_socket(ours)))
            session = Session(streams[-1])
            session.conn = Watching(name, session, flusher)
            run = partial(session.run, flusher, nursery, write_deadline=5, settled=lambda: True)
            nursery.start_soon(run)
        await exchange(peers, seen)
        for peer in peers:
            peer.close()  # (each session then ends)
    for stream in streams:
        await stream.aclose()


async def exchange(peers: list[socket.socket], seen: list[tuple[bytes, bool]]) -> None:
    with trio.fail_after(5):
        for peer in peers:  # (a reader parks to be served in place once it has had input)
            await trio.testing.wait_all_tasks_blocked()
            peer.send(b"0")
            await trio.testing.wait_all_tasks_blocked()
            assert peer.recv(100) == b"echo:0"
        del seen[:]
        peers[0].send(b"1")
        peers[1].send(b"2")  # (both before the readiness task runs: one report)
        await trio.testing.wait_all_tasks_blocked()
        assert sorted(seen) == [(b"1", False), (b"2", False)]
        assert [peer.recv(100) for peer in peers] == [b"echo:1", b"echo:2"]
        peers[1].send(b"3")
        await trio.testing.wait_all_tasks_blocked()
        peers[0].send(b"4")
        await trio.testing.wait_all_tasks_blocked()
        assert seen[2:] == [(b"3", False), (b"4", True)]
